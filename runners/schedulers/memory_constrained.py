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
(1 - alpha) M, with no look-ahead; alpha-beta-clear does the same and, when the engine reports
preemptions (its memory overflowed), clears each running request of that instance with
probability beta: the request is cancelled, its progress lost, and it waits again at the front.
On our engines an overflow itself is handled by the engine's preemption (vLLM recomputes).
"""

from __future__ import annotations

from collections import deque

import numpy as np
from numba import njit
from pydantic import Field

from runners.predictors import OutputLengthPredictor, OutputPredictorParams
from runners.schedulers.base import (
    Completion,
    Decision,
    InstanceInfo,
    PolicyError,
    SchedulerPolicy,
    TelemetrySample,
)
from runners.workload.requests import Request


@njit(cache=True)
def admit_shortest_first(running_base, running_end, candidate_base, candidate_end, capacity):
    """How many of the candidates (sorted by predicted output) MC-SF admits: the longest prefix
    whose KV demand stays <= capacity at every completion time. Bases in tokens, ends in steps."""
    total = running_base.shape[0] + candidate_base.shape[0]
    ends = np.empty(total)
    bases = np.empty(total)
    demand = np.empty(total)  # KV demand at each member's completion time
    count = running_base.shape[0]
    ends[:count] = running_end
    bases[:count] = running_base
    for k in range(count):
        value = 0.0
        for q in range(count):
            if ends[q] >= ends[k]:
                value += bases[q] + ends[k]
        demand[k] = value
    for k in range(count):
        if demand[k] > capacity:
            return 0
    admitted = 0
    for c in range(candidate_base.shape[0]):
        base, end = candidate_base[c], candidate_end[c]
        own = base + end
        for q in range(count):
            if ends[q] >= end:
                own += bases[q] + end
        if own > capacity:
            return admitted
        feasible = True
        for k in range(count):
            if ends[k] <= end and demand[k] + base + ends[k] > capacity:
                feasible = False
                break
        if not feasible:
            return admitted
        for k in range(count):
            if ends[k] <= end:
                demand[k] += base + ends[k]
        ends[count] = end
        bases[count] = base
        demand[count] = own
        count += 1
        admitted += 1
    return admitted


class MemoryParams(OutputPredictorParams):
    output_predictor: str = Field(  # type: ignore[assignment]
        default="oracle", description="MC-SF assumes known output lengths (the paper's setting); "
        "gaussian or noisy-oracle to relax it")
    memory_fraction: float = Field(default=1.0, gt=0, le=1, description="share of the KV cache the policy plans for")
    default_step_s: float = Field(default=0.03, gt=0, description="decode step time before one is known, seconds")


class AlphaParams(MemoryParams):
    alpha: float = Field(default=0.25, ge=0, lt=1, description="protect this share of the KV cache (paper grid 0.1-0.3)")


class AlphaBetaParams(AlphaParams):
    beta: float = Field(default=0.2, gt=0, le=1, description="probability each running request is cleared on overflow")
    clear_seed: int = Field(default=0, ge=0)


class _Running:
    __slots__ = ("prompt", "predicted", "dispatched", "first_token")

    def __init__(self, prompt: int, predicted: int, dispatched: float) -> None:
        self.prompt = prompt
        self.predicted = predicted
        self.dispatched = dispatched
        self.first_token: float | None = None


class MemoryConstrainedPolicy(SchedulerPolicy):
    """Shared bookkeeping: per-instance running requests, KV capacity, progress estimates."""

    Params = MemoryParams

    def start(self, instances: list[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        missing = [i.instance_id for i in instances if not i.kv_capacity_tokens]
        if missing:
            raise PolicyError(f"{self.name} needs the KV capacity of every instance (unknown for {missing})")
        self.capacity = {i.instance_id: i.kv_capacity_tokens * self.params.memory_fraction for i in instances}
        # KV is allocated in blocks: a request can hold up to block_size - 1 tokens more than it uses
        self.block_slack = {i.instance_id: float((i.block_size or 1) - 1) for i in instances}
        self.latency = {i.instance_id: i.latency_model for i in instances}
        self.running: dict[int, dict[str, _Running]] = {i.instance_id: {} for i in instances}
        self.outputs = OutputLengthPredictor.from_params(self.params)
        self.usage: dict[int, float | None] = {i.instance_id: None for i in instances}
        self.measured_tpot: deque[float] = deque(maxlen=32)
        self.predicted: dict[str, int] = {}  # output tokens, drawn once at arrival
        self.remaining_steps: dict[str, int] = {}
        self.prompt_size: dict[str, int] = {}
        self.sort_key: dict[str, tuple[int, float]] = {}

    def on_arrival(self, request: Request, now: float) -> None:
        super().on_arrival(request, now)
        self.predicted[request.request_id] = self.outputs.predict(request)
        self._index(request.request_id)

    def _index(self, request_id: str) -> None:
        """Keep the sort key, remaining steps and prompt size of a waiting request at hand."""
        remaining = self.predicted_remaining(request_id)
        self.remaining_steps[request_id] = remaining
        self.prompt_size[request_id] = self.prompt_tokens(request_id)
        self.sort_key[request_id] = (remaining, self.requests[request_id].arrival_s)

    def on_first_token(self, request_id: str, instance: int, now: float) -> None:
        entry = self.running[instance].get(request_id)
        if entry is not None:
            entry.first_token = now

    def on_completion(self, completion: Completion, now: float) -> None:
        entry = self.running[completion.instance].pop(completion.request_id, None)
        if entry is not None and entry.first_token is not None and completion.tokens_this_dispatch > 1:
            self.measured_tpot.append((now - entry.first_token) / (completion.tokens_this_dispatch - 1))
        super().on_completion(completion, now)
        if completion.done:
            self.outputs.observe(self.requests[completion.request_id].task, completion.tokens_total)
        else:
            self._index(completion.request_id)

    def on_failure(self, request_id: str, instance: int, reason: str, now: float) -> None:
        self.running[instance].pop(request_id, None)
        super().on_failure(request_id, instance, reason, now)

    def on_telemetry(self, sample: TelemetrySample, now: float) -> None:
        self.usage[sample.instance] = sample.kv_usage

    def step_time(self, instance: int) -> float:
        """Seconds per decode step, erring slow (slow steps mean less progress, so requests are
        assumed to hold memory longer): the larger of the latency model's decode step at the
        current batch and the TPOT measured on recent completions (which includes prefill work)."""
        running = self.running[instance]
        model = self.latency[instance]
        estimates = []
        if model is not None and running:
            context = sum(entry.prompt for entry in running.values()) / len(running)
            estimates.append(model.decode_step_time(len(running), context))
        if self.measured_tpot:
            estimates.append(sum(self.measured_tpot) / len(self.measured_tpot))
        return max(estimates) if estimates else self.params.default_step_s

    def progress(self, instance: int, now: float) -> tuple[np.ndarray, np.ndarray]:
        """(tokens held now, predicted remaining steps) of each running request."""
        step = self.step_time(instance)
        held, remaining = [], []
        for entry in self.running[instance].values():
            generated = 0 if entry.first_token is None else 1 + int((now - entry.first_token) / step)
            held.append(entry.prompt + generated + self.block_slack[instance])
            remaining.append(max(1, entry.predicted - generated))
        return np.asarray(held, dtype=float), np.asarray(remaining, dtype=float)

    def prompt_tokens(self, request_id: str) -> int:
        return self.requests[request_id].input_tokens + self.tokens_done[request_id]

    def predicted_remaining(self, request_id: str) -> int:
        return max(1, self.predicted[request_id] - self.tokens_done[request_id])

    def _send(self, request_id: str, instance: int, now: float):
        self.running[instance][request_id] = _Running(self.prompt_tokens(request_id),
                                                      self.predicted_remaining(request_id), now)
        return self._take(request_id, instance)


class MCSFPolicy(MemoryConstrainedPolicy):
    name = "mcsf"
    summary = "Shortest predicted output first, admitted only while KV demand fits at every future completion."
    paper = "Jaillet et al., online scheduling with KV-cache constraints (003), MC-SF"

    def decide(self, now: float) -> Decision:
        dispatches = []
        for instance in sorted(self.running):
            if not self.pending:
                break
            held, remaining = self.progress(instance, now)
            waiting = sorted(self.pending, key=self.sort_key.__getitem__)
            ends = np.fromiter(map(self.remaining_steps.__getitem__, waiting), dtype=float, count=len(waiting))
            bases = np.fromiter(map(self.prompt_size.__getitem__, waiting), dtype=float, count=len(waiting))
            bases += self.block_slack[instance]
            admitted = admit_shortest_first(held, remaining, bases, ends, float(self.capacity[instance]))
            if admitted == 0 and not self.running[instance] and waiting:
                admitted = 1  # a request larger than the cache alone: the engine will say so
            dispatches += [self._send(rid, instance, now) for rid in waiting[:admitted]]
        return Decision(dispatches)


class AlphaProtectPolicy(MemoryConstrainedPolicy):
    name = "alpha-protect"
    summary = "Arrival order, admitted while KV in use plus the prompt stays within (1 - alpha) of the cache."
    paper = "Jaillet et al. (003), alpha-protection greedy baseline"
    Params = AlphaParams

    def memory_in_use(self, instance: int, now: float) -> float:
        held, _ = self.progress(instance, now)
        estimate = float(held.sum())
        usage = self.usage[instance]
        measured = usage * self.capacity[instance] / self.params.memory_fraction if usage is not None else 0.0
        return max(estimate, measured)

    def decide(self, now: float) -> Decision:
        dispatches = []
        for instance in sorted(self.running):
            limit = (1.0 - self.params.alpha) * self.capacity[instance]
            used = self.memory_in_use(instance, now)
            for request_id in list(self.pending):
                prompt = self.prompt_tokens(request_id)
                if used + prompt > limit and self.running[instance]:
                    break
                used += prompt
                dispatches.append(self._send(request_id, instance, now))
        return Decision(dispatches)


class AlphaBetaClearPolicy(AlphaProtectPolicy):
    name = "alpha-beta-clear"
    summary = "alpha-protect, and on a KV overflow each running request is cleared (restarted) with probability beta."
    paper = "Jaillet et al. (003), alpha-protection beta-clearing baseline"
    Params = AlphaBetaParams

    def start(self, instances: list[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.rng = np.random.default_rng(self.params.clear_seed)
        self.preemptions: dict[int, int | None] = {i.instance_id: None for i in instances}
        self.overflowed: set[int] = set()
        self.cleared = 0

    def on_telemetry(self, sample: TelemetrySample, now: float) -> None:
        super().on_telemetry(sample, now)
        previous = self.preemptions[sample.instance]
        if sample.preemptions is not None:
            if previous is not None and sample.preemptions > previous:
                self.overflowed.add(sample.instance)
            self.preemptions[sample.instance] = sample.preemptions

    def decide(self, now: float) -> Decision:
        cancels = []
        for instance in sorted(self.overflowed):
            for request_id in list(self.running[instance]):
                if self.rng.random() < self.params.beta:
                    del self.running[instance][request_id]
                    self.in_flight[instance].discard(request_id)
                    self.pending = {request_id: self.requests[request_id], **self.pending}
                    cancels.append(request_id)
            self.cleared += len(cancels)
        self.overflowed.clear()
        decision = super().decide(now)
        return Decision(decision.dispatches, decision.wake_at, cancels)
