"""Memory-aware and SLA-constrained dynamic batch size (Pang, Li, Wang; 000 Alg. 1 and Alg. 2),
as a per-instance cap on the requests a client keeps in flight.

Alg. 1 (memory): with eta the KV capacity (tokens), per-request mean mu = E[l_in] + E[l_out] and
standard deviation sigma = sqrt(Var l_in + Var l_out), and theta = Phi^-1(1 - eps_M), the largest
batch whose total KV demand S stays within eta with probability 1 - eps_M (CLT, eq. 10-12) is
    b* = ((sqrt((sigma theta)^2 + 4 mu eta) - sigma theta) / (2 mu))^2,
the safety buffer is L0 = theta sigma sqrt(b*), and b_t = floor((eta - L0) / mu) (eq. 13-14).
(The paper writes L0 = eta - (theta sigma_S + mu_S); the form above is the one consistent with
its eq. 12, with mu and sigma per request.) The size is updated only when both prefilling and
decoding requests exist, then clamped to [decoding now, B_max].

Where the numbers come from:

* E[l_in], Var l_in: the prompt lengths of the requests arrived so far (known on arrival).
* E[l_out], Var l_out: the **warm per-task prior** (``output_prior``, the same choice slo-sa
  offers, :mod:`runners.schedulers.predictors`): by default each task's output lengths in a
  calibration sample of the same datasets that the run does not send; or a previous run's
  finished requests; or cold (``prior_output_tokens`` until a request of the task finishes); or,
  as a labelled oracle, the moments of this run's own target lengths (workload-oracle). Finished requests are pooled in
  as they come. The per-request moments are those of the mixture of tasks in the arrival mix so
  far (law of total variance). Not the finished requests alone: when all requests arrive at once
  the first to finish are the shortest, and a mean of them alone under-states E[l_out] by far.
* Blocks: the engine holds KV in blocks of ``block_size`` tokens (vLLM: 16, or 128 on some
  backends), so a request of x tokens holds ceil(x / block) blocks. With the rounding residue
  taken as uniform, its footprint in tokens has mean E[x] + (block - 1) / 2 and variance
  Var x + (block^2 - 1) / 12; Alg. 1 runs on those (the paper: "implemented using blocks").
* B_max: the engine's running slots (``max_num_seqs``, as the run discovered or stated it:
  runners.engines.beliefs, each source in engine.json) unless ``b_max`` is given; a ``b_max``
  above the engine's slots is refused, since the engine would queue the extra requests itself.
  To let the cap grow, configure the engine for it (``engine.max_num_seqs``, vLLM
  ``--max-num-seqs``): B_max follows it.

Alg. 2 (SLA): a window [b_low, b_high] in [B_min, B_max] moves with the recent mean decode
latency tau and the recent mean batch b (requests in flight):
    tau > D + eps: b_high = max(b, b_low + alpha), b_low = max(b_low - delta, B_min)
    tau < D - eps: b_low = min(b, b_high - alpha), b_high = min(b_high + delta, B_max)
    otherwise:     b_high = min(b + alpha // 2, B_max), b_low = max(b - alpha // 2, B_min)
then b_t = floor((b_low + b_high) / 2), clamped as Alg. 1, and the cap is min(memory, SLA).
alpha (the gap kept between b_low and b_high) defaults to B_max // 32 (8 at B_max 256), at least
2 so that a window of alpha // 2 either side of b stays open; the cap can come no nearer than
alpha // 2 below B_max while the latency is under target.

tau, the decode latency (``latency_signal``): by default the **engine's own per-step decode
latency** from telemetry (TelemetrySample.decode_step_s: the simulator's decoding-step times;
vLLM's inter-token-latency histogram deltas between scrapes), the mean of the last ``samples``
samples, with b the mean requests in flight at those samples; on an instance whose engine
reports none (no sample has carried one yet), the **lagging TPOT of the last ``window`` finished
requests** (measured by the client from first token to completion), with b the requests in
flight at those completions. ``latency_source`` says which each instance is using.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from typing import Literal

from pydantic import Field, ValidationError, model_validator
from typing_extensions import TypeVar

from runners.errors import ConfigError
from runners.input_model import field_error
from runners.schedulers.base import (
    Completion,
    Decision,
    InstanceInfo,
    PolicyParams,
    SchedulerPolicy,
    TelemetrySample,
    engine_slots,
)
from runners.schedulers.dynamic_batching_core import (
    RecentMeans,
    SLAWindow,
    block_footprint,
    clamp_batch,
    default_alpha,
    memory_batch_size,
    sla_batch_size,
    sla_window_update,
)
from runners.schedulers.papers import cite
from runners.schedulers.predictors import (
    PRIOR_HELP,
    OutputPriorParams,
    PriorSource,
    RunningMoments,
    prior_moments,
)
from runners.schedulers.vllm import SLAWindowParams, check_window
from runners.workload.requests import Request

LatencySignal = Literal["engine", "tpot"]


def mixture_moments(
    weights: dict[str, int], moments: dict[str, RunningMoments], fallback_mean: float
) -> tuple[float, float]:
    """(mean, variance) of a mixture of tasks: ``weights`` counts per task, each task's moments
    from ``moments`` (a task with none: ``fallback_mean``, no variance). Law of total variance."""
    total = sum(weights.values())
    if total == 0:
        return float(fallback_mean), 0.0
    mean = second = 0.0
    for task, count in weights.items():
        fit = moments.get(task)
        m, v = (fit.mean, fit.variance) if fit is not None and fit.count else (float(fallback_mean), 0.0)
        mean += count / total * m
        second += count / total * (v + m * m)
    return mean, max(0.0, second - mean * mean)


def resolve_b_max(b_max: int | None, info: InstanceInfo) -> int:
    """B_max for ``info``: ``b_max``, or the engine's max_num_seqs (:func:`engine_slots`, which
    states what it assumes when the instance has none). ConfigError naming b_max when it is above
    the engine's max_num_seqs."""
    slots = info.max_num_seqs
    if b_max is None:
        return engine_slots([info])
    if slots is not None and b_max > slots:
        raise ConfigError(
            "scheduler.params.b_max",
            f"{b_max} is more than instance {info.instance_id}'s engine runs at "
            f"once (max_num_seqs {slots}): the engine would queue the rest itself. Raise "
            f"engine.max_num_seqs (vLLM --max-num-seqs) to at least {b_max}, or leave b_max unset to "
            "follow the engine",
        )
    return b_max


