"""Slice-level scheduling, SCLS (Cheng et al., 001).

Every dispatch is capped at S output tokens (a slice). Every interval T the scheduler takes the
whole pool (new requests and unfinished ones, which come back with their output so far appended
to the prompt and are re-prefilled), sorts it by prompt length, and batches it with the paper's
dynamic programme (Alg. 1): over the sorted requests, T[i] = min over batch sizes N of
T[i - N] + T_serve(N, L_i, S), where L_i is the batch's longest prompt and N stays within the
memory bound (L_i + S) * N <= zeta * KV capacity (tokens) and ``max_batch``. It minimises the
total estimated serving time,
    T_serve(N, L, S) = T_prefill(N, L) + sum_{l=1..S-1} tau_decode(N, L + l)   (eq. 1-4),
from the latency model. Batches go to instances by max-min offloading (longest batch first, to
the least-loaded instance; eq. 11); its load drops by the batch's estimate when the batch finishes.

Scheduling interval (eq. 12). After each offloading T = max(lambda * min_w load(w), Gamma), in
seconds; lambda < 1 (0.5 in the paper) keeps workers from going idle when the load is
over-estimated, and Gamma, the shortest interval, keeps the batcher from being fed too few
requests when the load is under-estimated (section 4.6). The paper sets Gamma "according to
[the engines'] inference speed": 6 s for HF transformers and 3 s for DeepSpeed-inference, both
LLaMA2-13B on one A100. Those are, roughly, the time of one 128-step slice of a single request
on each engine (about 45 ms and 20-25 ms a decode step: our estimate, the paper gives no step
times), so Gamma is read as a time in units of the engine's speed, not an absolute constant. By
default Gamma = ``min_interval_slices`` (1.0) x T_serve(1, L, S): the estimated serving time of
one slice of one request at L, the mean length (prompt + output so far, tokens) of the requests
just batched, from the same latency model as the batcher. A single-request slice is the cheapest
slice at a length, so Gamma is at most the estimate of any batch whose longest prompt is at
least L. On the simulator's default profile (Qwen2.5-7B, 15.85 ms a decode step) that is 2.11 s
at L = 0 to 2.35 s at L = 1,000 tokens for S = 128; on a faster engine it shrinks with it.
``min_interval_s`` sets an absolute Gamma instead (the paper's 3 s for DeepSpeed); with it, a
min_interval_slices other than its default is refused as a contradiction.

Batch-synchronous serving, as the paper describes: a worker's processing thread takes one batch
from its local queue and serves it (section 4.1) on a static-batching engine (HF, DeepSpeed),
where every request of the batch runs all S iterations, finished ones producing discarded
"invalid tokens" (4.2), so a batch ends all at once. Here an instance likewise runs one batch at
a time and starts the next only when every request of the previous one has returned. On a
continuous-batching engine (the simulator, vLLM) a request that ends before S frees its slot
at once while the batch's stragglers run on, and those slots stay idle until the whole batch is
done: a cost of the paper's design on such engines (a finding, not a bug), which we keep rather
than start the next batch early, which the paper does not do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field, model_validator

from runners.input_model import field_error
from runners.schedulers.base import (
    Completion,
    Decision,
    InstanceInfo,
    PolicyError,
    PolicyParams,
    SchedulerPolicy,
    engine_slots,
)
from runners.schedulers.papers import cite

if TYPE_CHECKING:  # at run time from runners.schedulers.scls_kernel on first use (__getattr__ below)
    from runners.schedulers.scls_kernel import dp_batches_linear as dp_batches_linear


def ranges_from(previous: np.ndarray) -> list[tuple[int, int]]:
    ranges = []
    i = len(previous) - 1
    while i > 0:
        ranges.append((int(previous[i]), i))
        i = int(previous[i])
    return ranges[::-1]


def assign_max_min(batch_times: Sequence[float], loads: dict[int, float]) -> list[int]:
    """Max-min offloading: batches in descending time, each to the least-loaded instance (ties:
    lowest id). Updates ``loads`` and returns the instance of each batch (in the input order)."""
    chosen = [0] * len(batch_times)
    for index in sorted(range(len(batch_times)), key=lambda k: -batch_times[k]):
        instance = min(loads, key=lambda i: (loads[i], i))
        loads[instance] += batch_times[index]
        chosen[index] = instance
    return chosen


class SCLSParams(PolicyParams):
    slice_tokens: int = Field(
        title="slice length (S, tokens)", default=128, gt=0, le=10_000_000, description="S: output tokens per slice"
    )
    zeta: float = Field(
        title="KV cache share per batch (zeta)",
        default=0.9,
        gt=0,
        le=1,
        description="fraction of the KV cache a batch may plan to use",
    )
    interval_lambda: float = Field(
        title="interval factor (lambda)",
        default=0.5,
        gt=0,
        lt=1,
        description="lambda in T = max(lambda * min load, Gamma) (eq. 12), a factor below 1 (paper: 0.5)",
    )
    min_interval_slices: float = Field(
        title="Gamma in slice times (shortest interval)",
        default=1.0,
        gt=0,
        le=1000,
        description="Gamma, the shortest scheduling interval, in slices: this many times "
        "the estimated serving time of one slice of one request at the mean length of the requests just batched "
        "(the paper's 3 s / 6 s were about one such slice on its engines)",
    )
    min_interval_s: float | None = Field(
        title="Gamma in seconds (replaces slice times)",
        default=None,
        gt=0,
        le=86_400.0,
        description="Gamma in seconds instead of min_interval_slices (the paper's: "
        "3 for DeepSpeed, 6 for HF transformers); None: relative to the engine's speed",
    )
    max_batch: int = Field(
        title="largest batch",
        default=256,
        gt=0,
        le=65_536,
        description="largest batch (also capped by the engine's max_num_seqs)",
    )

    @model_validator(mode="after")
    def _one_gamma(self) -> "SCLSParams":
        # the Launch form submits every parameter, so the default alongside min_interval_s is no conflict
        default = type(self).model_fields["min_interval_slices"].default
        if self.min_interval_s is not None and self.min_interval_slices != default:
            raise field_error(
                "SCLSParams",
                "min_interval_slices",
                f"Gamma is given twice: min_interval_s "
                f"{self.min_interval_s:g} s and min_interval_slices {self.min_interval_slices:g}; set one "
                f"(leave min_interval_slices at {default:g} when giving seconds)",
                self.min_interval_slices,
            )
        return self


@dataclass
class _Worker:
    queue: list[tuple[list[str], float]] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    running_estimate: float = 0.0
    load: float = 0.0


class SCLSPolicy(SchedulerPolicy[SCLSParams]):
    name = "scls"
    summary = "Slices of S tokens; DP batching by estimated serving time; max-min offloading; adaptive interval."
    paper = cite("001", "SCLS, Alg. 1")
    Params = SCLSParams
    #: one batch in flight per instance, of at most min(max_batch, max_num_seqs) requests whose
    #: (length so far + S) sum to at most zeta (<= 1) x the smallest instance's KV capacity
    admission_limits = frozenset({"slots", "kv"})

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        info = instances[0]
        if info.latency_model is None:
            raise PolicyError("scls needs a latency model: use the simulator, or set engine.profile")
        if info.kv_capacity_tokens is None:
            raise PolicyError("scls needs the KV capacity of each instance (from the engine's /metrics or profile)")
        self.model = info.latency_model
        #: KV capacity of the smallest instance, tokens: eq. 9's memory bound on every batch
        self.capacity_tokens: int = min(i.kv_capacity_tokens or 0 for i in instances)
        self.batch_limit = min(self.params.max_batch, engine_slots(instances))
        self.workers = {i.instance_id: _Worker() for i in instances}
        self.queued: set[str] = set()
        self.next_schedule = 0.0
        self.gamma_s = self.params.min_interval_s or 0.0  # Gamma of the last schedule, seconds

    # -- estimators ------------------------------------------------------------------------------
    def min_interval(self, mean_length: float) -> float:
        """Gamma in seconds: ``min_interval_s`` when set, else ``min_interval_slices`` x
        T_serve(1, mean_length, S), the estimated time of one slice of one request."""
        if self.params.min_interval_s is not None:
            return self.params.min_interval_s
        return self.params.min_interval_slices * float(
            self.model.serve_time(1.0, mean_length, self.params.slice_tokens)
        )

    def _length(self, request_id: str) -> int:
        return self.requests[request_id].input_tokens + self.tokens_done[request_id]

    # -- events ------------------------------------------------------------------------------------
    def on_completion(self, completion: Completion, now: float) -> None:
        super().on_completion(completion, now)
        worker = self.workers[completion.instance]
        worker.running.discard(completion.request_id)
        if not worker.running:
            worker.load = max(0.0, worker.load - worker.running_estimate)
            worker.running_estimate = 0.0

    def on_failure(self, request_id: str, instance: int, reason: str, now: float) -> None:
        super().on_failure(request_id, instance, reason, now)
        self.on_completion(Completion(request_id, instance, 0, self.tokens_done[request_id], True), now)

    def prepare(self) -> None:
        """Compile (or load) :func:`dp_batches_linear` now, with a run's argument types."""
        from runners.schedulers.scls_kernel import dp_batches_linear

        dp_batches_linear(np.array([8.0, 16.0]), np.array([0.1, 0.2]), np.array([1.0, 1.0]), np.array([2, 2]))

    def _schedule(self, now: float) -> None:
        pool = [rid for rid in self.pending if rid not in self.queued]
        if pool:
            pool.sort(key=self._length)
            lengths = np.asarray([self._length(rid) for rid in pool], dtype=float)
            slope, intercept = self.model.serve_line(lengths, self.params.slice_tokens)
            fits = (self.params.zeta * self.capacity_tokens // (lengths + self.params.slice_tokens)).astype(np.int64)
            limits = np.clip(fits, 1, self.batch_limit)
            from runners.schedulers.scls_kernel import dp_batches_linear

            previous, _ = dp_batches_linear(lengths, slope, intercept, limits)
            ranges = ranges_from(previous)
            batches = [pool[start:end] for start, end in ranges]
            times = [float(slope[end - 1] * (end - start) + intercept[end - 1]) for start, end in ranges]
            loads = {instance: worker.load for instance, worker in self.workers.items()}
            for batch, estimate, instance in zip(batches, times, assign_max_min(times, loads)):
                self.workers[instance].queue.append((batch, estimate))
                self.workers[instance].load += estimate
                self.queued.update(batch)
            self.gamma_s = self.min_interval(float(lengths.mean()))
        least = min(worker.load for worker in self.workers.values())
        self.next_schedule = now + max(self.params.interval_lambda * least, self.gamma_s)

    def decide(self, now: float) -> Decision:
        if now >= self.next_schedule and any(rid not in self.queued for rid in self.pending):
            self._schedule(now)
        dispatches = []
        for instance, worker in self.workers.items():
            if worker.running or not worker.queue:
                continue
            batch, estimate = worker.queue.pop(0)
            worker.running = set(batch)
            worker.running_estimate = estimate
            for rid in batch:
                self.queued.discard(rid)
                dispatches.append(self._take(rid, instance, max_tokens=self.params.slice_tokens))
        waiting = any(rid not in self.queued for rid in self.pending)
        return Decision(dispatches, wake_at=self.next_schedule if waiting else None)


def __getattr__(name: str) -> Any:
    """:func:`runners.schedulers.scls_kernel.dp_batches_linear`, still importable from here;
    imported where it is first called, so that listing scls or reading its parameters (the Home
    and Launch pages) does not import numba (issue 42). PEP 562: only for names not defined here."""
    if name == "dp_batches_linear":
        from runners.schedulers.scls_kernel import dp_batches_linear

        return dp_batches_linear
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
