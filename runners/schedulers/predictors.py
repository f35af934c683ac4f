"""Predictors shared by the papers' schedulers: request latency from the latency model, output
length per task (a Gaussian per task, the SLO-aware paper's method, or an oracle), and each
instance's KV memory from telemetry.

Output lengths (004 section 4.2 and 5.1): the paper's request profiler models each task's output
lengths as a Gaussian - from a distribution the user gives per task, or from profiling data - and
keeps updating its mean and std with the actual lengths of finished requests; a new request's
prediction is a random integer drawn from that Gaussian. Here the Gaussian starts from one of
(:class:`OutputPriorParams`, ``output_prior``):

- ``calibration`` (the default): a calibration sample of the same datasets that this run does not
  send (up to :data:`runners.workload.builder.CALIBRATION_SAMPLE` conversations per task, drawn
  from those the run's sample left out): the per-task profiling data a user would collect before
  a run, never this run's own requests;
- ``history``: a previous run's finished requests (its ``requests.parquet``);
- ``cold``: nothing (``prior_tokens`` until a request of the task finishes);
- ``workload-oracle``: the mean and spread of *this run's own* target output lengths, future
  requests included - an oracle of the sample's moments, labelled as one wherever results show
  (``"workload"``, its name before schema 5, is read as this).

Finished requests are pooled into the Gaussian as they come, whatever the start.

Each request gets one standard-normal deviate z, drawn the first time it is predicted; its
prediction is mean + z * std of its task's Gaussian *as it is now*, so a waiting request's
prediction is redrawn from the refreshed fit at every re-plan while the plan only moves when the
fit moves (not because the dice were thrown again). Oracle and noisy-oracle (target x (1 + noise
* z)) are kept for the paper's sensitivity study (Fig. 9): both read the request's target length
and are oracles (:func:`oracle_knowledge`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, model_validator

from runners import paths
from runners.engines.latency_model import LatencyModel
from runners.errors import SchedlabError
from runners.input_model import InputModel, field_error
from runners.workload.requests import Request

OutputMode = Literal["gaussian", "oracle", "noisy-oracle"]
#: Where a per-task output-length Gaussian starts (see the module docstring).
PriorChoice = Literal["calibration", "history", "cold", "workload-oracle"]
#: The oracle prior: it reads this run's own length statistics.
ORACLE_PRIORS: frozenset[str] = frozenset({"workload-oracle"})
#: The prior's name before result schema 5 (it meant the oracle of this run's own moments).
LEGACY_WORKLOAD_PRIOR = "workload"


def _legacy_prior(value: Any) -> Any:
    """Read the old name ``workload`` as ``workload-oracle`` (what it always was)."""
    return "workload-oracle" if value == LEGACY_WORKLOAD_PRIOR else value


#: ``output_prior``'s type: a :data:`PriorChoice`, the legacy ``workload`` read as ``workload-oracle``.
PriorSource = Annotated[PriorChoice, BeforeValidator(_legacy_prior)]
#: What output_prior's help says of each choice (one text for every model that has the field).
PRIOR_HELP = (
    "calibration: each task's output lengths in a calibration sample of the same datasets that this run "
    "does not send (profiling data from outside the run); history: a previous run's finished requests "
    "(output_history); cold: the first guess until a request of the task finishes; workload-oracle: the "
    "mean and spread of this run's own target lengths, future requests included (an oracle, labelled "
    "as one). Finished requests are pooled in as they come in every case"
)


class OutputPredictorParams(InputModel):
    """How a scheduler guesses output lengths (tokens)."""

    output_predictor: OutputMode = Field(
        title="output-length predictor",
        default="gaussian",
        description="gaussian: per-task normal fitted online from finished requests (SLO-aware paper); "
        "oracle: the true target; noisy-oracle: target x (1 + N(0, noise))",
    )
    noise: float = Field(
        title="noisy-oracle error (relative std)",
        default=0.2,
        ge=0,
        description="noisy-oracle: standard deviation of the relative error, a fraction (0.2: 20% of the "
        "target output length), >= 0",
    )
    prior_tokens: int = Field(
        title="first output-length guess (tokens)",
        default=256,
        gt=0,
        description="gaussian with output_prior cold: predicted output length, tokens, until a request "
        "of the task finishes",
    )
    predictor_seed: int = Field(
        title="predictor seed",
        default=0,
        ge=0,
        description="seed of the random draws behind predictions: each request's one standard-normal "
        "deviate z (gaussian: mean + z x std of its task; noisy-oracle: target x (1 + noise x z)). "
        "The same seed and workload give the same predictions; oracle draws nothing",
    )


class OutputPriorParams(OutputPredictorParams):
    """Where the per-task Gaussian starts (used by output_predictor gaussian)."""

    output_prior: PriorSource = Field(
        title="output-length prior",
        default="calibration",
        description="gaussian: where each task's Gaussian starts - " + PRIOR_HELP,
    )
    output_history: str | None = Field(
        title="history run folder",
        default=None,
        description="output_prior history: a previous run's folder (its requests.parquet gives each "
        "task's finished output lengths)",
    )

    @model_validator(mode="after")
    def _history_is_a_run(self) -> "OutputPriorParams":
        name = type(self).__name__
        if self.output_prior != "history":
            if self.output_history is not None:
                raise field_error(
                    name,
                    "output_history",
                    "is only read with output_prior 'history'; set "
                    "output_prior to 'history' or leave output_history unset",
                    self.output_history,
                )
            return self
        if not self.output_history:
            raise field_error(
                name, "output_history", "output_prior 'history' needs a previous run's folder", self.output_history
            )
        try:
            history_moments(self.output_history)
        except SchedlabError as exc:
            raise field_error(name, "output_history", str(exc), self.output_history) from None
        self.output_history = str(Path(self.output_history).resolve())
        return self


@dataclass
class RunningMoments:
    """Running count, mean and variance (Welford), for lengths seen one at a time."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, value: float) -> None:  # Welford
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)

    def merge(self, other: "RunningMoments") -> None:
        """Pool ``other``'s values into these (Chan et al.'s parallel update)."""
        if other.count == 0:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean += delta * other.count / total
        self.m2 += other.m2 + delta * delta * self.count * other.count / total
        self.count = total

    @classmethod
    def of(cls, values: Iterable[float]) -> "RunningMoments":
        moments = cls()
        for value in values:
            moments.add(float(value))
        return moments

    @property
    def variance(self) -> float:
        return self.m2 / (self.count - 1) if self.count > 1 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)


