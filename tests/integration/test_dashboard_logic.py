"""The dashboard's logic without streamlit: comparison table and capacity (hand-computed),
background jobs (worker process, cancel keeps rows, lost worker), the live reader, the paced
simulator, run rename, and PNG/HTML export."""

from __future__ import annotations

import calendar
import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from runners.app.jobs import cancel_job, list_jobs, new_job_spec, read_job, start_job
from runners.errors import ConfigError
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.models import JobRunStatus, RunEntry
from runners.store.result_store import RunWriter, list_runs, load_run, rename_run
from runners.views.charts import cdf_points
from runners.views.compare import capacities, capacity_at, comparison_table, percent_change, sweep_frame
from runners.views.live import job_eta_s, job_run_rows, read_live
from tests.job_waiting import wait_for_job_folder as wait
from tests.job_waiting import wait_for_streamed_rows


def summary(run_id: str, **fields) -> RunEntry:
    """A run's summary as the result store lists it, with only ``fields`` recorded."""
    return RunEntry.model_validate({"run_id": run_id, **fields})


def test_comparison_table_shows_short_replies_and_resends_only_for_real_engine_runs():
    sim_a, sim_b = summary("a", slo_attainment=0.8), summary("b", slo_attainment=0.9)
    assert "replies shorter than asked" not in set(comparison_table([sim_a, sim_b], baseline="a")["metric"])
    real = summary("r", slo_attainment=0.9, output_length_mismatches=2, resent_requests=1, server_requests=7)
    table = comparison_table([sim_a, real], baseline="a").set_index("metric")
    assert table.loc["replies shorter than asked", "r"] == 2
    assert table.loc["requests sent again", "r"] == 1 and table.loc["HTTP requests sent", "r"] == 7
    assert pd.isna(table.loc["replies shorter than asked", "a"])


def test_comparison_table_percent_change_by_hand():
    base = summary(
        "a",
        slo_attainment=0.80,
        G=0.05,
        e2e_s={"mean": 10.0, "p90": 20.0},
        tpot_s={"mean": 0.040},
        slo_attainment_by_task={"chat": 0.5, "code": None},
        preemptions=0,
    )
    other = summary(
        "b",
        slo_attainment=0.60,
        G=0.075,
        e2e_s={"mean": 8.0, "p90": 30.0},
        tpot_s={"mean": 0.050},
        slo_attainment_by_task={"chat": 0.75, "code": 0.9},
        preemptions=4,
    )
    table = comparison_table([other, base], baseline="a").set_index("metric")
    assert list(table.columns) == ["a", "b", "change b", "change unit"]
    assert table.loc["SLO attainment (%)", "a"] == pytest.approx(80.0)
    # a share changes in percentage points, as the page reads it (issue 27: it was -25, a relative %)
    assert table.loc["SLO attainment (%)", "change b"] == pytest.approx(-20.0)  # 60 - 80 pts
    assert table.loc["SLO attainment (%)", "change unit"] == "pts"
    assert table.loc["G (1/s)", "change b"] == pytest.approx(50.0) and table.loc["G (1/s)", "change unit"] == "%"
    assert table.loc["E2E mean (s)", "change b"] == pytest.approx(-20.0)
    assert table.loc["E2E p90 (s)", "change b"] == pytest.approx(50.0)
    assert table.loc["TPOT mean (ms)", "b"] == pytest.approx(50.0)  # shown in ms
    assert table.loc["SLO attainment, chat (%)", "change b"] == pytest.approx(25.0)  # 75 - 50 pts
    assert pd.isna(table.loc["SLO attainment, code (%)", "change b"])  # no baseline value
    assert pd.isna(table.loc["preemptions", "change b"])  # baseline 0: undefined
    with pytest.raises(ValueError, match="baseline 'z'"):
        comparison_table([base], baseline="z")
    assert percent_change(3.0, -2.0) == pytest.approx(250.0)


