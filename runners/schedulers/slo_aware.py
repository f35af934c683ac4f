"""SLO-aware priority mapping by simulated annealing (Huang et al., SLO-aware scheduling, 004).

Per instance, the waiting requests are planned as an order split into batches of at most
``max_batch`` that maximises G = (requests meeting their SLO) / (sum of E2E), using the latency
model for execution times and a per-task output-length predictor. Start points: arrival order in
full batches, and order by predicted latency alone (returned at once if it meets every SLO); then
the paper's annealing (T0 = 500, threshold 20, 100 iterations per temperature, decay 0.95; see
:mod:`runners.schedulers.slo_annealing_kernel` for the normalisation of G). Where the paper picks
the better start point and anneals once, we anneal from both and keep the better result: on 40
random 6-request problems one chain came within 1% of the exhaustive optimum 36 times (worst gap
12.6%), two chains 38 times (worst 1.5%, mean 0.07%).

Output lengths come from a per-task Gaussian (:mod:`runners.schedulers.predictors`; 004 sections 4.2 and
5.1): by default warmed from a calibration sample of the same datasets outside the run
(``output_prior``: or a previous run, cold, or the labelled oracle of this run's own moments), pooled with every finished request, each waiting request's prediction following the
refreshed fit. A plan is made on every arrival, slice return and completion (a completion frees
a slot and moves its task's Gaussian). Each instance's plan starts at its earliest free slot
(continuous batching: now if fewer than ``max_batch`` requests are in flight, else the earliest
predicted finish among them), not at the latest finish of anything in flight.

Requests reach the engine in plan order as slots free up (``dispatch``), each with ``priority``
= its batch's planned start in milliseconds of run time (equal within a batch, increasing from
batch to batch, comparable across plans), so an engine that serves by priority (vLLM
``--scheduling-policy priority``, the simulator's priority mode) serves in plan order. New
arrivals go to the instance with the largest remaining KV memory (eq. 20: free tokens minus what
is already assigned there). ``slo-exhaustive`` searches every order and split instead (small n
only).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from runners.engines.latency_model import LatencyModel, PhaseCoefficients
from runners.input_model import MAX_SEED, InputModel, field_error
from runners.schedulers.base import (
    Completion,
    Decision,
    InstanceInfo,
    PolicyError,
    PolicyParams,
    SchedulerPolicy,
    TelemetrySample,
    engine_slots,
)
from runners.schedulers.papers import cite
from runners.schedulers.predictors import (
    InstanceMemory,
    LatencyPredictor,
    OutputLengthPredictor,
    OutputPriorParams,
)
from runners.schedulers.prefix_index import PrefixIndex
from runners.workload.requests import Request

if TYPE_CHECKING:  # at run time from runners.schedulers.slo_annealing_kernel on first use (__getattr__ below)
    from runners.schedulers.slo_annealing_kernel import evaluate_plan as evaluate_plan
    from runners.schedulers.slo_annealing_kernel import full_batches as full_batches
    from runners.schedulers.slo_annealing_kernel import latency_tables as latency_tables
    from runners.schedulers.slo_annealing_kernel import search as search

INF = math.inf


#: Most annealing moves one plan may try (temperature levels x iterations per level); the
#: defaults try 6,300. Beyond this a plan takes minutes and the run stalls on it.
MAX_ANNEALING_MOVES = 10_000_000


class SLOPlanParams(InputModel):
    """The plan's own settings (batch cap and annealing), shared by slo-sa and its in-engine twin
    engine-slo-sa (:class:`runners.schedulers.vllm.EngineSLOAwareParams`)."""

    max_batch: int | None = Field(
        title="largest planned batch",
        default=None,
        gt=0,
        le=65_536,
        description="largest batch the plan may form (paper: 1, 2, 4); default: the engine's max_num_seqs",
    )
    t0: float = Field(
        title="initial temperature",
        default=500.0,
        gt=0,
        le=1e6,
        description="simulated annealing's starting temperature, in basis points of the G bound (a "
        "move that loses L basis points is accepted with probability exp(-L / temperature))",
    )
    t_threshold: float = Field(
        title="final temperature",
        default=20.0,
        gt=0,
        le=1e6,
        description="annealing stops when the temperature falls below this (basis points of the G bound, as t0)",
    )
    iterations: int = Field(
        title="moves per temperature", default=100, gt=0, le=1_000_000, description="moves tried per temperature"
    )
    decay: float = Field(
        title="temperature decay",
        default=0.95,
        gt=0,
        lt=1,
        description="the temperature is multiplied by this after each level of moves, in (0, 1)",
    )
    seed: int = Field(
        title="annealing seed",
        default=0,
        ge=0,
        le=MAX_SEED,
        description="seed of the simulated annealing's random moves and acceptances (chain k uses seed "
        "+ 7919 k); the same seed and inputs give the same plan",
    )
    chains: int = Field(
        title="annealing chains",
        default=2,
        ge=1,
        le=2,
        description="anneal from 1 or both start points (paper: 1; 2 is "
        "closer to the exhaustive optimum at twice the time)",
    )

    @model_validator(mode="after")
    def _bounded_search(self) -> "SLOPlanParams":
        levels = (
            0
            if self.t0 < self.t_threshold
            else math.floor(math.log(self.t_threshold / self.t0) / math.log(self.decay)) + 1
        )
        if levels * self.iterations > MAX_ANNEALING_MOVES:
            raise field_error(
                type(self).__name__,
                "iterations",
                f"t0, t_threshold, decay and iterations give "
                f"{levels:,} temperature levels x {self.iterations:,} moves per plan; expected at most "
                f"{MAX_ANNEALING_MOVES:,} moves (lower iterations or decay, or raise t_threshold)",
                self.iterations,
            )
        return self


class SLOAwareParams(SLOPlanParams, OutputPriorParams, PolicyParams):
    dispatch: Literal["slots", "batches", "all"] = Field(
        title="dispatch mode",
        default="slots",
        description="slots: keep at most max_batch in flight per instance, sending in plan order as slots free up; "
        "batches: send a planned batch only when the previous one has finished; "
        "all: send every planned request at once in plan order (the paper's protocol); each request's priority is "
        "its batch's planned start (ms), so an engine serving by priority keeps the plans' order",
    )


@dataclass
class PlanInputs:
    """Everything a plan is scored on, for n waiting requests (seconds; limits inf when unset)."""

    exec_s: np.ndarray
    prefill_s: np.ndarray
    tpot_s: np.ndarray
    waited_s: np.ndarray
    ttft_limit: np.ndarray
    tpot_limit: np.ndarray
    e2e_limit: np.ndarray
    base_s: float

    @property
    def tables(self) -> tuple[np.ndarray, ...]:
        """The arrays in the order the compiled kernels take them (``tables`` in
        :mod:`runners.schedulers.slo_annealing_kernel`)."""
        return (
            self.exec_s,
            self.prefill_s,
            self.tpot_s,
            self.waited_s,
            self.ttft_limit,
            self.tpot_limit,
            self.e2e_limit,
        )

    def score(self, order: np.ndarray, sizes: np.ndarray, batches: int) -> tuple[float, int]:
        from runners.schedulers.slo_annealing_kernel import evaluate_plan

        return evaluate_plan(order, sizes, batches, self.tables, self.base_s)

    @property
    def g_upper(self) -> float:
        """n / sum of latency alone with no waiting: no plan can beat it."""
        total = float(np.sum(self.waited_s + self.base_s + self.exec_s[:, 0]))
        return len(self.waited_s) / total if total > 0 else 0.0


def plan_inputs(
    requests: list[Request],
    outputs: list[int],
    latency: LatencyPredictor,
    max_batch: int,
    now: float,
    base_s: float,
    cached: Mapping[str, int] | None = None,
) -> PlanInputs:
    """Latency tables [request, batch size - 1] from the latency model, for workload requests
    (their prompt tokens, time waited since arrival and their task's SLOs): :func:`plan_inputs_of`.
    ``cached``: prompt tokens expected in the prefix cache, by request id (none: 0)."""
    n = len(requests)
    computed = None
    if cached:
        computed = np.fromiter((r.input_tokens - cached.get(r.request_id, 0) for r in requests), dtype=float, count=n)
    return plan_inputs_of(
        np.fromiter((r.input_tokens for r in requests), dtype=float, count=n),
        outputs,
        np.fromiter((max(0.0, now - r.arrival_s) for r in requests), dtype=float, count=n),
        np.fromiter((r.slo.ttft_s or INF for r in requests), dtype=float, count=n),
        np.fromiter((r.slo.tpot_s or INF for r in requests), dtype=float, count=n),
        np.fromiter((r.slo.e2e_s or INF for r in requests), dtype=float, count=n),
        latency.model,
        max_batch,
        base_s,
        computed,
    )


def plan_inputs_of(
    input_tokens: np.ndarray,
    outputs: Any,
    waited_s: np.ndarray,
    ttft_limit: np.ndarray,
    tpot_limit: np.ndarray,
    e2e_limit: np.ndarray,
    model: LatencyModel,
    max_batch: int,
    base_s: float,
    computed_tokens: np.ndarray | None = None,
) -> PlanInputs:
    """A plan's inputs from plain arrays, one entry per waiting request: prompt tokens, predicted
    output tokens still to come, seconds waited since arrival, SLO limits in seconds (inf: none),
    the latency model's eq. 14/15 coefficients, and ``base_s``, seconds until the plan's first
    batch can start. The one function slo-sa (:func:`plan_inputs`) and the in-engine
    engine-slo-sa both plan from. No batch can be larger than the number of requests, so the
    tables are at most n wide."""
    n = len(waited_s)
    width = max(1, min(max_batch, n))
    inputs = np.asarray(input_tokens, dtype=float)
    from runners.schedulers.slo_annealing_kernel import latency_tables

    exec_s, prefill_s, tpot_s = latency_tables(
        inputs,
        inputs if computed_tokens is None else np.asarray(computed_tokens, dtype=float),
        np.asarray(outputs, dtype=float),
        width,
        model.prefill.as_tuple(),
        model.decode.as_tuple(),
    )
    return PlanInputs(
        exec_s,
        prefill_s,
        tpot_s,
        np.asarray(waited_s, dtype=float),
        np.asarray(ttft_limit, dtype=float),
        np.asarray(tpot_limit, dtype=float),
        np.asarray(e2e_limit, dtype=float),
        base_s,
    )


def slot_wait_s(finishes_s: list[float], max_batch: int) -> float:
    """Seconds until a continuous-batching instance has a free slot for the plan's first batch:
    0 while fewer than ``max_batch`` requests hold one, else the wait for the earliest of the
    predicted finishes (``finishes_s``, seconds from now, sorted ascending) that brings them below
    ``max_batch``. Shared by slo-sa (:meth:`SLOAwarePolicy.plan_start`) and engine-slo-sa."""
    must_free = len(finishes_s) - max_batch + 1
    return 0.0 if must_free <= 0 else finishes_s[must_free - 1]


def plan_annealing(inputs: PlanInputs, params: SLOPlanParams) -> tuple[np.ndarray, np.ndarray, int, float]:
    """Algorithm 1: start points, then simulated annealing. Returns (order, sizes, batches, G).
    The largest batch is the width of the latency tables. One compiled call does it all
    (:func:`runners.schedulers.slo_annealing_kernel.search`; chain k is seeded ``seed + 7919 k``)."""
    from runners.schedulers.slo_annealing_kernel import search

    return search(
        inputs.tables,
        inputs.base_s,
        params.t0,
        params.t_threshold,
        params.iterations,
        params.decay,
        params.seed,
        params.chains,
        inputs.g_upper,
    )


def compile_plan_kernels(params: SLOPlanParams) -> None:
    """Plan three made-up requests and score one plan of them, with the argument types a run
    uses, so numba compiles (or loads from its cache) :func:`latency_tables`, the annealer and the
    plan scorer now - seconds on a cold cache - rather than inside a run's first ``decide``."""
    phase = PhaseCoefficients(alpha=1e-7, beta=1e-3, gamma=1e-5, delta=1e-2)
    n = 3
    inputs = plan_inputs_of(
        np.array([16.0, 32.0, 48.0]),
        [8, 8, 8],
        np.zeros(n),
        np.full(n, INF),
        np.full(n, INF),
        np.full(n, 1.0),
        LatencyModel(prefill=phase, decode=phase),
        2,
        0.0,
    )
    plan_annealing(inputs, params.model_copy(update={"iterations": 1}))
    from runners.schedulers.slo_annealing_kernel import full_batches

    inputs.score(np.arange(n, dtype=np.int64), *full_batches(n, 2))


def compositions(n: int, max_part: int) -> Iterator[tuple[int, ...]]:
    """Every way to split n into ordered parts of size 1..max_part."""
    if n == 0:
        yield ()
        return
    for first in range(1, min(max_part, n) + 1):
        for rest in compositions(n - first, max_part):
            yield (first, *rest)


#: The most waiting requests (per instance) slo-exhaustive searches over.
EXHAUSTIVE_LIMIT = 7


def plan_exhaustive(
    inputs: PlanInputs, max_batch: int, limit: int = EXHAUSTIVE_LIMIT
) -> tuple[np.ndarray, np.ndarray, int, float]:
    """The paper's strawman: every order and every batch split. Only for n <= ``limit``."""
    n = len(inputs.waited_s)
    if n > limit:
        raise PolicyError(
            f"slo-exhaustive plans at most {limit} waiting requests per instance, got {n}; "
            "use slo-sa, or fewer requests"
        )
    from runners.schedulers.slo_annealing_kernel import full_batches

    best = (np.arange(n, dtype=np.int64), *full_batches(n, max_batch), -1.0)
    splits = []
    for parts in compositions(n, max_batch):
        sizes = np.zeros(n + 1, dtype=np.int64)
        sizes[: len(parts)] = parts
        splits.append((sizes, len(parts)))
    for permutation in itertools.permutations(range(n)):
        order = np.asarray(permutation, dtype=np.int64)
        for sizes, batches in splits:
            g, _ = inputs.score(order, sizes, batches)
            if g > best[3]:
                best = (order, sizes, batches, g)
    return best


@dataclass
class _InstancePlan:
    """slo-sa's view of one instance: its KV memory, the KV tokens of the requests assigned to it
    (eq. 20), the requests waiting for a plan, the current plan (batches of request ids, in order),
    whether it must be planned again, and each planned request's priority."""

    memory: InstanceMemory
    assigned_tokens: float = 0.0
    waiting: list[str] = field(default_factory=list)
    plan: list[list[str]] = field(default_factory=list)
    dirty: bool = False
    planned_start: dict[str, int] = field(default_factory=dict)  # request -> priority: planned start, ms


@dataclass
class _Sent:
    """An in-flight dispatch: when it was sent and started (first token), its batch size and the
    output tokens it already had (seconds, tokens)."""

    at: float
    batch: int
    done_before: int
    started: float | None = None


class SLOAwarePolicy(SchedulerPolicy[SLOAwareParams]):
    name = "slo-sa"
    summary = "Orders and batches waiting requests to maximise G by simulated annealing over predicted latencies."
    paper = cite("004", "Alg. 1-2")
    Params = SLOAwareParams

    def prepare(self) -> None:
        compile_plan_kernels(self.params)

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.latency: dict[int, LatencyPredictor] = {}
        for info in instances:
            if info.latency_model is None:
                raise PolicyError(
                    f"{self.name} needs a latency model: use the simulator, or set engine.profile to a "
                    "profile from 'python -m runners profile'"
                )
            self.latency[info.instance_id] = LatencyPredictor(info.latency_model)
        self.state = {info.instance_id: _InstancePlan(InstanceMemory(info.kv_capacity_tokens)) for info in instances}
        self.outputs = OutputLengthPredictor.from_params(self.params, self.workload, self.calibration)
        engine_batch = engine_slots(instances)
        self.max_batch = self.params.max_batch or engine_batch
        self.assigned: dict[str, int] = {}
        self.footprint: dict[str, float] = {}  # KV tokens counted against the instance at arrival
        # the prompt blocks sent to each instance (a gateway's guess at its prefix cache), and per
        # request the prompt tokens expected cached on its instance at arrival
        self.prefix = PrefixIndex(instances)
        self.cached: dict[str, int] = {}
        self.sent: dict[str, _Sent] = {}
        self.plans_made = 0

    def _assign(self, request: Request) -> int:
        """Eq. 20: the instance with the most free KV tokens after what is assigned to it."""

        def remaining(instance: int) -> float:
            state = self.state[instance]
            free = state.memory.free_tokens
            return (free if free is not None else 0.0) - state.assigned_tokens

        return max(sorted(self.state), key=remaining)

    def on_arrival(self, request: Request, now: float) -> None:
        super().on_arrival(request, now)
        instance = self._assign(request)
        state = self.state[instance]
        if request.segments:  # a prompt that shares content: what of it the instance likely still holds
            self.prefix.add(request)
            self.cached[request.request_id] = self.prefix.cached_tokens(request, instance)
        # the whole prompt counts against memory: a cached block the request reuses stops being free
        # when it runs (vLLM counts a cached block no request uses as free), so only the prefill is shorter
        footprint = self.footprint[request.request_id] = request.input_tokens + self.outputs.predict(request)
        state.assigned_tokens += footprint
        state.waiting.append(request.request_id)
        state.dirty = True
        self.assigned[request.request_id] = instance

    def on_telemetry(self, sample: TelemetrySample, now: float) -> None:
        self.state[sample.instance].memory.usage = sample.kv_usage

    def on_first_token(self, request_id: str, instance: int, now: float) -> None:
        sent = self.sent.get(request_id)
        if sent is not None and sent.started is None:
            sent.started = now

    def on_completion(self, completion: Completion, now: float) -> None:
        super().on_completion(completion, now)
        request = self.requests[completion.request_id]
        self.sent.pop(completion.request_id, None)
        state = self.state[completion.instance]
        if completion.done:
            self.outputs.observe(request.task, completion.tokens_total)
            state.assigned_tokens = max(0.0, state.assigned_tokens - self.footprint.pop(request.request_id, 0.0))
            self.outputs.forget(request.request_id)
            self.cached.pop(request.request_id, None)
            self.prefix.drop(request.request_id)
            # the task's Gaussian moved (every waiting request of it is predicted anew) and a slot
            # freed here: plan again wherever requests wait
            for other in self.state.values():
                if other.plan or other.waiting:
                    other.dirty = True
        else:  # a slice ended early: plan it again
            state.waiting.append(completion.request_id)
            state.dirty = True

    def on_failure(self, request_id: str, instance: int, reason: str, now: float) -> None:
        super().on_failure(request_id, instance, reason, now)
        self.sent.pop(request_id, None)
        state = self.state[instance]
        state.assigned_tokens = max(0.0, state.assigned_tokens - self.footprint.pop(request_id, 0.0))

    def make_plan(self, requests: list[Request], inputs: PlanInputs) -> tuple[np.ndarray, np.ndarray, int, float]:
        return plan_annealing(inputs, self.params)

    def predicted_finish(self, request_id: str, instance: int, now: float) -> float:
        """When an in-flight request should finish (seconds): from its start (first token, else
        dispatch), its predicted remaining output at its batch size; never before ``now``."""
        sent = self.sent[request_id]
        request = self.requests[request_id]
        remaining = max(1, self.outputs.predict(request) - sent.done_before)
        began = sent.started if sent.started is not None else sent.at
        return max(now, began + self.latency[instance].e2e(sent.batch, request.input_tokens, remaining))

    def plan_start(self, instance: int, now: float) -> float:
        """Seconds from ``now`` until the instance can start the plan's first batch.

        slots / all (continuous batching): the earliest free slot - now if fewer than max_batch
        requests hold one, else the earliest predicted finish among them. With ``all`` only requests
        that have started hold a slot (the rest wait inside the engine, ordered by the priorities
        the plans gave them). batches: when the whole batch in flight has finished."""
        mode = self.params.dispatch
        holders = [
            rid
            for rid in self.in_flight[instance]
            if mode != "all" or (rid in self.sent and self.sent[rid].started is not None)
        ]
        holders = [rid for rid in holders if rid in self.sent]
        if not holders:
            return 0.0
        finishes = sorted(self.predicted_finish(rid, instance, now) for rid in holders)
        if mode == "batches":
            return finishes[-1] - now
        return slot_wait_s([finish - now for finish in finishes], self.max_batch)

    def _replan(self, instance: int, now: float) -> None:
        state = self.state[instance]
        ids = [rid for batch in state.plan for rid in batch] + [rid for rid in state.waiting if rid in self.pending]
        ids = list(dict.fromkeys(ids))
        state.waiting = []
        state.planned_start = {}
        if not ids:
            state.plan = []
            state.dirty = False
            return
        requests = [self.requests[rid] for rid in ids]
        outputs = [max(1, self.outputs.predict(r) - self.tokens_done[r.request_id]) for r in requests]
        base_s = self.plan_start(instance, now)
        inputs = plan_inputs(requests, outputs, self.latency[instance], self.max_batch, now, base_s, self.cached)
        order, sizes, batches, _ = self.make_plan(requests, inputs)
        self.plans_made += 1
        plan, position, clock, previous = [], 0, now + base_s, -1
        for k in range(batches):
            members = [int(i) for i in order[position : position + sizes[k]]]
            plan.append([ids[i] for i in members])
            # priority = the batch's planned start, ms of run time, strictly increasing per batch
            priority = max(previous + 1, int(math.floor(clock * 1000.0)))
            for i in members:
                state.planned_start[ids[i]] = priority
            previous = priority
            clock += float(max(inputs.exec_s[i, sizes[k] - 1] for i in members))
            position += int(sizes[k])
        state.plan = plan
        state.dirty = False

    def decide(self, now: float) -> Decision:
        dispatches = []
        mode = self.params.dispatch
        for instance, state in self.state.items():
            if state.dirty:
                self._replan(instance, now)
            in_flight = self.in_flight[instance]
            if mode == "batches":
                if state.plan and not in_flight:
                    batch = state.plan.pop(0)
                    dispatches += self._send(instance, batch, len(batch), now)
                continue
            room = sum(map(len, state.plan)) if mode == "all" else self.max_batch - len(in_flight)
            while state.plan and room > 0:
                batch = state.plan[0]
                take = batch[:room]
                del batch[:room]
                if not batch:
                    state.plan.pop(0)
                dispatches += self._send(instance, take, self.max_batch, now)
                room -= len(take)
        return Decision(dispatches)

    def _send(self, instance: int, request_ids: list[str], batch: int, now: float) -> list:
        """Dispatch in plan order; each request's priority is its batch's planned start (ms of run
        time), so an engine that serves by priority (lower first) serves in plan order."""
        sent = []
        planned = self.state[instance].planned_start
        for rid in request_ids:
            self.sent[rid] = _Sent(now, batch, self.tokens_done[rid])
            sent.append(self._take(rid, instance, priority=planned.pop(rid)))
            if rid in self.cached:  # its prompt's blocks are on this instance now
                self.prefix.remember(rid, instance)
        return sent


class SLOExhaustivePolicy(SLOAwarePolicy):
    name = "slo-exhaustive"
    summary = "The SLO-aware paper's exhaustive search over orders and batch splits (at most 7 waiting requests)."
    paper = cite("004", "exhaustive baseline")
    max_waiting = EXHAUSTIVE_LIMIT

    def make_plan(self, requests: list[Request], inputs: PlanInputs) -> tuple[np.ndarray, np.ndarray, int, float]:
        return plan_exhaustive(inputs, self.max_batch)


#: The compiled kernels slo-sa plans with, in :mod:`runners.schedulers.slo_annealing_kernel` and
#: still importable from here. Imported where they are first called, so that listing slo-sa or
#: reading its parameters (the Home and Launch pages) does not import numba (issue 42).
KERNELS = ("evaluate_plan", "full_batches", "latency_tables", "search")


def __getattr__(name: str) -> Any:
    """A kernel of :data:`KERNELS`, from its module (PEP 562: only for names not defined here)."""
    if name in KERNELS:
        from runners.schedulers import slo_annealing_kernel

        return getattr(slo_annealing_kernel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