def moments_by_task(pairs: Iterable[tuple[str, float]]) -> dict[str, RunningMoments]:
    """(task, output tokens) pairs -> each task's moments."""
    moments: dict[str, RunningMoments] = {}
    for task, tokens in pairs:
        moments.setdefault(task, RunningMoments()).add(float(tokens))
    return moments


def history_moments(folder: str | Path | None) -> dict[str, RunningMoments]:
    """Each task's output-length moments (tokens) from the finished requests of the run in
    ``folder`` (rows of its requests.parquet with no error and output_tokens >= 1).
    SchedlabError, one line, when ``folder`` is None (no output_history given), not a readable
    run folder or holds none."""
    from runners.store.result_store import REQUEST_COLUMNS, read_summary, read_table  # the store imports pandas

    if folder is None:
        raise SchedlabError("output_prior 'history' needs a previous run's folder (output_history); none was given")
    path = Path(folder)
    if not paths.exists(path):
        raise SchedlabError(
            f"{folder} does not exist; expected a previous run's folder (holding summary.json and requests.parquet)"
        )
    if not paths.is_dir(path):
        raise SchedlabError(
            f"{folder} is a file, not a run folder; give the folder of a previous run (the one "
            "holding summary.json and requests.parquet)"
        )
    if (path / "study.json").exists() and not (path / "summary.json").exists():
        raise SchedlabError(f"{folder} is a study, not a run folder; give one of its runs' folders")
    if not (path / "summary.json").exists():
        raise SchedlabError(f"{folder} is not a run folder (no summary.json); give the folder of a previous run")
    read_summary(path)  # damaged or incomplete runs: one line naming the file
    frame = read_table(path, "requests", REQUEST_COLUMNS)
    finished = frame[frame["error"].isna() & frame["task"].notna() & (frame["output_tokens"] >= 1)]
    if finished.empty:
        raise SchedlabError(
            f"{folder}: its requests.parquet holds no finished request (a row with output_tokens "
            ">= 1 and no error) to learn output lengths from"
        )
    return moments_by_task(zip(finished["task"], finished["output_tokens"]))


def calibration_moments(calibration: Mapping[str, Sequence[int]] | None) -> dict[str, RunningMoments]:
    """Each task's output-length moments (tokens) in a calibration sample (task -> lengths)."""
    return {task: RunningMoments.of(lengths) for task, lengths in (calibration or {}).items() if len(lengths)}


def prior_moments(
    source: str,
    history: str | None = None,
    workload: Sequence[Request] = (),
    calibration: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, RunningMoments]:
    """The per-task output-length moments (tokens) an ``output_prior`` of ``source`` starts from
    (see the module docstring); empty for ``cold``."""
    if source == "calibration":
        return calibration_moments(calibration)
    if source == "history":
        return history_moments(history)
    if source == "workload-oracle":
        return moments_by_task((r.task, r.target_output_tokens) for r in workload)
    return {}


