"""Memory-constrained shortest-first, MC-SF (Jaillet et al., online scheduling with KV-cache
constraints, 003), and its baselines alpha-protection greedy and alpha-protection beta-clearing.

Time is counted in decode steps: every running request grows by one token per step. A request
with prompt s and predicted output o holds s + t tokens t steps after it starts, until t = o.
MC-SF keeps every running request, sorts the waiting ones by predicted output length
(shortest first) and admits them one by one while the KV demand stays within the capacity M at
every future completion time of the running and admitted requests (the demand peaks there):

    sum_{i running} (m_i + t) [t <= r_i] + sum_{j admitted} (s_j + t) [t <= o_j] <= M,

with m_i the tokens a running request holds now and r_i its predicted remaining steps; it stops
at the first request that does not fit. The client estimates a running request's progress from
the time since its first token and the latency model's decode-step time (or the TPOT it measured).

alpha-protect admits in arrival order while the KV in use plus the new prompt stays within
(1 - alpha) M, with no look-ahead. With ``overflow: clear`` (the paper's rule, the default), when
the memory limit is surpassed it clears every active request of that instance: each is cancelled,
its progress lost, and it waits again as unprocessed (in arrival order, so ahead of later ones)
to be prefilled from scratch; its latency still counts from its arrival. alpha-beta-clear does
the same but clears each active request independently with probability beta. With
``overflow: engine-preempt`` the policy clears nothing and leaves the overflow to the engine's
own preemption (vLLM: the last-admitted request is recomputed); beta is then unused.
See :class:`AlphaProtectPolicy` for when an overflow is noticed and when a run is stopped as a
livelock (the paper's "infinite processing loop").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field
from typing_extensions import TypeVar

from runners.input_model import MAX_SEED
from runners.schedulers.base import (
    Completion,
    Decision,
    Dispatch,
    InstanceInfo,
    PolicyError,
    PolicyParams,
    PolicyStalled,
    SchedulerPolicy,
    TelemetrySample,
)
from runners.schedulers.papers import cite
from runners.schedulers.predictors import (
    OutputLengthPredictor,
    OutputMode,
    OutputPriorParams,
)
from runners.workload.requests import Request

if TYPE_CHECKING:  # at run time from runners.schedulers.mcsf_kernel on first use (__getattr__ below)
    from runners.schedulers.mcsf_kernel import admit_shortest_first as admit_shortest_first
    from runners.schedulers.mcsf_kernel import admit_shortest_first_reference as admit_shortest_first_reference


class MemoryParams(OutputPriorParams, PolicyParams):
    output_predictor: OutputMode = Field(
        title="output-length predictor",
        default="gaussian",
        description="gaussian: each task's Gaussian (output_prior says where it starts), one draw per request - "
        "it knows the request's task, not its length; oracle: the exact target length, MC-SF's own assumption "
        "(the paper's setting: an oracle, labelled as one); noisy-oracle: the target with a known error",
    )
    memory_fraction: float = Field(
        title="KV cache share planned for",
        default=1.0,
        gt=0,
        le=1,
        description="share of the KV cache the policy plans for",
    )
    default_step_s: float = Field(
        title="first decode step guess (s)",
        default=0.03,
        gt=0,
        le=3600.0,
        description="decode step time before one is known, seconds",
    )


class AlphaParams(MemoryParams):
    alpha: float = Field(
        title="protected KV share (alpha)",
        default=0.25,
        ge=0,
        lt=1,
        description="protect this share of the KV cache (paper grid 0.1-0.3)",
    )
    overflow: Literal["clear", "engine-preempt"] = Field(
        title="on KV overflow",
        default="clear",
        description="on a KV overflow: clear = the paper's rule, the policy clears the active "
        "requests (alpha-protect all, alpha-beta-clear each with probability beta; progress lost, re-prefilled); "
        "engine-preempt = the policy clears nothing, the engine's preemption recomputes its victim (vLLM)",
    )


class AlphaBetaParams(AlphaParams):
    beta: float = Field(
        title="clearing probability (beta)",
        default=0.2,
        gt=0,
        le=1,
        description="probability each active request is cleared on overflow",
    )
    clear_seed: int = Field(
        title="clearing seed",
        default=0,
        ge=0,
        le=MAX_SEED,
        description="seed of the random draws that pick which active requests an overflow "
        "clears (each with probability beta); the same seed gives the same clears",
    )


#: Consecutive clears of the same requests on an instance, with no request completing there in
#: between, after which clearing every active request is a proven livelock (AlphaProtectPolicy).
LIVELOCK_CLEARS = 2


NOT_YET = float("nan")  # first-token time of a running request that has none yet


#: The parameters type of a memory-constrained policy (mcsf: MemoryParams; the alpha baselines: theirs).
MP = TypeVar("MP", bound=MemoryParams, default=MemoryParams)
#: The parameters type of alpha-protect (AlphaParams) and of its subclass alpha-beta-clear.
AP = TypeVar("AP", bound=AlphaParams, default=AlphaParams)


class MemoryConstrainedPolicy(SchedulerPolicy[MP]):
    """Shared bookkeeping: per-instance running requests, KV capacity, progress estimates."""

    Params = MemoryParams
    #: MC-SF admits only while the KV demand (tokens held now, estimated from the first token and
    #: the step time, plus the new prompts) fits the capacity; alpha-protect only while the KV in
    #: use plus the prompt fits (1 - alpha) of it. Slots are the engine's to queue: not claimed
    admission_limits = frozenset({"kv"})

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        #: each instance's whole KV cache, tokens
        self.kv_tokens = {i.instance_id: i.kv_capacity_tokens for i in instances if i.kv_capacity_tokens}
        missing = [i.instance_id for i in instances if i.instance_id not in self.kv_tokens]
        if missing:
            raise PolicyError(f"{self.name} needs the KV capacity of every instance (unknown for {missing})")
        self.capacity = {instance: tokens * self.params.memory_fraction for instance, tokens in self.kv_tokens.items()}
        # KV is allocated in blocks: a request can hold up to block_size - 1 tokens more than it uses
        self.block_slack = {i.instance_id: float((i.block_size or 1) - 1) for i in instances}
        self.latency = {i.instance_id: i.latency_model for i in instances}
        # running requests per instance -> time of their first token (NOT_YET before it). Their
        # prompt size and predicted steps at dispatch stay in prompt_size / remaining_steps.
        self.running: dict[int, dict[str, float]] = {i.instance_id: {} for i in instances}
        self.outputs = OutputLengthPredictor.from_params(self.params, self.workload, self.calibration)
        self.usage: dict[int, float | None] = {i.instance_id: None for i in instances}
        self.measured_tpot: deque[float] = deque(maxlen=32)
        self.predicted: dict[str, int] = {}  # output tokens, drawn once at arrival
        self.remaining_steps: dict[str, int] = {}
        self.prompt_size: dict[str, int] = {}
        self.arrival: dict[str, float] = {}
        self.pending_in_arrival_order = True  # pending's order is by arrival time (ties: as they came)
        self.last_arrival = -math.inf

    def on_arrival(self, request: Request, now: float) -> None:
        super().on_arrival(request, now)
        self.predicted[request.request_id] = self.outputs.predict(request)
        self.arrival[request.request_id] = request.arrival_s
        if request.arrival_s < self.last_arrival:
            self.pending_in_arrival_order = False
        self.last_arrival = max(self.last_arrival, request.arrival_s)
        self._index(request.request_id)

    def _index(self, request_id: str) -> None:
        """Keep the remaining steps and prompt size of a waiting request at hand. Called whenever a
        request (re)joins ``pending`` after its tokens_done changed, so for every pending request
        they equal predicted_remaining() and prompt_tokens() (a cancelled request did not change),
        and for a running one they are its values at dispatch."""
        self.remaining_steps[request_id] = self.predicted_remaining(request_id)
        self.prompt_size[request_id] = self.prompt_tokens(request_id)

    def on_first_token(self, request_id: str, instance: int, now: float) -> None:
        running = self.running[instance]
        if request_id in running:
            running[request_id] = now

    def on_completion(self, completion: Completion, now: float) -> None:
        first_token = self.running[completion.instance].pop(completion.request_id, None)
        if first_token is not None and not math.isnan(first_token) and completion.tokens_this_dispatch > 1:
            self.measured_tpot.append((now - first_token) / (completion.tokens_this_dispatch - 1))
        super().on_completion(completion, now)
        if completion.done:
            self.outputs.observe(self.requests[completion.request_id].task, completion.tokens_total)
        else:
            self.pending_in_arrival_order = False  # it rejoined pending at the end
            self._index(completion.request_id)

    def on_failure(self, request_id: str, instance: int, reason: str, now: float) -> None:
        self.running[instance].pop(request_id, None)
        super().on_failure(request_id, instance, reason, now)

    def on_telemetry(self, sample: TelemetrySample, now: float) -> None:
        self.usage[sample.instance] = sample.kv_usage

    def step_time(self, instance: int, prompts: np.ndarray | None = None) -> float:
        """Seconds per decode step, erring slow (slow steps mean less progress, so requests are
        assumed to hold memory longer): the larger of the latency model's decode step at the
        current batch and the TPOT measured on recent completions (which includes prefill work)."""
        running = self.running[instance]
        if prompts is None:
            prompts = np.fromiter(map(self.prompt_size.__getitem__, running), dtype=float, count=len(running))
        model = self.latency[instance]
        estimates = []
        if model is not None and running:
            context = float(prompts.sum()) / len(running)  # whole tokens: exact in any order
            estimates.append(model.decode_step_time(len(running), context))
        if self.measured_tpot:
            estimates.append(sum(self.measured_tpot) / len(self.measured_tpot))
        return max(estimates) if estimates else self.params.default_step_s

    def progress(self, instance: int, now: float) -> tuple[np.ndarray, np.ndarray]:
        """(tokens held now, predicted remaining steps) of each running request: one token at the
        first token, then one per step time since."""
        running = self.running[instance]
        count = len(running)
        prompts = np.fromiter(map(self.prompt_size.__getitem__, running), dtype=float, count=count)
        if not count:
            return prompts, np.zeros(0)
        step = self.step_time(instance, prompts)
        predicted = np.fromiter(map(self.remaining_steps.__getitem__, running), dtype=float, count=count)
        first = np.fromiter(running.values(), dtype=float, count=count)
        started = ~np.isnan(first)
        generated = np.where(started, 1.0 + np.trunc((now - np.where(started, first, now)) / step), 0.0)
        return prompts + generated + self.block_slack[instance], np.maximum(1.0, predicted - generated)

    def prompt_tokens(self, request_id: str) -> int:
        return self.requests[request_id].input_tokens + self.tokens_done[request_id]

    def predicted_remaining(self, request_id: str) -> int:
        return max(1, self.predicted[request_id] - self.tokens_done[request_id])

    def _send(self, request_ids: list[str], instance: int) -> list[Dispatch]:
        """Dispatch these pending requests to ``instance`` (what _take does, for many at once)."""
        running = self.running[instance]
        if running:
            running.update(dict.fromkeys(request_ids, NOT_YET))
        else:
            self.running[instance] = dict.fromkeys(request_ids, NOT_YET)
        self.in_flight[instance].update(request_ids)
        if len(request_ids) == len(self.pending):  # all of them
            self.pending.clear()
            self.pending_in_arrival_order = True
        else:
            for rid in request_ids:
                del self.pending[rid]
        return [Dispatch(rid, instance) for rid in request_ids]


class MCSFPolicy(MemoryConstrainedPolicy[MemoryParams]):
    name = "mcsf"
    summary = "Shortest predicted output first, admitted only while KV demand fits at every future completion."
    paper = cite("003", "MC-SF")

    def prepare(self) -> None:
        """Compile (or load) :func:`admit_shortest_first` now - and the reference it falls back to,
        typed with it - with a run's argument types: one running request, two candidates."""
        from runners.schedulers.mcsf_kernel import admit_shortest_first

        admit_shortest_first(np.array([10.0]), np.array([5.0]), np.array([10.0, 20.0]), np.array([3.0, 4.0]), 1e3)

    def decide(self, now: float) -> Decision:
        from runners.schedulers.mcsf_kernel import admit_shortest_first

        dispatches = []
        for instance in sorted(self.running):
            if not self.pending:
                break
            held, remaining = self.progress(instance, now)
            waiting = list(self.pending)
            count = len(waiting)
            ends = np.fromiter(map(self.remaining_steps.__getitem__, waiting), dtype=float, count=count)
            # by (predicted remaining, arrival), ties in pending order (stable sorts)
            if self.pending_in_arrival_order:
                order = np.argsort(ends, kind="stable")
            else:
                order = np.lexsort(
                    (np.fromiter(map(self.arrival.__getitem__, waiting), dtype=float, count=count), ends)
                )
            ends = ends[order]
            bases = np.fromiter(map(self.prompt_size.__getitem__, waiting), dtype=float, count=count)[order]
            bases += self.block_slack[instance]
            admitted = admit_shortest_first(held, remaining, bases, ends, float(self.capacity[instance]))
            if admitted == 0 and not self.running[instance]:
                admitted = 1  # a request larger than the cache alone: the engine will say so
            dispatches += self._send([waiting[i] for i in order[:admitted].tolist()], instance)
        return Decision(dispatches)


