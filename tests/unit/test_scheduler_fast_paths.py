"""The fast decision paths decide exactly what the straightforward ones do.

Four optimisations (bench/scheduler_overhead.py) are checked against the plain versions kept
here or beside them: the SLO-aware annealer that re-scores a move from its first changed batch
(against the annealer as first written, which re-scores the whole plan: same seed, same plan);
its latency tables computed in one compiled loop (against numpy broadcasting); MC-SF's admission
kernel with its lazy demand bound (against the O(n^2) rule); and the MC-SF / alpha-protection
policies that admit many requests per call with numpy (against per-request loops), driven
through the same random event streams.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from numba import njit

from runners.registry import make_policy
from runners.run.config import parse_config
from runners.schedulers.base import Completion, Decision, InstanceInfo, SchedulerPolicy, TelemetrySample
from runners.schedulers.memory_constrained import (
    AlphaBetaParams,
    AlphaParams,
    MemoryParams,
    admit_shortest_first,
    admit_shortest_first_reference,
)
from runners.schedulers.predictors import OutputLengthPredictor
from runners.schedulers.slo_annealing_kernel import evaluate_plan
from runners.schedulers.slo_aware import PlanInputs, SLOAwareParams, latency_tables, plan_annealing
from runners.workload.requests import Request
from runners.workload.slo import TASKS, TaskSLO


# -- SLO-aware annealing -------------------------------------------------------------------------
@njit
def _reference_batch_of(sizes, batches, position):
    start = 0
    for k in range(batches):
        if position < start + sizes[k]:
            return k, start
        start += sizes[k]
    return batches - 1, start - sizes[batches - 1]


@njit
def _reference_remove_empty(sizes, batches, k):
    for j in range(k, batches - 1):
        sizes[j] = sizes[j + 1]
    sizes[batches - 1] = 0
    return batches - 1


# reference_anneal is the plain twin of runners.schedulers.slo_annealing_kernel.anneal (same moves,
# same random draws, written alike on purpose) kept apart so the test below can check the kernel's
# incremental re-scoring against re-scoring the whole plan on every move.
@njit
def reference_anneal(
    order0, sizes0, batches0, tables, base_s, max_batch, t0, t_threshold, iterations, decay, seed, g_upper
):
    """The annealer as first written: every move re-scores the whole plan."""
    np.random.seed(seed)
    n = order0.shape[0]
    order = order0.copy()
    sizes = np.zeros(n + 1, dtype=np.int64)
    sizes[:batches0] = sizes0[:batches0]
    batches = batches0
    g, _ = evaluate_plan(order, sizes, batches, tables, base_s)
    best_order, best_sizes, best_batches, best_g = order.copy(), sizes.copy(), batches, g
    scale = 10000.0 / g_upper if g_upper > 0 else 1.0
    saved_sizes = sizes.copy()
    temperature = t0
    while temperature >= t_threshold and n > 1:
        for _ in range(iterations):
            move = np.random.randint(3)
            q = np.random.randint(n)
            k, start = _reference_batch_of(sizes, batches, q)
            old_batches = batches
            swapped_with = -1
            if move == 0:
                if k == 0 or sizes[k - 1] >= max_batch:
                    continue
                saved_sizes[: batches + 1] = sizes[: batches + 1]
                swapped_with = start
                sizes[k - 1] += 1
                sizes[k] -= 1
                if sizes[k] == 0:
                    batches = _reference_remove_empty(sizes, batches, k)
            elif move == 1:
                last = start + sizes[k] - 1
                if k == batches - 1:
                    if sizes[k] == 1:
                        continue
                    saved_sizes[: batches + 1] = sizes[: batches + 1]
                    swapped_with = last
                    sizes[k] -= 1
                    sizes[batches] = 1
                    batches += 1
                else:
                    if sizes[k + 1] >= max_batch:
                        continue
                    saved_sizes[: batches + 1] = sizes[: batches + 1]
                    swapped_with = last
                    sizes[k] -= 1
                    sizes[k + 1] += 1
                    if sizes[k] == 0:
                        batches = _reference_remove_empty(sizes, batches, k)
            else:
                swapped_with = np.random.randint(n)
                if swapped_with == q:
                    continue
            order[q], order[swapped_with] = order[swapped_with], order[q]
            new_g, _ = evaluate_plan(order, sizes, batches, tables, base_s)
            delta = (new_g - g) * scale
            if delta >= 0.0 or np.random.random() < np.exp(delta / temperature):
                g = new_g
                if g > best_g:
                    best_g = g
                    best_order[:] = order
                    best_sizes[:] = sizes
                    best_batches = batches
            else:
                order[q], order[swapped_with] = order[swapped_with], order[q]
                if move != 2:
                    sizes[: old_batches + 1] = saved_sizes[: old_batches + 1]
                    batches = old_batches
        temperature *= decay
    return best_order, best_sizes, best_batches, best_g


def reference_plan(inputs: PlanInputs, params: SLOAwareParams):
    """Algorithm 1 step by step in Python: start points, then one or two annealing chains."""
    max_batch = inputs.exec_s.shape[1]
    n = len(inputs.waited_s)
    sizes = np.zeros(n + 1, dtype=np.int64)
    batches, remaining = 0, n
    while remaining > 0:
        sizes[batches] = min(max_batch, remaining)
        remaining -= sizes[batches]
        batches += 1
    points = []
    for order in (np.argsort(inputs.exec_s[:, max_batch - 1], kind="stable").astype(np.int64), np.arange(n)):
        g, met = inputs.score(order, sizes, batches)
        points.append((order, g, met == n))
    if points[0][2] or n <= 1:
        return points[0][0], sizes, batches, points[0][1]
    if params.chains == 1:
        points = [max(points, key=lambda point: point[1])]
    best = None
    for chain, (order, _, _) in enumerate(points):
        result = reference_anneal(
            order,
            sizes,
            batches,
            inputs.tables,
            inputs.base_s,
            max_batch,
            params.t0,
            params.t_threshold,
            params.iterations,
            params.decay,
            params.seed + 7919 * chain,
            inputs.g_upper,
        )
        if best is None or result[3] > best[3]:
            best = result
    return best


def random_problem(rng: np.random.Generator) -> PlanInputs:
    n = int(rng.integers(1, 40))
    max_batch = min(int(rng.integers(1, 6)), n)
    alone = rng.uniform(0.05, 2.0, size=n)
    if rng.random() < 0.3:
        alone = np.round(alone, 1)  # ties
    exec_s = np.ascontiguousarray(np.stack([alone * (1 + 0.3 * b) for b in range(max_batch)], axis=1))
    return PlanInputs(
        exec_s=exec_s,
        prefill_s=exec_s * 0.1,
        tpot_s=exec_s * 0.01,
        waited_s=rng.uniform(0, 1, n) if rng.random() < 0.5 else np.zeros(n),
        ttft_limit=rng.uniform(0.2, 4.0, n) if rng.random() < 0.5 else np.full(n, np.inf),
        tpot_limit=np.full(n, 0.015) if rng.random() < 0.3 else np.full(n, np.inf),
        e2e_limit=rng.uniform(0.5, 3.0 * n / max_batch, n),
        base_s=float(rng.uniform(0, 0.5)),
    )


def test_incremental_annealer_plans_exactly_like_the_full_rescoring_one():
    rng = np.random.default_rng(2026)
    annealed = 0
    for _ in range(150):
        problem = random_problem(rng)
        params = SLOAwareParams(seed=int(rng.integers(0, 10_000)), chains=int(rng.integers(1, 3)))
        expected = reference_plan(problem, params)
        order, sizes, batches, g = plan_annealing(problem, params)
        assert batches == expected[2] and g == expected[3]  # bit-identical G
        assert (order == expected[0]).all() and (sizes[:batches] == expected[1][:batches]).all()
        annealed += len(problem.waited_s) > 1
    assert annealed > 100


def reference_latency_tables(inputs, produced, width, prefill, decode):
    """plan_inputs' tables as first written, with numpy broadcasting."""
    batch = np.arange(1, width + 1, dtype=float)[None, :]
    inputs, produced = inputs[:, None], produced[:, None]
    prefill_s = prefill[0] * batch * inputs + prefill[1] * batch + prefill[2] * inputs + prefill[3]
    steps = np.maximum(produced - 1.0, 0.0)
    context = inputs + (steps + 1.0) / 2.0
    decode_s = steps * (decode[0] * batch * context + decode[1] * batch + decode[2] * context + decode[3])
    tpot_s = np.where(steps > 0, decode_s / np.maximum(steps, 1.0), 0.0)
    return prefill_s + decode_s, prefill_s, tpot_s