def oracle_knowledge(params: Any) -> list[str]:
    """What of a run's own future a policy with ``params`` sees (an empty list: nothing): one
    sentence per oracle, from its output-length predictor and prior. Used to label results."""
    said: list[str] = []
    predictor = getattr(params, "output_predictor", None)
    if predictor == "oracle":
        said.append("oracle: each request's exact output length (output_predictor oracle)")
    elif predictor == "noisy-oracle":
        said.append("oracle: each request's output length with a known error (output_predictor noisy-oracle)")
    prior = getattr(params, "output_prior", None)
    if prior in ORACLE_PRIORS and predictor in (None, "gaussian"):
        said.append("oracle: the mean and spread of this run's own output lengths (output_prior workload-oracle)")
    if prior == "max_tokens":
        said.append("oracle: each request's max_tokens, its exact output length (output_prior max_tokens)")
    return said


@dataclass
class OutputLengthPredictor:
    """Predicts a request's output tokens from its task's Gaussian (or the target, for the oracles).

    ``warm`` seeds the per-task moments (a prior), ``observe`` pools a finished request in. A
    request's deviate is drawn once (seeded, in the order requests are first predicted); its
    prediction follows its task's Gaussian as the fit is refreshed.
    """

    mode: OutputMode = "gaussian"
    noise: float = 0.2
    prior_tokens: int = 256
    seed: int = 0
    _moments: dict[str, RunningMoments] = field(default_factory=dict)
    _deviate: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    @classmethod
    def from_params(
        cls,
        params: OutputPredictorParams,
        workload: Sequence[Request] = (),
        calibration: Mapping[str, Sequence[int]] | None = None,
    ) -> "OutputLengthPredictor":
        """The predictor ``params`` describe, its per-task Gaussian warmed as ``output_prior`` says:
        from ``calibration`` (task -> output tokens of a calibration sample outside the run, given
        to the policy by :meth:`~runners.schedulers.base.SchedulerPolicy.on_calibration`; a task
        without one starts cold), a previous run's requests (history), or the moments of
        ``workload``'s own target lengths (workload-oracle)."""
        predictor = cls(params.output_predictor, params.noise, params.prior_tokens, params.predictor_seed)
        if params.output_predictor == "gaussian" and isinstance(params, OutputPriorParams):
            predictor.warm(prior_moments(params.output_prior, params.output_history, workload, calibration))
        return predictor

    def warm(self, moments: Mapping[str, RunningMoments]) -> None:
        """Pool a prior (per-task moments of output tokens) into the fit."""
        for task, prior in moments.items():
            self._moments.setdefault(task, RunningMoments()).merge(prior)

    def observe(self, task: str, output_tokens: int) -> None:
        """A request of ``task`` finished with ``output_tokens``: update the task's Gaussian."""
        self._moments.setdefault(task, RunningMoments()).add(float(output_tokens))

    def fitted(self, task: str) -> tuple[float, float] | None:
        """(mean, std) of the task's fitted Gaussian (tokens), or None before any observation."""
        moments = self._moments.get(task)
        return (moments.mean, moments.std) if moments and moments.count else None

    def predict(self, request: Request) -> int:
        """Predicted output tokens (>= 1) for ``request``, from its deviate and the current fit."""
        z = self._deviate.get(request.request_id)
        if z is None:
            z = self._deviate[request.request_id] = float(self._rng.standard_normal())
        if self.mode == "oracle":
            value = float(request.target_output_tokens)
        elif self.mode == "noisy-oracle":
            value = request.target_output_tokens * (1.0 + self.noise * z)
        else:
            fit = self.fitted(request.task)
            value = self.prior_tokens if fit is None else fit[0] + fit[1] * z
        return max(1, int(round(value)))

    def forget(self, request_id: str) -> None:
        self._deviate.pop(request_id, None)


@dataclass(frozen=True)
class LatencyPredictor:
    """Request latencies (seconds) from the latency model, for a request served in a batch of b."""

    model: LatencyModel

    def e2e(self, batch: int, input_tokens: float, output_tokens: int) -> float:
        return self.model.prefill_time(batch, input_tokens) + self.model.decode_time(batch, input_tokens, output_tokens)


@dataclass
class InstanceMemory:
    """What a policy knows of one instance's KV cache: capacity (tokens) and latest usage (0-1)."""

    capacity_tokens: int | None
    usage: float | None = None

    @property
    def free_tokens(self) -> float | None:
        if self.capacity_tokens is None:
            return None
        return self.capacity_tokens * (1.0 - (self.usage or 0.0))