class AlphaProtectPolicy(MemoryConstrainedPolicy[AP]):
    """alpha-protection greedy (003): arrival order, admitted while the KV in use plus the prompt
    stays within (1 - alpha) M; on an overflow (``overflow: clear``) every active request of the
    instance is cleared: cancelled, taken back as pending and re-prefilled from scratch later.

    When an overflow is noticed (``clear``): at the first telemetry sample of the instance whose
    cumulative preemption count rose since the previous sample - the engine ran out of KV blocks
    and had to preempt, which is when the memory limit was surpassed. That is up to one sample
    interval late (0.25 s in the simulator, about 6 decode steps at 40 ms); meanwhile the engine's
    own preemption (vLLM: the last-admitted request, recomputed) keeps it running, and the clear
    then takes every active request, its victims included. A rise is ignored when the policy
    cleared that instance since the previous sample: it is most likely the overflow just handled.
    (The policy's own token accounting is not used: its progress estimate, from the first-token
    time and :meth:`step_time`, ran about 10 steps ahead of the engine after a clear in our
    simulations, so it would clear before any overflow.)

    Livelock (the paper's "infinite processing loop"): when clearing takes every active request
    (alpha-protect; alpha-beta-clear with beta = 1) and the same set S of requests is cleared
    ``LIVELOCK_CLEARS`` = 2 times in a row on an instance with no request completing there in
    between, decide() raises PolicyStalled. Why 2: after the first clear, S (the earliest arrivals,
    as admission is in arrival order) is readmitted first and from scratch; the second clear of
    exactly S means S from scratch overflowed before any member finished. Every later round again
    starts with S from scratch ahead of every other request (later arrivals can only add KV
    demand, and the engine serves S's prefill first), so it overflows at the same step or sooner,
    before any member of S finishes: S can never complete. (This assumes the clear comes at the
    same step of each round; the sample grid can notice the overflow a few steps later in one
    round than in another, and a member that finishes in those extra steps ends the count.) With
    beta < 1 the clearing is random and no round need repeat, so no livelock is declared (the
    run's time limit still applies)."""

    name = "alpha-protect"
    summary = "Arrival order, admitted while KV in use plus the prompt stays within (1 - alpha) of the cache."
    paper = cite("003", "alpha-protection greedy baseline")
    Params = AlphaParams

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.clearing = self.params.overflow == "clear"
        self.limit_tokens = {instance: float(tokens) for instance, tokens in self.kv_tokens.items()}  # M, whole cache
        self.preemptions: dict[int, int | None] = {i.instance_id: None for i in instances}
        self.overflowed: set[int] = set()
        self.cleared_since_sample: set[int] = set()
        self.last_cleared: dict[int, frozenset[str] | None] = {i.instance_id: None for i in instances}
        self.repeats = {i.instance_id: 0 for i in instances}
        self.cleared = 0  # requests cleared (a request cleared twice counts twice)

    def on_telemetry(self, sample: TelemetrySample, now: float) -> None:
        super().on_telemetry(sample, now)
        instance = sample.instance
        if sample.preemptions is not None:
            previous = self.preemptions[instance]
            if (
                self.clearing
                and previous is not None
                and sample.preemptions > previous
                and instance not in self.cleared_since_sample
            ):
                self.overflowed.add(instance)
            self.preemptions[instance] = sample.preemptions
        self.cleared_since_sample.discard(instance)

    def on_completion(self, completion: Completion, now: float) -> None:
        super().on_completion(completion, now)
        self.last_cleared[completion.instance] = None  # a completion ends a run of identical clears
        self.repeats[completion.instance] = 0

    def memory_in_use(self, instance: int, now: float) -> float:
        held, _ = self.progress(instance, now)
        estimate = float(held.sum())
        usage = self.usage[instance]
        measured = usage * self.capacity[instance] / self.params.memory_fraction if usage is not None else 0.0
        return max(estimate, measured)

    def clears_everything(self) -> bool:
        """True when a clear takes every active request (a deterministic rule)."""
        return True

    def choose_cleared(self, active: list[str]) -> list[str]:
        """The active requests an overflow clears (all of them)."""
        return active

    def clear(self, instance: int, now: float) -> list[str]:
        """Handle an overflow of ``instance``: clear requests, take them back as pending in
        arrival order, and raise PolicyStalled on a livelock (see the class docstring)."""
        active = list(self.running[instance])
        if not active:
            return []
        if self.clears_everything():
            members = frozenset(active)
            if members == self.last_cleared[instance]:
                self.repeats[instance] += 1
            else:
                self.last_cleared[instance], self.repeats[instance] = members, 1
            if self.repeats[instance] >= LIVELOCK_CLEARS:
                shown = ", ".join(sorted(members)[:5]) + (", ..." if len(members) > 5 else "")
                raise PolicyStalled(
                    f"instance {instance}: the same {len(members)} requests ({shown}) overflowed the KV cache "
                    f"({self.limit_tokens[instance]:.0f} tokens) and were cleared {self.repeats[instance]} times in a "
                    f"row at t = {now:.2f} s with no request completing in between; each round readmits them from "
                    f"scratch, so they can never finish (alpha = {self.params.alpha:g} protects too little; the "
                    "paper's infinite processing loop)"
                )
        cleared = self.choose_cleared(active)
        running = self.running[instance]
        for request_id in cleared:
            del running[request_id]
            self.in_flight[instance].discard(request_id)
        # back as unprocessed: every waiting request in arrival order (ties: as they were)
        waiting = [(rid, self.requests[rid]) for rid in cleared] + list(self.pending.items())
        waiting.sort(key=lambda item: self.arrival[item[0]])
        self.pending = dict(waiting)
        self.pending_in_arrival_order = True
        self.usage[instance] = None  # the last sample predates the clear
        self.cleared_since_sample.add(instance)
        self.cleared += len(cleared)
        return cleared

    def decide(self, now: float) -> Decision:
        cancels: list[str] = []
        for instance in sorted(self.overflowed):  # empty unless overflow: clear
            cancels += self.clear(instance, now)
        self.overflowed.clear()
        dispatches = []
        for instance in sorted(self.running):
            if not self.pending:
                break
            limit = (1.0 - self.params.alpha) * self.capacity[instance]
            used = self.memory_in_use(instance, now)
            # in pending order, while used + prompt <= limit (the first one always, on an idle instance)
            waiting = list(self.pending)
            totals = np.fromiter(map(self.prompt_size.__getitem__, waiting), dtype=float, count=len(waiting))
            totals[0] += used
            np.cumsum(totals, out=totals)  # used + p0, (used + p0) + p1, ...: sequential, as a loop adds
            first = 0 if self.running[instance] else 1
            over = np.flatnonzero(totals[first:] > limit)
            admitted = first + int(over[0]) if len(over) else len(waiting)
            dispatches += self._send(waiting[:admitted], instance)
        return Decision(dispatches, None, cancels)