def test_compiled_latency_tables_equal_the_numpy_ones():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n, width = int(rng.integers(1, 60)), int(rng.integers(1, 9))
        inputs = rng.integers(1, 4000, n).astype(float)
        produced = rng.integers(1, 2000, n).astype(float)
        prefill, decode = tuple(rng.uniform(0, 1e-3, 4) * (rng.random(4) < 0.8)), tuple(rng.uniform(0, 1e-2, 4))
        got = latency_tables(inputs, inputs, produced, width, prefill, decode)
        for ours, expected in zip(got, reference_latency_tables(inputs, produced, width, prefill, decode)):
            assert np.array_equal(ours, expected)  # bit for bit


# -- MC-SF admission kernel ----------------------------------------------------------------------
def test_admission_kernel_matches_the_quadratic_rule():
    rng = np.random.default_rng(7)
    admitted_some = partial = 0
    for _ in range(3000):
        running, candidates = int(rng.integers(0, 25)), int(rng.integers(0, 50))
        scale, horizon = int(rng.choice([5, 50, 500])), int(rng.choice([3, 20, 300]))
        running_base = rng.integers(1, scale, running).astype(float)
        running_end = rng.integers(1, horizon, running).astype(float)
        base = rng.integers(1, scale, candidates).astype(float)
        end = np.sort(rng.integers(1, horizon, candidates)).astype(float)
        if rng.random() < 0.05:
            end = end[::-1].copy()  # unsorted: the fast kernel must fall back
        peak = running_base.sum() + base.sum() + horizon * (running + candidates)
        capacity = float(rng.uniform(0, 1.2) * peak) + (0.5 if rng.random() < 0.3 else 0.0)
        expected = admit_shortest_first_reference(running_base, running_end, base, end, capacity)
        assert admit_shortest_first(running_base, running_end, base, end, capacity) == expected
        admitted_some += expected > 0
        partial += 0 < expected < candidates
    assert admitted_some > 1000 and partial > 500  # both the easy and the binding cases were exercised
    empty = np.zeros(0)
    assert admit_shortest_first(empty, empty, empty, empty, 10.0) == 0