class DynamicMemoryParams(PolicyParams):
    b_max: int | None = Field(
        title="largest batch cap (B_max)",
        default=None,
        gt=0,
        le=65_536,
        description="B_max: largest cap, requests in flight per instance. Default: the engine's max_num_seqs "
        "(discovered, configured or its engine's default; the run prints which); above it is refused - to "
        "let the cap grow, raise engine.max_num_seqs (vLLM --max-num-seqs) and B_max follows",
    )
    eps_m: float = Field(
        title="allowed KV overflow probability (eps_M)",
        default=0.05,
        ge=1e-9,
        le=1 - 1e-9,
        description="eps_M: allowed probability of KV overflow, in (0, 1): 1e-9 to 1 - 1e-9 (closer "
        "to 0 or 1 the normal quantile is infinite)",
    )
    output_prior: PriorSource = Field(
        title="output-length prior",
        default="calibration",
        description="E[l_out] and Var l_out (tokens): a per-task prior, mixed by the tasks' share of arrivals - "
        + PRIOR_HELP,
    )
    output_history: str | None = Field(
        title="history run folder",
        default=None,
        description="output_prior history: a previous run's folder (its requests.parquet gives each "
        "task's finished output lengths)",
    )
    prior_output_tokens: int = Field(
        title="cold output-length guess (tokens)",
        default=256,
        gt=0,
        le=10_000_000,
        description="E[l_out] of a task with no prior and no finished request (tokens)",
    )

    @model_validator(mode="after")
    def _prior_is_valid(self) -> "DynamicMemoryParams":
        """output_prior / output_history checked (and the folder resolved) as slo-sa's are."""
        try:
            checked = OutputPriorParams(output_prior=self.output_prior, output_history=self.output_history)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise field_error(
                type(self).__name__, "output_history", error["msg"].removeprefix("Value error, "), self.output_history
            ) from None
        self.output_history = checked.output_history
        return self