class AlphaBetaClearPolicy(AlphaProtectPolicy[AlphaBetaParams]):
    """alpha-protection beta-clearing (003): alpha-protect, but an overflow clears each active
    request independently with probability beta (seeded by ``clear_seed``). Overflows are noticed
    as in :class:`AlphaProtectPolicy`; a livelock is declared only for beta = 1."""

    name = "alpha-beta-clear"
    summary = "alpha-protect, and on a KV overflow each active request is cleared (restarted) with probability beta."
    paper = cite("003", "alpha-protection beta-clearing baseline")
    Params = AlphaBetaParams

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.rng = np.random.default_rng(self.params.clear_seed)

    def clears_everything(self) -> bool:
        return self.params.beta >= 1.0

    def choose_cleared(self, active: list[str]) -> list[str]:
        if self.params.beta >= 1.0:
            return active
        draws = self.rng.random(len(active))
        return [rid for rid, draw in zip(active, draws.tolist()) if draw < self.params.beta]


#: MC-SF's compiled admission kernels, in :mod:`runners.schedulers.mcsf_kernel` and still
#: importable from here. Imported where they are first called, so that listing mcsf or reading its
#: parameters (the Home and Launch pages) does not import numba (issue 42).
KERNELS = ("admit_shortest_first", "admit_shortest_first_reference")


def __getattr__(name: str) -> Any:
    """A kernel of :data:`KERNELS`, from its module (PEP 562: only for names not defined here)."""
    if name in KERNELS:
        from runners.schedulers import mcsf_kernel

        return getattr(mcsf_kernel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
