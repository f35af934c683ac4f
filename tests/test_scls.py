"""SCLS (001): the DP batcher on the paper's Fig. 11 case, max-min offloading, whole runs."""

from __future__ import annotations

import numpy as np
import pytest

from runners.benchmark import execute_run
from runners.config import parse_config
from runners.result_store import load_run
from runners.schedulers.slice_level import assign_max_min, dp_batches, dp_batches_linear, ranges_from

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
    config = {"run_id": run_id, "workload": {"requests": requests, "seed": 2, "arrival": {"process": "poisson", "rate": 3}},
              "engine": {"instances": instances}, "scheduler": scheduler}
    return execute_run(parse_config(config), results)


def test_scls_serves_everything_in_slices(results_dir):
    outcome = run(results_dir, "scls", {"name": "scls", "params": {"slice_tokens": 128, "min_interval_s": 1.0}},
                  instances=2)
    requests = load_run(results_dir, "scls").requests
    assert outcome.status == "done" and (requests["output_tokens"] == requests["target_output_tokens"]).all()
    expected = -(-requests["target_output_tokens"] // 128)
    assert (requests["slices"] == expected).all()
    assert requests["slices"].max() > 1 and set(requests["instance"]) == {0, 1}


def test_scls_beats_static_batching_on_throughput(results_dir):
    static = run(results_dir, "static", {"name": "static", "params": {"batch_size": 16}}, requests=200).summary
    scls = run(results_dir, "scls2", {"name": "scls"}, requests=200).summary
    assert scls["request_throughput_rps"] > static["request_throughput_rps"]
    assert scls["e2e_s"]["mean"] < static["e2e_s"]["mean"]


def test_fcfs_with_a_conservative_cap(results_dir):
    outcome = run(results_dir, "ils", {"name": "fcfs", "params": {"max_in_flight": 4}}, requests=30)
    assert load_run(results_dir, "ils").timeseries["in_flight"].max() <= 4 and outcome.status == "done"