class DynamicSLAParams(SLAWindowParams, DynamicMemoryParams):
    """dynamic-sla's parameters: dynamic-mem's, Alg. 2's window (:class:`SLAWindowParams`, shared
    with the in-engine engine-dynamic-sla) and where tau comes from."""

    latency_signal: LatencySignal = Field(
        title="decode latency signal (tau)",
        default="engine",
        description="tau, the decode latency: engine - the engine's own per-step decode latency from telemetry (the "
        "simulator's step times; vLLM's inter-token-latency histogram), mean of the last `samples` "
        "samples, falling back to tpot on an instance whose engine reports none; tpot - the TPOT of the "
        "last `window` finished requests (lags: a request reports only when it ends)",
    )
    samples: int = Field(
        title="telemetry samples averaged",
        default=4,
        gt=0,
        le=100_000,
        description="engine signal: telemetry samples averaged for tau (4 x 0.25 s = 1 s at the "
        "default sample interval)",
    )
    window: int = Field(
        title="finished requests averaged",
        default=16,
        gt=0,
        le=100_000,
        description="tpot signal: finished requests averaged for tau",
    )


#: The parameters type of dynamic-mem (DynamicMemoryParams) and of its subclass dynamic-sla.
DP = TypeVar("DP", bound=DynamicMemoryParams, default=DynamicMemoryParams)


class DynamicMemoryPolicy(SchedulerPolicy[DP]):
    name = "dynamic-mem"
    summary = "Caps requests in flight per instance at the largest batch the KV cache holds with probability 1 - eps_M."
    paper = cite("000", "Alg. 1 (memory-aware)")
    Params = DynamicMemoryParams
    #: in flight per instance <= the cap <= B_max <= the engine's max_num_seqs (resolve_b_max refuses more);
    #: KV is kept only with probability 1 - eps_M, so "kv" is not claimed
    admission_limits = frozenset({"slots"})

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.capacity = {info.instance_id: info.kv_capacity_tokens for info in instances}
        self.block_size = {info.instance_id: info.block_size for info in instances}
        self.b_max = {info.instance_id: resolve_b_max(self.params.b_max, info) for info in instances}
        self.cap = {info.instance_id: self.b_max[info.instance_id] for info in instances}
        self.inputs = RunningMoments()
        self.output_moments: dict[str, RunningMoments] = {}
        prior = prior_moments(self.params.output_prior, self.params.output_history, self.workload, self.calibration)
        for task, moments in prior.items():
            self.output_moments.setdefault(task, RunningMoments()).merge(moments)
        self.task_arrivals: Counter[str] = Counter()
        self.first_token_at: dict[str, float] = {}
        self.sized = {info.instance_id: False for info in instances}

    def on_arrival(self, request: Request, now: float) -> None:
        super().on_arrival(request, now)
        self.inputs.add(request.input_tokens)
        self.task_arrivals[request.task] += 1

    def on_first_token(self, request_id: str, instance: int, now: float) -> None:
        self.first_token_at[request_id] = now

    def on_completion(self, completion: Completion, now: float) -> None:
        super().on_completion(completion, now)
        if completion.done:
            task = self.requests[completion.request_id].task
            self.output_moments.setdefault(task, RunningMoments()).add(completion.tokens_total)
        self.first_token_at.pop(completion.request_id, None)

    def on_failure(self, request_id: str, instance: int, reason: str, now: float) -> None:
        super().on_failure(request_id, instance, reason, now)
        self.first_token_at.pop(request_id, None)

    def _phases(self, instance: int) -> tuple[int, int]:
        """(prefilling, decoding) requests in flight on ``instance``, as the client sees them."""
        flying = self.in_flight[instance]
        decoding = sum(1 for rid in flying if rid in self.first_token_at)
        return len(flying) - decoding, decoding

    def expected_output(self) -> tuple[float, float]:
        """(E[l_out], Var l_out) in tokens: the per-task prior and finished requests, mixed by arrivals."""
        return mixture_moments(self.task_arrivals, self.output_moments, self.params.prior_output_tokens)

    def request_footprint(self, instance: int) -> tuple[float, float] | None:
        """(mean, std) of one request's KV footprint on ``instance``, tokens, in whole blocks;
        None before any request arrived."""
        if self.inputs.count == 0:
            return None
        mean_out, var_out = self.expected_output()
        mean, variance = block_footprint(
            self.inputs.mean + mean_out, self.inputs.variance + var_out, self.block_size.get(instance)
        )
        return mean, math.sqrt(variance)

    def memory_cap(self, instance: int) -> int | None:
        eta = self.capacity.get(instance)
        footprint = self.request_footprint(instance)
        if eta is None or footprint is None:
            return None
        size, _ = memory_batch_size(eta, footprint[0], footprint[1], self.params.eps_m)
        return size

    def update_cap(self, instance: int, now: float) -> None:
        prefilling, decoding = self._phases(instance)
        if (prefilling > 0 and decoding > 0) or not self.sized[instance]:  # Alg. 1 line 4, and a first size
            size = self.memory_cap(instance)
            if size is not None:
                self.cap[instance] = clamp_batch(size, decoding, self.b_max[instance])
                self.sized[instance] = True

    def decide(self, now: float) -> Decision:
        dispatches = []
        for instance in sorted(self.in_flight):
            self.update_cap(instance, now)
        for request_id in list(self.pending):
            open_instances = [i for i in self.in_flight if len(self.in_flight[i]) < self.cap[i]]
            if not open_instances:
                break
            instance = min(open_instances, key=lambda i: (len(self.in_flight[i]), i))
            dispatches.append(self._take(request_id, instance))
        return Decision(dispatches)


