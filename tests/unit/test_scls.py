"""SCLS (001): the DP batcher on the paper's Fig. 11 case, max-min offloading, the interval of
eq. 12 with Gamma relative to a slice's serving time, batch-synchronous workers, whole runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
from pydantic import ValidationError

from runners.engines.profile import QWEN25_7B_2XV100
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.schedulers.base import Completion, InstanceInfo
from runners.schedulers.slice_level import (
    SCLSParams,
    SCLSPolicy,
    assign_max_min,
    dp_batches_linear,
    ranges_from,
)
from runners.store.result_store import load_run
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO


def dp_batches(
    lengths: Sequence[int], serve_time: Callable[[np.ndarray, int], np.ndarray], max_batch: Callable[[int], int]
) -> tuple[list[tuple[int, int]], float]:
    """SCLS Alg. 1 over ``lengths`` sorted ascending: ([(start, end) index ranges], total seconds).

    ``serve_time(N, L)`` gives the serving time (seconds) of batches of sizes N (array) whose
    longest prompt is L; ``max_batch(L)`` the largest batch that fits in memory at length L.
    The reference of the compiled kernel ``slice_level.dp_batches_linear`` (kernel/reference
    pair), which needs the serving time linear in N.
    """
    n = len(lengths)
    total = np.zeros(n + 1)
    previous = np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n + 1):
        longest = int(lengths[i - 1])
        limit = max(1, min(i, max_batch(longest)))
        sizes = np.arange(1, limit + 1)
        candidates = total[i - sizes] + serve_time(sizes, longest)
        best = int(np.argmin(candidates))  # first minimum: the smallest batch on ties, as Alg. 1
        total[i] = candidates[best]
        previous[i] = i - sizes[best]
    ranges = []
    i = n
    while i > 0:
        ranges.append((int(previous[i]), i))
        i = int(previous[i])
    return ranges[::-1], float(total[n])


# Fig. 11: 15 requests of 10 prompt tokens and one of 1,024, S = 128. Batched together they take
# 13.5 s, split into two batches 7.6 s in total. The text gives no coefficients, so a toy estimator
# T_serve = A + B * N * (L + S) is fitted to those two totals: B = 19.4 / 33,642, A = 13.5 - 18,432 B.
B = 19.4 / 33642
A = 13.5 - 18432 * B
S = 128
LENGTHS = [10] * 15 + [1024]


def toy_serve(sizes: np.ndarray, longest: int) -> np.ndarray:
    return A + B * sizes * (longest + S)


def test_fig11_one_batch_versus_the_dp_split():
    assert toy_serve(np.array([16]), 1024)[0] == pytest.approx(13.5)
    ranges, total = dp_batches(LENGTHS, toy_serve, lambda longest: 1000)
    assert ranges == [(0, 15), (15, 16)] and total == pytest.approx(7.6)


def test_dp_respects_the_memory_bound():
    ranges, total = dp_batches(LENGTHS, toy_serve, lambda longest: 8)
    sizes = [end - start for start, end in ranges]
    assert max(sizes) <= 8 and sorted(sizes) == [1, 7, 8] and ranges[-1] == (15, 16)
    assert total == pytest.approx(10.4710, abs=1e-4)  # 3 A + B (15 * 138 + 1152)


@pytest.mark.parametrize("limit", [1000, 8, 3])
def test_compiled_dp_matches_the_reference(limit):
    rng = np.random.default_rng(limit)
    lengths = np.sort(rng.integers(5, 1500, size=60)).astype(float)
    ranges, total = dp_batches(lengths, toy_serve, lambda longest: limit)
    slope, intercept = B * (lengths + S), np.full(lengths.size, A)
    previous, compiled_total = dp_batches_linear(lengths, slope, intercept, np.full(lengths.size, limit))
    assert ranges_from(previous) == ranges and compiled_total == pytest.approx(total)


def test_max_min_offloading_and_interval():
    loads = {0: 0.0, 1: 0.0}
    assert assign_max_min([7, 5, 4, 3, 3], loads) == [0, 1, 1, 0, 1]
    assert loads == {0: 10.0, 1: 12.0}
    assert max(0.5 * min(loads.values()), 3.0) == 5.0  # T = max(lambda * min load, Gamma)


def run(results, run_id, scheduler, instances=1, requests=120):
    config = {
        "run_id": run_id,
        "workload": {"requests": requests, "seed": 2, "arrival": {"process": "poisson", "rate": 3}},
        "engine": {"instances": instances},
        "scheduler": scheduler,
    }
    return execute_run(parse_config(config), results)


def test_scls_serves_everything_in_slices(results_dir):
    outcome = run(
        results_dir, "scls", {"name": "scls", "params": {"slice_tokens": 128, "min_interval_s": 1.0}}, instances=2
    )
    requests = load_run(results_dir, "scls").requests
    assert outcome.status == "done" and (requests["output_tokens"] == requests["target_output_tokens"]).all()
    expected = -(-requests["target_output_tokens"] // 128)
    assert (requests["slices"] == expected).all()
    assert requests["slices"].max() > 1 and set(requests["instance"]) == {0, 1}


def test_scls_beats_static_batching_on_throughput(results_dir):
    static = run(results_dir, "static", {"name": "static", "params": {"batch_size": 16}}, requests=200).summary
    scls = run(results_dir, "scls2", {"name": "scls"}, requests=200).summary
    assert scls.request_throughput_rps > static.request_throughput_rps
    assert scls.e2e_s.mean < static.e2e_s.mean


def test_fcfs_with_a_conservative_cap(results_dir):
    outcome = run(results_dir, "ils", {"name": "fcfs", "params": {"max_in_flight": 4}}, requests=30)
    assert load_run(results_dir, "ils").timeseries["in_flight"].max() <= 4 and outcome.status == "done"


# The simulator's default profile (Qwen2.5-7B, SLO-aware paper Table 2, ms): prefill 0.1, 5.7, 0.01, 43.67;
# decode 0.0002, 0.275, 0.00088, 15.85. One slice (S = 128) of one request of 300 prompt tokens:
# prefill 0.1e-3 * 300 + 5.7e-3 + 0.01e-3 * 300 + 43.67e-3 = 0.08237 s; 127 decode steps at the mean
# context 300 + 64 = 364: 127 * (0.0002e-3 * 364 + 0.275e-3 + 0.00088e-3 * 364 + 15.85e-3) = 2.0978012 s.
ONE_SLICE_300 = 0.08237 + 127 * 0.01651812
SLO = TaskSLO(e2e_s=1000)


def policy(instances=2, **params):
    scls = SCLSPolicy(SCLSParams(**params))
    infos = [InstanceInfo(i, 100_000, 16, 256, QWEN25_7B_2XV100.latency_model()) for i in range(instances)]
    scls.start(infos, 0.0)
    return scls


def arrive(scls, count, prompt=300, output=200, now=0.0):
    for i in range(count):
        scls.on_arrival(Request(f"r{i}", "code", "", prompt, output, now, SLO), now)


def test_gamma_is_one_slice_of_one_request_by_default():
    assert ONE_SLICE_300 == pytest.approx(2.1801712)
    assert policy().min_interval(300.0) == pytest.approx(ONE_SLICE_300)
    assert policy(min_interval_slices=0.5).min_interval(300.0) == pytest.approx(ONE_SLICE_300 / 2)
    assert policy(min_interval_s=3.0).min_interval(300.0) == 3.0  # the paper's absolute DeepSpeed value


def test_interval_after_offloading_is_eq_12():
    # One request on two idle instances: instance 1 keeps load 0, so T = max(0.5 * 0, Gamma) = Gamma.
    scls = policy()
    arrive(scls, 1)
    decision = scls.decide(0.0)
    assert [d.request_id for d in decision.dispatches] == ["r0"] and decision.dispatches[0].max_tokens == 128
    assert scls.workers[0].load == pytest.approx(ONE_SLICE_300) and scls.workers[1].load == 0.0
    assert scls.next_schedule == pytest.approx(ONE_SLICE_300)
    # With the paper's absolute Gamma the same schedule waits 3 s.
    scls = policy(min_interval_s=3.0)
    arrive(scls, 1)
    scls.decide(0.0)
    assert scls.next_schedule == 3.0
    # One instance holding 4 batches of 2 (max_batch 2): the least load, 4 * T_serve(2, 300, 128), sets T.
    scls = policy(instances=1, max_batch=2)
    arrive(scls, 8)
    scls.decide(0.0)
    two = float(scls.model.serve_time(2.0, 300, 128))
    assert len(scls.workers[0].queue) == 3 and scls.workers[0].load == pytest.approx(4 * two)
    assert scls.next_schedule == pytest.approx(0.5 * 4 * two) and 0.5 * 4 * two > ONE_SLICE_300


def test_workers_are_batch_synchronous_as_in_the_paper():
    # One instance, max_batch 2, four requests: two batches. The second starts only when both requests
    # of the first have returned, even though the first finished early and its slot sits idle.
    scls = policy(instances=1, max_batch=2)
    arrive(scls, 4)
    first = {d.request_id for d in scls.decide(0.0).dispatches}
    assert len(first) == 2 and len(scls.workers[0].queue) == 1
    early, straggler = sorted(first)
    scls.on_completion(Completion(early, 0, 50, 50, True), 1.0)
    assert scls.decide(1.0).dispatches == []
    scls.on_completion(Completion(straggler, 0, 128, 128, False), 2.2)
    second = {d.request_id for d in scls.decide(2.2).dispatches}
    assert len(second) == 2 and not second & first
    assert scls.workers[0].load == pytest.approx(float(scls.model.serve_time(2.0, 300, 128)))


@pytest.mark.parametrize(
    "params, field",
    [
        ({"min_interval_s": 0}, "min_interval_s"),
        ({"min_interval_s": -3}, "min_interval_s"),
        ({"min_interval_slices": 0}, "min_interval_slices"),
        ({"min_interval_slices": -1}, "min_interval_slices"),
        ({"interval_lambda": 1}, "interval_lambda"),
        ({"interval_lambda": 0}, "interval_lambda"),
        ({"zeta": 1.5}, "zeta"),
        ({"slice_tokens": 0}, "slice_tokens"),
        ({"min_interval_s": 3, "min_interval_slices": 0.5}, "min_interval_slices"),
    ],
)
def test_parameters_outside_the_paper_are_refused_by_name(params, field):
    with pytest.raises(ValidationError) as error:
        SCLSParams(**params)
    assert [e["loc"] for e in error.value.errors()] == [(field,)]


def test_absolute_gamma_beside_the_default_relative_one_is_accepted():
    # The Launch form submits every parameter at its default, so this is what setting seconds there sends.
    assert SCLSParams(min_interval_s=3, min_interval_slices=1.0).min_interval_s == 3
