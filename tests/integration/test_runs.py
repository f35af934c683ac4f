"""Whole runs on the simulator: the issue's done-when, determinism, failure and cancel paths."""

from __future__ import annotations

import pandas as pd
import pytest

from runners import registry
from runners.json_values import is_stored
from runners.metrics.sawtooth import sawtooth_cycles
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.schedulers.fcfs import FCFSPolicy
from runners.store.result_store import REQUEST_COLUMNS, TIMESERIES_COLUMNS, load_run


def run(results_dir, **overrides):
    data = {"workload": {"requests": 500, "arrival": {"process": "poisson", "rate": 4}}, "scheduler": {"name": "fcfs"}}
    for key, value in overrides.items():
        data[key] = value
    return execute_run(parse_config(data), results_dir)


@pytest.fixture(scope="module")
def fcfs_and_static(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    fcfs = run(folder, run_id="fcfs")
    static = run(folder, run_id="static", scheduler={"name": "static", "params": {"batch_size": 8}})
    return folder, fcfs, static


def test_fcfs_beats_static_on_attainment_and_g(fcfs_and_static):
    folder, fcfs, static = fcfs_and_static
    assert fcfs.status == static.status == "done"
    assert fcfs.summary.completed == static.summary.completed == 500
    assert fcfs.summary.slo_attainment > static.summary.slo_attainment + 0.5
    assert fcfs.summary.G > 10 * static.summary.G


def test_result_files_follow_the_contract(fcfs_and_static):
    folder, fcfs, _ = fcfs_and_static
    data = load_run(folder, "fcfs")
    assert list(data.requests.columns) == list(REQUEST_COLUMNS)
    assert list(data.timeseries.columns) == list(TIMESERIES_COLUMNS)
    for key in (
        "schema_version",
        "run_id",
        "engine",
        "scheduler",
        "status",
        "requests",
        "completed",
        "failed",
        "duration_s",
        "slo_attainment",
        "slo_attainment_by_task",
        "G",
        "goodput_rps",
        "request_throughput_rps",
        "output_throughput_tps",
        "total_throughput_tps",
        "ttft_s",
        "tpot_s",
        "e2e_s",
        "queue_s",
        "preemptions",
    ):
        assert is_stored(data.summary, key), key  # in the file, not only a default
    assert data.summary.ttft_s is not None and data.summary.ttft_s.model_fields_set == {"mean", "median", "p90", "p99"}
    # the config is enough to rerun: it parses back and names the seed and scheduler
    rerun = parse_config(data.config["config"])
    assert rerun.workload.seed == 0 and rerun.scheduler.name == "fcfs"
    assert data.config["resolved"]["kv_capacity_tokens"] == 813104


def test_latency_counts_from_arrival(fcfs_and_static):
    folder, _, _ = fcfs_and_static
    requests = load_run(folder, "static").requests
    assert (requests["queue_s"] > 1.0).mean() > 0.5  # static holds requests at the gateway
    assert (requests["ttft_s"] >= requests["queue_s"]).all()
    assert (requests["e2e_s"] >= requests["ttft_s"]).all()
    assert (requests["output_tokens"] == requests["target_output_tokens"]).all()
    assert (requests["finish_s"] - requests["arrival_s"] - requests["e2e_s"]).abs().max() < 1e-9


def test_static_kv_series_is_a_sawtooth(fcfs_and_static):
    folder, _, _ = fcfs_and_static
    static_ts = load_run(folder, "static").timeseries
    fcfs_ts = load_run(folder, "fcfs").timeseries
    assert static_ts["running"].max() == 8
    assert sawtooth_cycles(static_ts["kv_usage"]) >= 20  # 63 batches of 8
    assert sawtooth_cycles(fcfs_ts["kv_usage"]) <= 3
    assert static_ts["kv_usage"].between(0, 1).all()


def test_lone_request_matches_the_latency_model(results_dir):
    outcome = run(
        results_dir, workload={"requests": 1, "ratio": {"chat": 0, "code": 1}, "arrival": {"process": "all-at-once"}}
    )
    row = load_run(results_dir, outcome.run_id).requests.iloc[0]
    model = parse_config({}).engine.resolve().latency
    ttft, e2e = model.alone_latency(row["input_tokens"], row["target_output_tokens"])
    assert row["ttft_s"] == pytest.approx(ttft, rel=1e-9)
    assert row["e2e_s"] == pytest.approx(e2e, rel=1e-9)


def test_same_seed_same_numbers_and_two_instances(results_dir):
    workload = {"requests": 120, "arrival": {"process": "poisson", "rate": 8}}
    first = run(results_dir, run_id="a", workload=workload, engine={"instances": 2})
    second = run(results_dir, run_id="b", workload=workload, engine={"instances": 2})
    a, b = load_run(results_dir, "a").requests, load_run(results_dir, "b").requests
    pd.testing.assert_frame_equal(a, b)
    assert set(a["instance"]) == {0, 1}
    assert first.summary.G == second.summary.G


def test_small_cache_preempts_and_counts_it(results_dir):
    outcome = run(
        results_dir,
        workload={"requests": 60, "arrival": {"process": "all-at-once"}},
        engine={"kv_capacity_tokens": 4096},
    )
    data = load_run(results_dir, outcome.run_id)
    assert outcome.status == "done" and outcome.summary.preemptions > 0
    assert data.requests["preemptions"].sum() == outcome.summary.preemptions
    assert data.timeseries["preemptions"].is_monotonic_increasing


def test_cancel_keeps_partial_results(results_dir):
    ended = {"n": 0}

    def progress(done, total):
        ended["n"] = done

    outcome = execute_run(
        parse_config({"workload": {"requests": 300}, "run_id": "cut"}),
        results_dir,
        progress=progress,
        should_stop=lambda: ended["n"] >= 50,  # asked before each dispatch and every 0.05 s
    )
    data = load_run(results_dir, "cut")
    assert outcome.status == "cancelled" and data.summary.status == "cancelled"
    assert "cancelled" in data.summary.error
    assert len(data.requests) == 300  # every request accounted for
    done = data.requests[data.requests["error"].isna()]
    assert 0 < len(done) < 300 and (data.requests["error"].dropna() == "cancelled").all()
    assert len(data.timeseries) > 0


class ExplodingPolicy(FCFSPolicy):
    name = "exploding"

    def on_completion(self, completion, now):
        super().on_completion(completion, now)
        if len(self.requests) > 50:
            raise RuntimeError("policy bug")


def test_a_crashing_policy_fails_the_run_but_keeps_measurements(results_dir, monkeypatch):
    monkeypatch.setitem(registry.SCHEDULERS, "exploding", ExplodingPolicy)
    outcome = run(results_dir, run_id="boom", scheduler={"name": "exploding"})
    data = load_run(results_dir, "boom")
    assert outcome.status == "failed"
    assert (
        data.summary.error
        == "scheduler 'exploding' raised RuntimeError in on_completion (test_runs.py:156): policy bug (traceback in run.log)"
    )
    assert len(data.requests) == 500
    assert data.requests["error"].isna().sum() >= 1  # the completed request is kept with its timings


def test_auto_slo_is_ten_times_the_lone_average_request(results_dir):
    outcome = run(results_dir, run_id="auto", slo={"preset": "auto"}, workload={"requests": 50})
    data = load_run(results_dir, "auto")
    model = parse_config({}).engine.resolve().latency
    code = data.requests[data.requests["task"] == "code"]
    expected = 10 * model.alone_latency(code["input_tokens"].mean(), round(code["target_output_tokens"].mean()))[1]
    assert data.config["resolved"]["slos"]["code"]["e2e_s"] == pytest.approx(expected)
    assert outcome.status == "done"


def test_an_all_at_once_run_records_no_arrival_rate(tmp_path):
    """All at once there is no rate: the config's unused default (4 req/s) was recorded as the
    run's arrival rate, and exported to vLLM's format as if it had been one."""
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    def summary(arrival):
        config = parse_config({"engine": {"kind": "sim"}, "workload": {"requests": 10, "arrival": arrival}})
        return execute_run(config, tmp_path).summary

    assert summary({"process": "all-at-once"}).arrival_rate_rps is None
    assert summary({"process": "constant", "rate": 4}).arrival_rate_rps == 4.0