# -- the memory-constrained policies, per-request reference versions ------------------------------
class _Running:
    __slots__ = ("prompt", "predicted", "first_token")

    def __init__(self, prompt: int, predicted: int) -> None:
        self.prompt, self.predicted, self.first_token = prompt, predicted, None


class ReferenceMemoryPolicy(SchedulerPolicy):
    """The MC-SF family as first written: one object and one check per request."""

    Params = MemoryParams

    def start(self, instances, now):
        super().start(instances, now)
        self.capacity = {i.instance_id: i.kv_capacity_tokens * self.params.memory_fraction for i in instances}
        self.block_slack = {i.instance_id: float((i.block_size or 1) - 1) for i in instances}
        self.latency = {i.instance_id: i.latency_model for i in instances}
        self.running = {i.instance_id: {} for i in instances}
        self.outputs = OutputLengthPredictor.from_params(self.params)
        self.usage = {i.instance_id: None for i in instances}
        self.measured_tpot = deque(maxlen=32)
        self.predicted = {}

    def on_arrival(self, request, now):
        super().on_arrival(request, now)
        self.predicted[request.request_id] = self.outputs.predict(request)

    def on_first_token(self, request_id, instance, now):
        entry = self.running[instance].get(request_id)
        if entry is not None:
            entry.first_token = now

    def on_completion(self, completion, now):
        entry = self.running[completion.instance].pop(completion.request_id, None)
        if entry is not None and entry.first_token is not None and completion.tokens_this_dispatch > 1:
            self.measured_tpot.append((now - entry.first_token) / (completion.tokens_this_dispatch - 1))
        super().on_completion(completion, now)
        if completion.done:
            self.outputs.observe(self.requests[completion.request_id].task, completion.tokens_total)

    def on_failure(self, request_id, instance, reason, now):
        self.running[instance].pop(request_id, None)
        super().on_failure(request_id, instance, reason, now)

    def on_telemetry(self, sample, now):
        self.usage[sample.instance] = sample.kv_usage

    def step_time(self, instance):
        running, model, estimates = self.running[instance], self.latency[instance], []
        if model is not None and running:
            context = sum(entry.prompt for entry in running.values()) / len(running)
            estimates.append(model.decode_step_time(len(running), context))
        if self.measured_tpot:
            estimates.append(sum(self.measured_tpot) / len(self.measured_tpot))
        return max(estimates) if estimates else self.params.default_step_s

    def progress(self, instance, now):
        step = self.step_time(instance)
        held, remaining = [], []
        for entry in self.running[instance].values():
            generated = 0 if entry.first_token is None else 1 + int((now - entry.first_token) / step)
            held.append(entry.prompt + generated + self.block_slack[instance])
            remaining.append(max(1, entry.predicted - generated))
        return np.asarray(held, dtype=float), np.asarray(remaining, dtype=float)

    def prompt_tokens(self, request_id):
        return self.requests[request_id].input_tokens + self.tokens_done[request_id]

    def predicted_remaining(self, request_id):
        return max(1, self.predicted[request_id] - self.tokens_done[request_id])

    def send(self, request_id, instance):
        self.running[instance][request_id] = _Running(
            self.prompt_tokens(request_id), self.predicted_remaining(request_id)
        )
        return self._take(request_id, instance)