def test_capacity_interpolates_between_swept_rates():
    # attainment 1.0 at 1 req/s, 0.95 at 2, 0.85 at 3: the 0.9 target is crossed halfway 2 -> 3
    assert capacity_at([3, 1, 2], [0.85, 1.0, 0.95], 0.9) == pytest.approx(2.5)
    assert capacity_at([1, 2], [0.95, 0.92], 0.9) == 2  # never missed: the highest rate (a lower bound)
    assert capacity_at([1, 2], [0.8, 0.7], 0.9) is None  # missed already at the lowest rate
    assert capacity_at([1, 2, 3], [0.95, 0.5, 0.95], 0.9) == pytest.approx(1 + 0.05 / 0.45)  # first crossing counts
    frame = sweep_frame(
        [
            summary("f1", scheduler="fcfs", arrival_rate_rps=1.0, slo_attainment=1.0, G=0.1, sweep_id="s"),
            summary("f2", scheduler="fcfs", arrival_rate_rps=2.0, slo_attainment=0.5, G=0.05, sweep_id="s"),
            summary("d1", scheduler="dyn", arrival_rate_rps=1.0, slo_attainment=1.0, G=0.1, sweep_id="s"),
            summary("d2", scheduler="dyn", arrival_rate_rps=2.0, slo_attainment=0.95, G=0.08, sweep_id="s"),
        ]
    )
    table = capacities(frame, 0.9).set_index("scheduler")
    assert table.loc["fcfs", "capacity_rps"] == pytest.approx(1.2)  # 1 + (1.0 - 0.9) / (1.0 - 0.5)
    assert not table.loc["fcfs", "at_least"]
    assert table.loc["dyn", "capacity_rps"] == 2 and table.loc["dyn", "at_least"]


def test_cdf_points_thin_large_runs_and_keep_extremes():
    values = np.arange(10_000, dtype=float)
    x, y = cdf_points(values, max_points=100)
    assert len(x) <= 100 and x[0] == 0 and x[-1] == 9_999 and y[-1] == 1.0
    x, y = cdf_points([3.0, 1.0, np.nan, 2.0])
    assert list(x) == [1.0, 2.0, 3.0] and list(y) == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_job_runs_schedulers_in_order_on_the_same_workload(results_dir):
    configs = [
        parse_config({"workload": {"requests": 30, "seed": 5}, "scheduler": {"name": name}})
        for name in ("fcfs", "static")
    ]
    spec = new_job_spec(configs, label="pair")
    folder = start_job(spec, results_dir)
    job = wait(folder)
    assert job.state == "done" and [r.status for r in job.runs] == ["done", "done"]
    first, second = (load_run(results_dir, run_id) for run_id in job.run_ids)
    assert first.summary.scheduler == "fcfs" and second.summary.scheduler == "static"
    # same requests, same arrival times
    pd.testing.assert_series_equal(
        first.requests.sort_values("request_id")["arrival_s"].reset_index(drop=True),
        second.requests.sort_values("request_id")["arrival_s"].reset_index(drop=True),
    )
    assert list_jobs(results_dir)[0].job_id == spec.job_id


def test_cancel_stops_the_run_keeps_its_rows_and_skips_the_rest(results_dir):
    slow = {"kind": "sim", "pace": 1.0}  # real time: 300 requests at 2/s take minutes
    configs = [
        parse_config(
            {"engine": slow, "workload": {"requests": 300, "arrival": {"rate": 2.0}}, "scheduler": {"name": name}}
        )
        for name in ("fcfs", "static")
    ]
    folder = start_job(new_job_spec(configs), results_dir)
    run_id = configs and read_job(folder).spec.runs[0].run_id
    snapshot = wait_for_streamed_rows(results_dir / run_id)
    assert snapshot.status == "running" and snapshot.eta_s is not None and snapshot.eta_s > 0
    started = time.monotonic()
    cancel_job(folder)
    job = wait(folder, 30)
    assert time.monotonic() - started < 10, "cancel took too long"
    assert job.state == "cancelled"
    assert [r.status for r in job.runs] == ["cancelled", "skipped"]
    data = load_run(results_dir, run_id)
    assert data.summary.status == "cancelled"
    finished = data.requests[data.requests["error"].isna()]
    assert len(finished) >= 3, "rows measured before the cancel must be kept"
    assert len(data.requests) == 300  # the rest are recorded as cancelled, not dropped
    assert not (results_dir / job.spec.runs[1].run_id).exists()


