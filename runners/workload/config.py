"""A workload's settings (:class:`WorkloadConfig`): which requests a run sends and when, as a
config validates them, without the modules that build the requests (numpy, the dataset readers'
work), so a config loads and refuses bad input quickly. :mod:`runners.workload.builder` builds
the requests from it."""

from __future__ import annotations

from pydantic import Field, model_validator

from runners.input_model import MAX_SEED, InputModel
from runners.workload.arrivals import ArrivalConfig
from runners.workload.conversations import DatasetSource, LengthFilter
from runners.workload.slo import TASKS

#: Most requests in one run. Every request is held in memory with its record and its result row
#: (a few kB each, so a million is several GB), and at the default 4 req/s a million requests
#: take 2.9 days; for more, run several runs.
MAX_REQUESTS = 1_000_000


class MixRatio(InputModel):
    """Relative weights of the tasks; the SLO-aware paper mixes 1:1. Each finite, 0 to 1e6."""

    chat: float = Field(default=1.0, ge=0, le=1e6)
    code: float = Field(default=1.0, ge=0, le=1e6)

    @model_validator(mode="after")
    def _positive_total(self) -> "MixRatio":
        if self.chat + self.code <= 0:
            raise ValueError("chat + code must be > 0 (for example chat: 1, code: 1)")
        return self

    def counts(self, total: int) -> dict[str, int]:
        """How many requests of each task make up ``total`` (chat rounded, code the rest)."""
        chat = int(round(total * self.chat / (self.chat + self.code)))
        return {"chat": chat, "code": total - chat}


class WorkloadConfig(InputModel):
    """Everything that decides which requests a run sends and when."""

    chat: DatasetSource = Field(default_factory=DatasetSource)
    code: DatasetSource = Field(default_factory=DatasetSource)
    ratio: MixRatio = Field(default_factory=MixRatio)
    requests: int = Field(
        default=500,
        gt=0,
        le=MAX_REQUESTS,
        description=f"number of requests in the run, at most {MAX_REQUESTS:,} (each is held in memory with its "
        "record and row, a few kB: a million is several GB; split bigger benchmarks into runs)",
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="workload and arrival seed")
    arrival: ArrivalConfig = Field(default_factory=ArrivalConfig)
    filters: LengthFilter = Field(default_factory=LengthFilter)
    tokenizer: str | None = Field(
        default=None,
        description="local Hugging Face tokenizer folder; default for real engines: the server's own tokenizer "
        "(vLLM /tokenize, or the model folder), else about 4 characters per token",
    )

    @property
    def is_synthetic(self) -> bool:
        counts = self.ratio.counts(self.requests)
        return any(getattr(self, task).kind == "synthetic" for task in TASKS if counts[task] > 0)

    def label(self) -> str:
        """Short human-readable name, marked synthetic when any part is."""
        counts = self.ratio.counts(self.requests)
        parts = []
        for task in TASKS:
            if counts[task]:
                source = getattr(self, task)
                parts.append(f"{task}:{'synthetic' if source.kind == 'synthetic' else source.kind}")
        rate = "" if self.arrival.process in ("all-at-once", "replay") else f"@{self.arrival.rate:g}/s"
        return f"{self.requests} req {' + '.join(parts)} {self.arrival.process}{rate}"