class ReferenceMCSF(ReferenceMemoryPolicy):
    def decide(self, now):
        dispatches = []
        for instance in sorted(self.running):
            if not self.pending:
                break
            held, remaining = self.progress(instance, now)
            waiting = sorted(
                self.pending, key=lambda rid: (self.predicted_remaining(rid), self.requests[rid].arrival_s)
            )
            ends = np.asarray([self.predicted_remaining(rid) for rid in waiting], dtype=float)
            bases = np.asarray([self.prompt_tokens(rid) for rid in waiting], dtype=float) + self.block_slack[instance]
            admitted = admit_shortest_first_reference(held, remaining, bases, ends, float(self.capacity[instance]))
            if admitted == 0 and not self.running[instance] and waiting:
                admitted = 1
            dispatches += [self.send(rid, instance) for rid in waiting[:admitted]]
        return Decision(dispatches)


class ReferenceAlphaProtect(ReferenceMemoryPolicy):
    Params = AlphaParams

    def decide(self, now):
        dispatches = []
        for instance in sorted(self.running):
            limit = (1.0 - self.params.alpha) * self.capacity[instance]
            held, _ = self.progress(instance, now)
            usage = self.usage[instance]
            measured = usage * self.capacity[instance] / self.params.memory_fraction if usage is not None else 0.0
            used = max(float(held.sum()), measured)
            for request_id in list(self.pending):
                prompt = self.prompt_tokens(request_id)
                if used + prompt > limit and self.running[instance]:
                    break
                used += prompt
                dispatches.append(self.send(request_id, instance))
        return Decision(dispatches)


class ReferenceAlphaBetaClear(ReferenceAlphaProtect):
    Params = AlphaBetaParams

    def start(self, instances, now):
        super().start(instances, now)
        self.rng = np.random.default_rng(self.params.clear_seed)
        self.preemptions = {i.instance_id: None for i in instances}
        self.overflowed = set()

    def on_telemetry(self, sample, now):
        super().on_telemetry(sample, now)
        previous = self.preemptions[sample.instance]
        if sample.preemptions is not None:
            if previous is not None and sample.preemptions > previous:
                self.overflowed.add(sample.instance)
            self.preemptions[sample.instance] = sample.preemptions

    def decide(self, now):
        cancels = []
        if self.params.overflow != "clear":  # engine-preempt: the engine handles an overflow alone
            self.overflowed.clear()
        for instance in sorted(self.overflowed):
            for request_id in list(self.running[instance]):
                if self.rng.random() < self.params.beta:
                    del self.running[instance][request_id]
                    self.in_flight[instance].discard(request_id)
                    self.pending = {request_id: self.requests[request_id], **self.pending}
                    cancels.append(request_id)
        self.overflowed.clear()
        decision = super().decide(now)
        return Decision(decision.dispatches, decision.wake_at, cancels)


REFERENCES = {
    "mcsf": ReferenceMCSF,
    "alpha-protect": ReferenceAlphaProtect,
    "alpha-beta-clear": ReferenceAlphaBetaClear,
}


