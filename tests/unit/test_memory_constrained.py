"""MC-SF and the alpha-protection baselines (003): the feasibility rule at completion times on a
worked example, and whole runs with small KV caches."""

from __future__ import annotations

import numpy as np

from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.schedulers.memory_constrained import admit_shortest_first
from runners.store.result_store import load_run

EMPTY = np.zeros(0)


def test_worked_example_admission_over_three_rounds():
    # capacity 10 tokens; A (prompt 2, output 2), B (2, 3), C (2, 6), all waiting at step 0.
    base, end = np.array([2.0, 2.0, 2.0]), np.array([2.0, 3.0, 6.0])
    # step 0: A and B fit (peak 8 at A's completion); C would make it 12 there
    assert admit_shortest_first(EMPTY, EMPTY, base, end, 10.0) == 2
    # step 1: A holds 3 with 1 step left, B 3 with 2 left: C gives 4 + 4 + 3 = 11 at A's completion
    assert admit_shortest_first(np.array([3.0, 3.0]), np.array([1.0, 2.0]), base[2:], end[2:], 10.0) == 0
    # step 2: A is done, B holds 4 with 1 left: 5 + 3 = 8 at B's completion, 8 at C's own: admitted
    assert admit_shortest_first(np.array([4.0]), np.array([1.0]), base[2:], end[2:], 10.0) == 1


def test_checks_every_future_completion_not_only_now():
    # now: 2 + 2 = 4 tokens in use, far below 10; but at the running request's completion in
    # 4 steps it holds 2 + 4 = 6 and the newcomer 3 + 4 = 7: 13 > 10, so it must wait
    assert admit_shortest_first(np.array([2.0]), np.array([4.0]), np.array([3.0]), np.array([5.0]), 10.0) == 0
    assert admit_shortest_first(np.array([2.0]), np.array([4.0]), np.array([3.0]), np.array([5.0]), 14.0) == 1


def run(results, run_id, scheduler, requests=150, rate=None, **settings):
    """A simulated run on a 16,384-token KV cache (all at once unless ``rate``, req/s); ``settings``:
    more top-level config keys (max_duration_s, ...)."""
    arrival = {"process": "all-at-once"} if rate is None else {"process": "poisson", "rate": rate}
    config = {
        "run_id": run_id,
        "workload": {"requests": requests, "seed": 4, "arrival": arrival},
        "engine": {"kv_capacity_tokens": 16_384},
        "scheduler": scheduler,
        **settings,
    }
    return execute_run(parse_config(config), results)


def test_mcsf_never_overflows_and_beats_alpha_protect(results_dir):
    # MC-SF's own setting: known output lengths (an oracle the user chooses, labelled as one)
    mcsf = run(results_dir, "mcsf", {"name": "mcsf", "params": {"output_predictor": "oracle"}})
    assert mcsf.summary.oracle == ["oracle: each request's exact output length (output_predictor oracle)"]
    # engine-preempt: the paper's clear-on-overflow livelocks alpha-protect in this burst
    # (tests/integration/test_memory_overflow.py); here the engine's preemption handles the overflows
    greedy = run(
        results_dir, "greedy", {"name": "alpha-protect", "params": {"alpha": 0.1, "overflow": "engine-preempt"}}
    )
    assert mcsf.status == greedy.status == "done"
    assert mcsf.summary.preemptions == 0
    assert mcsf.summary.e2e_s.mean < greedy.summary.e2e_s.mean
    assert load_run(results_dir, "mcsf").timeseries["kv_usage"].max() <= 1.0


def test_a_simulation_stops_at_its_time_limit(results_dir):
    # 80 requests at once take about 60 s of simulated time here; the limit is 5 s
    scheduler = {"name": "alpha-beta-clear", "params": {"alpha": 0.1, "beta": 0.2}}
    outcome = run(results_dir, "slow", scheduler, requests=80, max_duration_s=5)
    assert outcome.status == "failed" and "time limit" in outcome.error
    assert len(load_run(results_dir, "slow").requests) == 80


def test_mcsf_with_the_gaussian_predictor_starts_warm_from_the_workload():
    """output_predictor gaussian + output_prior workload (as slo-sa): before any request finishes,
    a request's prediction is its task's workload mean + std x its deviate, not the 256-token prior.
    Chat targets 100 and 300 (mean 200, std 141.42), code 1000 and 1000 (mean 1000, std 0)."""
    from runners.schedulers.base import InstanceInfo
    from runners.schedulers.memory_constrained import MCSFPolicy
    from runners.workload.requests import Request
    from runners.workload.slo import TaskSLO

    slo = TaskSLO(e2e_s=30.0)
    targets = [("chat", 100), ("chat", 300), ("code", 1000), ("code", 1000)]
    requests = [Request(f"r{i}", task, "x", 10, out, 0.0, slo) for i, (task, out) in enumerate(targets)]
    for prior, expect_warm in (("workload", True), ("cold", False)):
        policy = MCSFPolicy(MCSFPolicy.Params(output_predictor="gaussian", output_prior=prior))
        policy.on_workload(requests)
        policy.start([InstanceInfo(0, 100_000, 16, 64, None)], 0.0)
        for request in requests:
            policy.on_arrival(request, 0.0)
        z = {r.request_id: policy.outputs._deviate[r.request_id] for r in requests}
        for request in requests:
            mean, std = (200.0, float(np.std([100, 300], ddof=1))) if request.task == "chat" else (1000.0, 0.0)
            expected = max(1, round(mean + std * z[request.request_id])) if expect_warm else 256
            assert policy.predicted[request.request_id] == expected, (prior, request.request_id)