class DynamicSLAPolicy(DynamicMemoryPolicy[DynamicSLAParams]):
    name = "dynamic-sla"
    summary = "Moves a batch-size window so the measured decode latency tracks D_SLA; capped by memory too."
    paper = cite("000", "Alg. 2 (SLA-constrained)")
    Params = DynamicSLAParams

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        params = self.params
        self.alpha: dict[int, int] = {}
        for i in self.in_flight:
            try:
                check_window(type(params).__name__, params.b_min, self.b_max[i], params.alpha)
            except ValidationError as exc:
                field = str(exc.errors()[0]["loc"][0])
                raise ConfigError(
                    f"scheduler.params.{field}",
                    exc.errors()[0]["msg"].removeprefix("Value error, ")
                    + f" (B_max {self.b_max[i]}: the engine's max_num_seqs)",
                ) from None
            self.alpha[i] = params.alpha if params.alpha is not None else default_alpha(params.b_min, self.b_max[i])
        self.windows = {i: SLAWindow(params.b_min, self.b_max[i]) for i in self.in_flight}
        self.recent_tpot: dict[int, deque[float]] = {i: deque(maxlen=params.window) for i in self.in_flight}
        self.recent_batch: dict[int, deque[int]] = {i: deque(maxlen=params.window) for i in self.in_flight}
        self.recent_step = {i: RecentMeans(params.samples) for i in self.in_flight}
        self.latency_source = {i: "tpot" for i in self.in_flight}  # 'engine' once its telemetry reports one
        self.sla_cap = {i: self.b_max[i] for i in self.in_flight}

    def _move_window(self, instance: int, tau_s: float, mean_batch: float) -> None:
        params = self.params
        window = sla_window_update(
            self.windows[instance],
            tau_s,
            mean_batch,
            params.d_sla_s,
            params.eps_s,
            self.alpha[instance],
            params.delta,
            params.b_min,
            self.b_max[instance],
        )
        self.windows[instance] = window
        _, decoding = self._phases(instance)
        self.sla_cap[instance] = sla_batch_size(window, decoding, self.b_max[instance])

    def on_telemetry(self, sample: TelemetrySample, now: float) -> None:
        """Engine signal: tau from the engine's per-step decode latency (mean of the last samples)."""
        params = self.params
        instance = sample.instance
        if params.latency_signal != "engine" or sample.decode_step_s is None or instance not in self.recent_step:
            return
        self.latency_source[instance] = "engine"
        tau, batch = self.recent_step[instance].add(sample.decode_step_s, len(self.in_flight[instance]))
        self._move_window(instance, tau, batch)

    def on_completion(self, completion: Completion, now: float) -> None:
        instance = completion.instance
        uses_tpot = self.latency_source[instance] == "tpot"
        first = self.first_token_at.get(completion.request_id)
        if uses_tpot and first is not None and completion.tokens_this_dispatch > 1:
            self.recent_tpot[instance].append((now - first) / (completion.tokens_this_dispatch - 1))
        if uses_tpot:
            self.recent_batch[instance].append(len(self.in_flight[instance]))
        super().on_completion(completion, now)
        if uses_tpot and self.recent_tpot[instance]:
            tau = sum(self.recent_tpot[instance]) / len(self.recent_tpot[instance])
            batch = sum(self.recent_batch[instance]) / len(self.recent_batch[instance])
            self._move_window(instance, tau, batch)

    def update_cap(self, instance: int, now: float) -> None:
        params = self.params
        cap = self.sla_cap[instance]
        if params.memory_cap:
            memory = self.memory_cap(instance)
            if memory is not None:
                cap = min(cap, memory)
        self.cap[instance] = max(1, cap)