def as_tuples(decision: Decision):
    return ([(d.request_id, d.instance, d.max_tokens, d.priority) for d in decision.dispatches], list(decision.cancels))


def drive(name: str, params: dict, seed: int) -> int:
    """Feed the fast and the reference policy the same random events; every decision must match.
    Returns how many requests were dispatched (to show the stream exercised admission)."""
    rng = np.random.default_rng(seed)
    latency = parse_config({}).engine.resolve().latency
    instances = [
        InstanceInfo(
            i, int(rng.choice([2_000, 8_000, 40_000, 813_104])), 16, 256, latency if rng.random() < 0.8 else None
        )
        for i in range(int(rng.integers(1, 4)))
    ]
    fast = make_policy(name, params)
    reference = REFERENCES[name](type(fast.params)(**params))
    for policy in (fast, reference):
        policy.start(instances, 0.0)
    slo = TaskSLO(e2e_s=10.0)
    now, made, dispatched = 0.0, 0, 0
    flying: dict[str, list] = {}  # request -> [instance, first token seen]
    for step in range(400):
        now += float(rng.exponential(0.05)) + 1e-3
        event = rng.random()
        both = (fast, reference)
        if event < 0.35 or not flying:
            for _ in range(int(rng.integers(1, 40 if rng.random() < 0.2 else 4))):
                arrival = now - (float(rng.uniform(0, 0.5)) if rng.random() < 0.1 else 0.0)  # some out of order
                request = Request(
                    f"r{made}",
                    str(rng.choice(list(TASKS))),
                    "",
                    int(rng.integers(1, 3000)),
                    int(rng.integers(1, 400)),
                    arrival,
                    slo,
                )
                made += 1
                for policy in both:
                    policy.on_arrival(request, now)
        elif event < 0.55:
            request_id = list(flying)[int(rng.integers(len(flying)))]
            instance, seen = flying[request_id]
            if not seen:
                flying[request_id][1] = True
                for policy in both:
                    policy.on_first_token(request_id, instance, now)
        elif event < 0.8:
            request_id = list(flying)[int(rng.integers(len(flying)))]
            instance, _ = flying.pop(request_id)
            done_before = fast.tokens_done[request_id]
            target = fast.requests[request_id].target_output_tokens
            produced = int(rng.integers(1, target - done_before + 1))
            done = done_before + produced == target or rng.random() < 0.7
            if done:
                produced = target - done_before
            completion = Completion(request_id, instance, produced, done_before + produced, done)
            for policy in both:
                policy.on_completion(completion, now)
        elif event < 0.85:
            request_id = list(flying)[int(rng.integers(len(flying)))]
            instance, _ = flying.pop(request_id)
            for policy in both:
                policy.on_failure(request_id, instance, "test", now)
        else:
            instance = instances[int(rng.integers(len(instances)))].instance_id
            sample = TelemetrySample(
                instance,
                now,
                float(rng.uniform(0, 1)) if rng.random() < 0.8 else None,
                None,
                None,
                int(step // 10 + rng.integers(0, 2)),
            )
            for policy in both:
                policy.on_telemetry(sample, now)
        got, expected = as_tuples(fast.decide(now)), as_tuples(reference.decide(now))
        assert got == expected, f"step {step}"
        for request_id in got[1]:
            flying.pop(request_id, None)
        for request_id, instance, _, _ in got[0]:
            flying[request_id] = [instance, False]
        dispatched += len(got[0])
    return dispatched


@pytest.mark.parametrize(
    "name,params",
    [
        ("mcsf", {}),
        ("mcsf", {"output_predictor": "gaussian", "memory_fraction": 0.8}),
        # admission is the fast path compared here; clearing on overflow (the default) is checked by hand
        # in test_memory_overflow.py, so the alpha policies run with the engine's own preemption
        ("alpha-protect", {"overflow": "engine-preempt"}),
        ("alpha-protect", {"alpha": 0.1, "output_predictor": "noisy-oracle", "overflow": "engine-preempt"}),
        ("alpha-beta-clear", {"alpha": 0.1, "beta": 0.5, "overflow": "engine-preempt"}),
    ],
)
def test_memory_policies_decide_like_their_per_request_versions(name, params):
    dispatched = sum(drive(name, params, seed) for seed in range(6))
    assert dispatched > 200