def test_a_worker_that_dies_is_reported_lost(results_dir):
    configs = [parse_config({"engine": {"kind": "sim", "pace": 1.0}, "workload": {"requests": 300}})]
    folder = start_job(new_job_spec(configs), results_dir)
    deadline = time.monotonic() + 30
    while (read_job(folder).pid is None or read_job(folder).state == "starting") and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(read_job(folder).pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while read_job(folder).state != "lost" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert read_job(folder).state == "lost"


def test_live_reader_sees_parts_before_the_merge_and_computes_eta(results_dir):
    writer = live_run(results_dir, "live", "sim", flush_each=True)  # each request its own part file
    started = STARTED
    snapshot = read_live(results_dir / "live", now=started + 30.0)
    assert (snapshot.done, snapshot.total, snapshot.status) == (2, 4, "running")
    assert snapshot.elapsed_s == pytest.approx(30.0)
    assert snapshot.eta_s == pytest.approx(30.0)  # 2 of 4 done in 30 s
    assert snapshot.metrics["slo_attainment"] == 0.5
    assert snapshot.metrics["G"] == pytest.approx(1 / 4.0)  # 1 met / (2 + 2) s
    assert snapshot.tokens_per_s == pytest.approx(50.0)
    writer.close("done", {"requests_total": 4})
    after = read_live(results_dir / "live")
    assert after.done == 2 and after.status == "done" and after.eta_s is None


#: The live runs' start, Unix seconds (2026-11-21T10:00:00Z).
STARTED = calendar.timegm(time.strptime("2026-11-21T10:00:00Z", "%Y-%m-%dT%H:%M:%SZ"))


def live_run(results_dir: Path, run_id: str, engine: str, flush_each: bool = False) -> RunWriter:
    """A run folder as a run writes it: 2 of 4 requests finished (at 2 s and 3 s on the run's clock),
    one telemetry sample at 1 s of 40 + 10 output tok/s over two instances (``flush_each``: each
    request flushed to a part file of its own, as before the run's merge)."""
    writer = RunWriter(
        results_dir,
        run_id,
        {"config": {"workload": {"requests": 4}}},
        {"engine": engine, "started_at": "2026-11-21T10:00:00Z"},
    )
    writer.write_summary({"status": "running", "requests_total": 4})
    base = {
        "task": "chat",
        "dispatch_s": 0.0,
        "input_tokens": 10,
        "output_tokens": 5,
        "target_output_tokens": 5,
        "queue_s": 0.0,
        "instance": 0,
        "slices": 1,
        "error": None,
        "preemptions": 0,
        "itl_max_s": 0.1,
    }
    for index in range(2):
        writer.add_request(
            {
                **base,
                "request_id": f"r{index}",
                "arrival_s": float(index),
                "first_token_s": index + 1.0,
                "finish_s": index + 2.0,
                "ttft_s": 1.0,
                "tpot_s": 0.25,
                "e2e_s": 2.0,
                "slo_met": index == 0,
            }
        )
        if flush_each:
            writer.flush()
    for instance, rate in ((0, 40.0), (1, 10.0)):
        writer.add_sample(
            {
                "t_s": 1.0,
                "instance": instance,
                "kv_usage": 0.5,
                "running": 2,
                "waiting": 0,
                "preemptions": 0,
                "tokens_per_s": rate,
                "gateway_pending": 0,
                "in_flight": 2,
                "gpu_memory_used_bytes": None,
            }
        )
    writer.flush()
    return writer


def test_live_view_labels_instantaneous_and_mean_throughput_and_its_clock(results_dir):
    """Issue 15 defect 4: an ended run shows the summary's output throughput as the run's mean, not
    the last telemetry sample; while running, the sample is labelled "now". The elapsed time is on
    the charts' clock: simulated seconds on the simulator (the last finished request, 3 s here, not
    the 30 wall seconds), wall seconds on a real engine."""
    started = STARTED
    writer = live_run(results_dir, "sim-run", "sim")
    running = read_live(results_dir / "sim-run", now=started + 30.0)
    assert running.throughput_card()[:2] == ("output tok/s, now", "50.0")  # 40 + 10, the sample
    assert "instantaneous" in running.throughput_card()[2]
    assert running.clock_card() == ("elapsed, simulated (s)", "3.0")
    writer.close("done", {"requests_total": 4, "output_throughput_tps": 901.74})
    ended = read_live(results_dir / "sim-run", now=started + 40.0)
    assert ended.throughput_card()[:2] == ("output tok/s, run mean", "901.7")
    assert ended.tokens_per_s == pytest.approx(50.0)  # the sample is still there, and not what is shown

    live_run(results_dir, "real-run", "vllm")
    real = read_live(results_dir / "real-run", now=started + 30.0)
    assert real.clock_card() == ("elapsed (s)", "30")


def test_job_eta_counts_every_run_of_the_job():
    # 2 runs ended and half of the third in 60 s: 2.5 of 10 runs, 7.5 left at 24 s each = 180 s
    assert job_eta_s(60.0, 2, 10, 0.5) == pytest.approx(180.0)
    assert job_eta_s(60.0, 0, 10, 0.0) is None  # no progress yet: no rate
    assert job_eta_s(60.0, 10, 10, 0.0) is None  # every run ended
    assert job_eta_s(None, 2, 10, 0.5) is None


def test_the_runs_of_a_job_are_listed_with_the_results_of_those_that_ended(results_dir):
    configs = [
        parse_config({"run_id": run_id, "scheduler": {"name": name}, "workload": {"seed": 3}})
        for run_id, name in (("ended", "fcfs"), ("going", "static"), ("waiting", "fcfs"))
    ]
    ended = live_run(results_dir, "ended", "sim")
    ended.close(
        "done",
        {
            "requests_total": 4,
            "slo_attainment": 0.75,
            "G": 0.125,
            "tpot_s": {"mean": 0.0423},
            "e2e_s": {"mean": 12.5},
            "output_throughput_tps": 901.74,
        },
    )
    live_run(results_dir, "going", "sim")
    going = read_live(results_dir / "going")
    statuses = {"ended": JobRunStatus(status="done"), "going": JobRunStatus(status="running")}
    rows = job_run_rows(results_dir, configs, statuses, going)
    assert [(row["run"], row["status"], row["scheduler"], row["seed"]) for row in rows] == [
        ("ended", "done", "fcfs", 3),
        ("going", "running", "static", 3),
        ("waiting", "queued", "fcfs", 3),
    ]
    assert {
        key: rows[0][key]
        for key in ("SLO attainment (%)", "G (1/s)", "TPOT mean (ms)", "E2E mean (s)", "output throughput (tok/s)")
    } == {
        "SLO attainment (%)": "75.0",
        "G (1/s)": "0.125",
        "TPOT mean (ms)": "42.3",
        "E2E mean (s)": "12.500",
        "output throughput (tok/s)": "901.7",
    }
    # the running run: its results so far (1 of 2 finished requests met its SLO; TPOT 250 ms)
    assert (rows[1]["SLO attainment (%)"], rows[1]["TPOT mean (ms)"]) == ("50.0", "250.0")
    assert rows[2]["SLO attainment (%)"] == ""


def test_live_reader_returns_server_log_tails(results_dir):
    folder = results_dir / "with-log"
    RunWriter(results_dir, "with-log", {}, {})
    (folder / "server-0.log").write_text("\n".join(f"line {i}" for i in range(5000)))
    snapshot = read_live(folder)
    tail = snapshot.logs["server-0.log"]
    assert tail.endswith("line 4999") and "line 10\n" not in tail and len(tail) <= 6000


def test_paced_simulation_measures_the_same_and_takes_wall_time(results_dir):
    workload = {"requests": 12, "seed": 3, "arrival": {"process": "poisson", "rate": 4.0}}
    fast = execute_run(parse_config({"run_id": "fast", "workload": workload}), results_dir)
    started = time.perf_counter()
    paced = execute_run(
        parse_config({"run_id": "paced", "workload": workload, "engine": {"kind": "sim", "pace": 4.0}}), results_dir
    )
    wall = time.perf_counter() - started
    simulated = fast.summary.duration_s
    assert paced.summary.duration_s == simulated  # the same simulated clock, only paced
    assert wall >= simulated / 4.0 * 0.9
    a, b = load_run(results_dir, "fast").requests, load_run(results_dir, "paced").requests
    pd.testing.assert_frame_equal(
        a.sort_values("request_id").reset_index(drop=True), b.sort_values("request_id").reset_index(drop=True)
    )


def test_rename_moves_the_folder_and_rewrites_the_ids(results_dir):
    execute_run(parse_config({"run_id": "old", "workload": {"requests": 5}}), results_dir)
    execute_run(parse_config({"run_id": "taken", "workload": {"requests": 5}}), results_dir)
    with pytest.raises(ConfigError, match="already exists"):
        rename_run(results_dir, "old", "taken")
    with pytest.raises(ConfigError, match="not allowed"):
        rename_run(results_dir, "old", "../escape")
    rename_run(results_dir, "old", "new-name")
    data = load_run(results_dir, "new-name")
    assert data.summary.run_id == "new-name" and data.config["config"]["run_id"] == "new-name"
    assert len(data.requests) == 5
    assert {s.run_id for s in list_runs(results_dir)} == {"new-name", "taken"}


def test_html_export_is_standalone_and_png_export_renders(results_dir):
    from runners.views.charts import COMPARISON_CHARTS, ExportUnavailable, chart_png, charts_html, comparison_chart

    execute_run(parse_config({"run_id": "one", "workload": {"requests": 20}}), results_dir)
    run = load_run(results_dir, "one")
    figures = {name: comparison_chart(name, [run.summary], [run]) for name in COMPARISON_CHARTS}
    html = charts_html(figures, "export test")
    assert html.count("<script") >= len(figures) and "plotly" in html.lower()
    assert all(f'id="chart-{name}"' in html for name in figures)
    try:
        png = chart_png(figures["g"], width=500, height=300)
    except ExportUnavailable as exc:
        if os.environ.get("SCHEDLAB_REQUIRE_BROWSER") == "1":
            raise
        pytest.skip(str(exc))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    json.dumps(run.summary.model_dump(exclude_unset=True))  # summaries stay JSON (plain Python values)


def test_launch_form_builds_a_sweep_and_names_a_bad_upload(results_dir):
    from runners.app.launch_form import build_job, save_upload

    result = build_job(
        {
            "engine.kind": "sim",
            "workload.requests": 20,
            "sweep.enabled": True,
            "sweep.rates": "4, 1 2",
            "sweep.target": 0.8,
        },
        ["fcfs", "scls"],
    )
    assert result.ok, result.errors
    runs = result.spec.runs
    assert [(run.scheduler.name, run.workload.arrival.rate) for run in runs] == [
        ("fcfs", 1.0),
        ("scls", 1.0),
        ("fcfs", 2.0),
        ("scls", 2.0),
        ("fcfs", 4.0),
        ("scls", 4.0),
    ]
    assert len({run.sweep_id for run in runs}) == 1 and runs[0].sweep_id.startswith("sweep-")
    assert len({run.run_id for run in runs}) == 6
    assert result.spec.sweep.target_attainment == 0.8
    errors = build_job(
        {"sweep.enabled": True, "sweep.rates": "1", "workload.arrival.process": "all-at-once"}, ["fcfs"]
    ).errors
    assert "rate-driven" in errors["workload.arrival.process"]

    uploaded = save_upload("my code set.jsonl", b'{"instruction": "x"}\n{broken\n', results_dir)
    assert uploaded.parent == results_dir / ".uploads" and uploaded.name.endswith("my_code_set.jsonl")
    errors = build_job(
        {"workload.requests": 10, "workload.code.kind": "file", "workload.code.path": str(uploaded)}, ["fcfs"]
    ).errors
    assert list(errors) == ["workload.code.path"]
    assert str(uploaded) in errors["workload.code.path"] and "line 2" in errors["workload.code.path"]


def test_cancel_while_a_launched_server_starts_stops_it_at_once(results_dir, tmp_path):
    import sys

    marker = tmp_path / "server-pid"
    never_healthy = [
        sys.executable,
        "-c",
        f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); time.sleep(600)",
    ]
    config = parse_config(
        {
            "engine": {
                "kind": "lmdeploy",
                "model": str(tmp_path),
                "command": never_healthy,
                "use_gpus": False,
                "startup_timeout_s": 600,
            },
            "workload": {"requests": 3},
        }
    )
    folder = start_job(new_job_spec([config]), results_dir)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the server was never started"
    started = time.monotonic()
    cancel_job(folder)
    job = wait(folder, 30)
    assert time.monotonic() - started < 15
    assert job.state == "cancelled" and job.runs[0].status == "cancelled"
    pid = int(marker.read_text())
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_utc_stamps_parse_the_same_under_daylight_saving_time(monkeypatch):
    """Issue 16: _parse_utc used mktime - timezone and was an hour off under DST (Europe/Berlin, July)."""
    import datetime
    import time as time_module

    from runners.timestamps import parse_utc_stamp as _parse_utc

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time_module.tzset()
    try:
        for stamp in ("2026-07-01T12:00:00Z", "2026-01-15T08:30:05Z"):
            expected = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
            assert _parse_utc(stamp) == expected
        assert _parse_utc("yesterday") is None and _parse_utc(None) is None
    finally:
        monkeypatch.delenv("TZ")
        time_module.tzset()
