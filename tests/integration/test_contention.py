"""How contended a run was (summary.json ``contention``) and whether compared runs could differ:
numbers by hand on a small time series, then whole simulator runs with and without a queue."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from runners.metrics.contention import contention, identical_decisions, identical_decisions_message
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.models import RunSummary
from runners.store.result_store import load_run
from runners.views.compare import comparison_table

HINT = "create contention with a higher rate, fewer slots (engine.max_num_seqs) or less KV"


def sample(t_s, instance, waiting, gateway_pending):
    return {
        "t_s": t_s,
        "instance": instance,
        "waiting": waiting,
        "gateway_pending": gateway_pending,
        "running": 1,
        "kv_usage": 0.1,
    }


def test_contention_by_hand_on_two_instances():
    rows = [
        sample(0.0, 0, 0, 0),
        sample(0.0, 1, 0, 0),  # waiting(0) = 0
        sample(1.0, 0, 2, 3),
        sample(1.0, 1, 1, 3),  # 2 + 1 engine, 3 held once: 6
        sample(2.0, 0, 0, 1),
        sample(2.0, 1, None, 1),  # instance 1 did not answer: 0 + 1 = 1
        sample(4.0, 0, 5, 0),
        sample(4.0, 1, 0, 0),
        sample(4.0, 0, 0, 0),  # final sample at the same instant wins: 0
    ]
    result = contention(rows)
    # held for 1 s, 1 s, 2 s over a 4 s span: mean (0*1 + 6*1 + 1*2) / 4, queue during 3 of 4 s
    assert result == {"waiting_peak": 6, "waiting_mean": 2.0, "queued_share": 0.75, "samples": 4}
    assert contention(pd.DataFrame(rows)) == result


def test_contention_of_one_sample_and_of_none():
    assert contention([sample(3.0, 0, 2, 1)]) == {
        "waiting_peak": 3,
        "waiting_mean": 3.0,
        "queued_share": 1.0,
        "samples": 1,
    }
    assert contention([]) == {"waiting_peak": None, "waiting_mean": None, "queued_share": None, "samples": 0}


def table(rows):
    return pd.DataFrame(rows, columns=["request_id", "dispatch_s", "first_token_s", "finish_s", "e2e_s"])


def test_identical_decisions_on_small_tables():
    a = table([("r0", 0.0, 0.1, 1.0, 1.0), ("r1", 0.5, 0.6, None, None)])
    reordered = table([("r1", 0.5, 0.6 + 1e-12, None, 9.0), ("r0", 0.0, 0.1, 1.0, 1.0)])
    assert identical_decisions([a, reordered])  # row order and non-decision columns do not matter
    assert not identical_decisions([a, table([("r0", 0.0, 0.1, 1.0, 1.0), ("r1", 0.5, 0.6 + 1e-6, None, None)])])
    assert not identical_decisions([a, table([("r0", 0.0, 0.1, 1.0, 1.0), ("r1", 0.5, 0.6, 2.0, 1.5)])])
    assert not identical_decisions([a, table([("r0", 0.0, 0.1, 1.0, 1.0), ("r2", 0.5, 0.6, None, None)])])
    assert not identical_decisions([a, a.iloc[:1]])
    assert identical_decisions([a, a, reordered])
    assert not identical_decisions([a])


def test_identical_decisions_message_says_why_and_what_to_change():
    calm = {"contention": {"waiting_peak": 0, "waiting_mean": 0.0, "queued_share": 0.0, "samples": 10}}
    brief = {"contention": {"waiting_peak": 2, "waiting_mean": 0.06, "queued_share": 0.061, "samples": 10}}
    assert identical_decisions_message([calm, calm], True) == (
        "these runs made identical decisions: the engine never had a queue (max waiting 0); " + HINT
    )
    assert identical_decisions_message([calm, brief], True) == (
        "these runs made identical decisions: requests waited only briefly (max waiting 2, a queue 6.1% of the "
        "time) and every scheduler served them in the same order; " + HINT
    )
    assert identical_decisions_message([{}, {"contention": "damaged"}], True) == (
        "these runs made identical decisions: the runs do not record how many requests waited; " + HINT
    )
    assert identical_decisions_message([calm, calm], False) is None


CALM = {"requests": 20, "arrival": {"process": "constant", "rate": 0.5}}  # each done before the next arrives
BUSY = {"requests": 40, "arrival": {"process": "all-at-once"}}  # 40 requests, 4 slots


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    outcomes = {}
    for setting, workload, engine in (("calm", CALM, {}), ("busy", BUSY, {"max_num_seqs": 4})):
        for scheduler in ("fcfs", "slo-sa"):
            config = parse_config(
                {
                    "workload": workload,
                    "engine": engine,
                    "scheduler": {"name": scheduler},
                    "run_id": f"{setting}-{scheduler}",
                }
            )
            outcomes[setting, scheduler] = execute_run(config, folder)
    return folder, outcomes


def saved(folder, run_id):
    run = load_run(folder, run_id)
    return json.loads((folder / run_id / "summary.json").read_text()), run


def test_a_run_without_queue_records_peak_zero(runs):
    folder, _ = runs
    summary, run = saved(folder, "calm-fcfs")
    assert summary["contention"]["waiting_peak"] == 0
    assert summary["contention"]["queued_share"] == 0.0
    assert summary["contention"]["samples"] > 40  # 20 requests 2 s apart, sampled every 0.25 s
    assert contention(run.timeseries) == summary["contention"]  # recomputable from the saved series


def test_a_run_with_a_queue_records_it(runs):
    folder, _ = runs
    summary, run = saved(folder, "busy-fcfs")
    # all 40 arrive at once and 4 run: 36 wait in the engine at the first sample after arrival
    assert summary["contention"]["waiting_peak"] == 36
    assert 0 < summary["contention"]["waiting_mean"] < 36
    assert 0.5 < summary["contention"]["queued_share"] < 1.0
    assert contention(run.timeseries) == summary["contention"]
    record = RunSummary.model_validate(summary)
    other = record.model_copy(update={"run_id": "other"})
    table = comparison_table([record, other], baseline=summary["run_id"]).set_index("metric")
    assert table.loc["requests waiting, peak", summary["run_id"]] == 36
    assert table.loc["time with a queue (%)", summary["run_id"]] == pytest.approx(
        summary["contention"]["queued_share"] * 100
    )


def test_schedulers_decide_alike_without_a_queue_and_differ_with_one(runs):
    folder, outcomes = runs
    calm = [load_run(folder, f"calm-{name}").requests for name in ("fcfs", "slo-sa")]
    busy = [load_run(folder, f"busy-{name}").requests for name in ("fcfs", "slo-sa")]
    assert identical_decisions(calm)
    assert not identical_decisions(busy)
    summaries = [outcomes["calm", name].summary for name in ("fcfs", "slo-sa")]
    assert identical_decisions_message(summaries, identical_decisions(calm)) == (
        "these runs made identical decisions: the engine never had a queue (max waiting 0); " + HINT
    )


def test_a_wall_clock_run_records_what_the_gateway_holds(results_dir):
    """Static batching (B = 2) against a fake LMDeploy server holds requests at the gateway: the
    wall-clock driver's summary counts them, the same numbers as its saved time series."""
    from tests.fakes.lmdeploy_server import FakeLMDeploy

    server = FakeLMDeploy().start()
    try:
        config = parse_config(
            {
                "run_id": "static-attached",
                "engine": {"kind": "openai", "urls": server.url},
                "workload": {
                    "requests": 8,
                    "arrival": {"process": "all-at-once"},
                    "filters": {"max_total_tokens": 300},
                },
                "scheduler": {"name": "static", "params": {"batch_size": 2}},
                "sample_interval_s": 0.05,
            }
        )
        outcome = execute_run(config, results_dir)
    finally:
        server.stop()
    assert outcome.status == "done", outcome.error
    summary, run = saved(results_dir, "static-attached")
    assert run.timeseries["gateway_pending"].max() >= 4  # 8 at once, at most 2 out: 6 held at first
    assert summary["contention"]["waiting_peak"] >= 4
    assert summary["contention"]["queued_share"] > 0
    assert contention(run.timeseries) == summary["contention"]


def test_contention_rows_describe_the_setting_and_are_never_coloured():
    from runners.views.compare import change_is_good

    assert change_is_good("requests waiting, peak", 50.0) is None
    assert change_is_good("time with a queue (%)", -20.0) is None
    assert change_is_good("E2E mean (s)", -20.0) is True
