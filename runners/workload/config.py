"""A workload's settings (:class:`WorkloadConfig`): which requests a run sends and when, as a
config validates them, without the modules that build the requests (numpy, the dataset readers'
work), so a config loads and refuses bad input quickly. :mod:`runners.workload.builder` builds
the requests from it."""

from __future__ import annotations

from pydantic import Field, model_validator

from runners.input_model import MAX_SEED, InputModel, field_error
from runners.workload.arrivals import ArrivalConfig
from runners.workload.conversations import DatasetSource, LengthFilter
from runners.workload.sessions import MultiTurnConfig
from runners.workload.slo import TASKS
from runners.workload.traces import TraceConfig

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


class SystemPrompt(InputModel):
    """A shared system prompt put before the prompts of a share of the requests: the second source
    of common prefixes (issue 31) beside traces. ``prompts`` distinct ones of ``tokens`` tokens
    each; a request gets one, drawn uniformly, with probability ``share`` (on a random stream of
    its own, so the requests are otherwise those of the run without it)."""

    tokens: int = Field(default=512, ge=1, le=32_768, description="tokens of each system prompt")
    share: float = Field(default=1.0, ge=0, le=1, description="share of the requests that start with one (0-1)")
    prompts: int = Field(default=1, ge=1, le=10_000, description="distinct system prompts, drawn uniformly")


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
        "record and row, a few kB: a million is several GB; split bigger benchmarks into runs); with "
        "multi_turn, the number of sessions",
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="workload and arrival seed")
    arrival: ArrivalConfig = Field(default_factory=ArrivalConfig)
    filters: LengthFilter = Field(default_factory=LengthFilter)
    tokenizer: str | None = Field(
        default=None,
        description="local Hugging Face tokenizer folder; default for real engines: the server's own tokenizer "
        "(vLLM /tokenize, or the model folder), else about 4 characters per token",
    )
    system_prompt: SystemPrompt | None = Field(
        default=None,
        description="a shared system prompt before the prompts of a share of the requests (their prompts "
        "and input tokens grow by its tokens; a prefix an engine's cache can share); not with a trace",
    )
    trace: TraceConfig | None = Field(
        default=None,
        description="a production trace to replay (Mooncake, Azure, BurstGPT): its own arrival times (divided by "
        "trace.speedup), lengths and tasks; the run sends its first min(requests, records) records, and the "
        "datasets, ratio, filters and arrival process are not used",
    )

    multi_turn: MultiTurnConfig | None = Field(
        default=None,
        description="send whole conversations turn by turn (runners.workload.sessions): requests counts sessions, "
        "each turn's prompt is the conversation so far, sent when the previous reply has arrived plus a think "
        "time; not with a trace",
    )

    @model_validator(mode="after")
    def _trace_or_arrivals(self) -> "WorkloadConfig":
        if self.trace is not None and self.multi_turn is not None:
            raise field_error(
                "WorkloadConfig",
                "multi_turn",
                "workload.multi_turn and workload.trace are both set: a trace replays its own requests; "
                "expected one of them (drop --multi-turn or --trace)",
                self.multi_turn.model_dump(),
            )
        if self.trace is not None and self.system_prompt is not None:
            raise field_error(
                "WorkloadConfig",
                "system_prompt",
                "workload.system_prompt and workload.trace are both set: a trace's prompts are its own; "
                "expected one of them",
                self.system_prompt.model_dump(),
            )
        if self.trace is not None and self.arrival != ArrivalConfig():
            raise field_error(
                "WorkloadConfig",
                "arrival",
                "workload.arrival and workload.trace are both set: a trace replays its own arrival times "
                "(speed them up with workload.trace.speedup); expected one of them (drop the arrival "
                "settings, --arrival/--rate/--burstiness, or the trace)",
                self.arrival.model_dump(exclude_defaults=True),
            )
        return self

    @property
    def is_synthetic(self) -> bool:
        if self.trace is not None:
            return self.trace.is_synthetic
        counts = self.ratio.counts(self.requests)
        return any(getattr(self, task).kind == "synthetic" for task in TASKS if counts[task] > 0)

    def label(self) -> str:
        """Short human-readable name, marked synthetic when any part is."""
        if self.trace is not None:
            # the count is an upper bound: a trace with fewer records sends them all
            return (
                f"first {self.requests} req of {self.trace.label()}{' (synthetic)' if self.trace.is_synthetic else ''}"
            )
        counts = self.ratio.counts(self.requests)
        parts = []
        for task in TASKS:
            if counts[task]:
                source = getattr(self, task)
                parts.append(f"{task}:{'synthetic' if source.kind == 'synthetic' else source.kind}")
        rate = "" if self.arrival.process in ("all-at-once", "replay") else f"@{self.arrival.rate:g}/s"
        system = ""
        if self.system_prompt is not None:
            shared = self.system_prompt
            system = f" +sys {shared.prompts}x{shared.tokens}tok@{shared.share:g}"
        if self.multi_turn is not None:
            system += f" ({self.multi_turn.label()})"
        unit = "sessions" if self.multi_turn is not None else "req"
        return f"{self.requests} {unit} {' + '.join(parts)} {self.arrival.process}{rate}{system}"
