"""Requests a run never sent are "not run", those in flight at a cancel are "cancelled": neither
counts as failed nor in SLO attainment (issue 15, defect 5). Hand-computed on a recorder driven
by hand, and checked on cancelled and failed simulator runs against counts taken from the rows."""

from __future__ import annotations

import pytest

from runners.metrics.outcomes import outcome_counts, outcome_of, ran_text
from runners.metrics.run_metrics import summarize_requests
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.recording import RunRecorder
from runners.store.result_store import load_run
from runners.views.charts import display_names
from runners.views.compare import comparison_table, partial_runs_note, run_display_names
from runners.views.live import read_live
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO

SLO = TaskSLO(e2e_s=5.0)


def _request(request_id: str, arrival_s: float, task: str = "chat") -> Request:
    return Request(request_id, task, "x", input_tokens=10, target_output_tokens=4, arrival_s=arrival_s, slo=SLO)


def _cancelled_recorder() -> tuple[RunRecorder, list[tuple[int, int]]]:
    """Six requests, the run cancelled at t = 10 s:
    a: sent 0, tokens 1, 2, 3, 4 -> completed, E2E 4 s, meets 5 s;
    b: sent 1, tokens 2..8 -> completed, E2E 7 s, misses;
    c: sent 2, the engine answers an error at 3 -> failed;
    d: sent 5, two tokens by 10 -> in flight at the cancel: cancelled;
    e: arrived 6, held by the scheduler, never sent -> not run;
    f: arrives at 12, after the cancel -> not run."""
    requests = [
        _request("a", 0.0),
        _request("b", 1.0),
        _request("c", 2.0, "code"),
        _request("d", 5.0),
        _request("e", 6.0, "code"),
        _request("f", 12.0),
    ]
    heard: list[tuple[int, int]] = []
    recorder = RunRecorder(requests, progress=lambda ran, total: heard.append((ran, total)))
    recorder.dispatched("a", 0, 0.0)
    recorder.tokens("a", [1.0, 2.0, 3.0, 4.0], 4)
    recorder.finish("a", 4.0)
    recorder.dispatched("b", 0, 1.0)
    recorder.tokens("b", [2.0, 4.0, 6.0, 8.0], 4)
    recorder.finish("b", 8.0)
    recorder.dispatched("c", 0, 2.0)
    recorder.finish("c", 3.0, error="http 500")
    recorder.dispatched("d", 0, 5.0)
    recorder.tokens("d", [7.0, 9.0], 2)
    assert recorder.fail_unfinished("cancelled", 10.0) == 3  # what benchmark.execute_run does on a cancel
    return recorder, heard


def test_a_cancelled_run_counts_not_run_and_cancelled_apart_from_failures():
    recorder, heard = _cancelled_recorder()
    summary = recorder.summary()
    assert (summary["requests"], summary["completed"], summary["failed"], summary["cancelled"], summary["not_run"]) == (
        6,
        2,
        1,
        1,
        2,
    )
    # attainment over the requests that ran to an end of their own: a met of a, b, c
    assert summary["slo_met"] == 1
    assert summary["slo_attainment"] == pytest.approx(1 / 3)  # was 1 / 6 when all six counted
    assert summary["slo_attainment_by_task"] == {"chat": pytest.approx(1 / 2), "code": pytest.approx(0.0)}
    assert summary["e2e_s"]["mean"] == pytest.approx((4.0 + 7.0) / 2)  # completed only
    assert summary["duration_s"] == pytest.approx(8.0)  # first arrival 0 to the last completion 8
    assert summary["goodput_rps"] == pytest.approx(1 / 8.0)
    assert (recorder.failed_count, recorder.cancelled_count, recorder.not_run_count) == (1, 1, 2)
    # progress: a, b, c, then d (cancelled, it ran); e and f never ran, so it stops at 4 of 6
    assert heard == [(1, 6), (2, 6), (3, 6), (4, 6)]


def test_rows_say_why_and_outcomes_are_read_back_from_them():
    recorder, _ = _cancelled_recorder()
    rows = recorder._rows.table().to_pandas().set_index("request_id")
    assert rows.loc["d", "error"] == rows.loc["e", "error"] == rows.loc["f", "error"] == "cancelled"
    assert rows.loc["d", "dispatch_s"] == 5.0 and rows[["dispatch_s"]].loc[["e", "f"]].isna().all().all()
    assert not rows.loc[["c", "d", "e", "f"], "slo_met"].any()
    counts = outcome_counts(rows.reset_index())
    assert counts == {"completed": 2, "failed": 1, "cancelled": 1, "not_run": 2}
    assert summarize_requests(rows.reset_index())["slo_attainment"] == pytest.approx(1 / 3)


def test_outcome_of_each_kind_of_row():
    assert outcome_of(None, 0.0, 4.0) == "completed"
    assert outcome_of(None, 0.0, None) == "failed"  # ended without an error and without a finish
    assert outcome_of("http 500", 0.0, 3.0) == "failed"
    assert outcome_of("cancelled", 5.0, 10.0) == "cancelled"
    assert outcome_of("cancelled", None, 10.0) == "not_run"
    assert outcome_of("failed", None, 10.0) == "not_run"  # the run failed before sending it
    assert outcome_of("failed", 3.0, 10.0) == "failed"  # in flight when the run failed
    # a stalled scheduler never dispatched it although it could: the scheduler's failure
    assert outcome_of("never completed: static stopped dispatching", None, 10.0) == "failed"


def test_ran_text():
    assert ran_text(2000, 760, "cancelled") == "1,240 of 2,000 requests ran (760 not run: cancelled)"
    assert ran_text(2000, 0, "done") == "2,000 of 2,000 requests ran"
    assert ran_text(5, 5) == "0 of 5 requests ran (5 not run)"


def test_a_cancelled_simulator_run(results_dir):
    """fcfs on 300 Poisson requests, cancelled once 100 have finished (the driver looks every 256
    events): the counts from the rows, by hand, are the summary's, and nothing counts as failed."""
    ran: list[int] = []

    def stop() -> bool:
        return bool(ran) and ran[-1] >= 100

    config = parse_config(
        {
            "run_id": "cut",
            "workload": {"requests": 300, "arrival": {"process": "poisson", "rate": 8}},
            "scheduler": {"name": "fcfs"},
        }
    )
    outcome = execute_run(config, results_dir, progress=lambda done, total: ran.append(done), should_stop=stop)
    data = load_run(results_dir, "cut")
    rows, summary = data.requests, data.summary
    assert outcome.status == summary.status == "cancelled"
    finished = rows["error"].isna()
    sent = rows["dispatch_s"].notna()
    assert (rows.loc[~finished, "error"] == "cancelled").all()
    not_run, cancelled = int((~finished & ~sent).sum()), int((~finished & sent).sum())
    assert not_run > 0 and cancelled > 0 and 100 <= finished.sum() < 300
    assert (summary.requests, summary.completed, summary.failed, summary.cancelled, summary.not_run) == (
        300,
        int(finished.sum()),
        0,
        cancelled,
        not_run,
    )
    met = int(rows.loc[finished, "slo_met"].sum())
    assert summary.slo_met == met
    assert summary.slo_attainment == pytest.approx(met / finished.sum())  # not met / 300
    assert ran[-1] == 300 - not_run  # progress ends at the requests that ran
    assert ran_text(summary.requests, summary.not_run, summary.status) == (
        f"{300 - not_run:,} of 300 requests ran ({not_run:,} not run: cancelled)"
    )

    # issue 27 defect 1: a partial run says so wherever it appears
    done = int(finished.sum())
    reason = f"cancelled: {done:,} of 300 requests completed, {cancelled:,} cancelled, {not_run:,} never sent"
    assert summary.partial() == reason
    same = {"requests": 300, "arrival": {"process": "poisson", "rate": 8}}
    whole = execute_run(parse_config({"run_id": "whole", "workload": same}), results_dir)
    assert whole.summary.partial() is None
    pair = [load_run(results_dir, "whole"), data]
    names = run_display_names(pair)
    assert names == {"whole": "fcfs", "cut": "fcfs #2 (partial)"}  # in tables and chart legends alike
    assert display_names(pair) == names
    note = partial_runs_note([run.summary for run in pair])
    assert note is not None and note.startswith(f"1 of 2 runs are partial: cut ({reason}).")
    table = comparison_table([run.summary for run in pair], "whole").set_index("metric")
    assert (table.loc["cancelled requests", "cut"], table.loc["requests never sent", "cut"]) == (cancelled, not_run)
    assert (table.loc["cancelled requests", "whole"], table.loc["requests never sent", "whole"]) == (0, 0)
    snapshot = read_live(results_dir / "cut")
    assert snapshot is not None and (snapshot.done, snapshot.total) == (done, 300)  # not 300 / 300
    assert (
        snapshot.progress_text()
        == f"{done:,} / 300 requests (cancelled: {cancelled:,} cancelled, {not_run:,} never sent)"
    )
    assert snapshot.fraction == pytest.approx(done / 300) and snapshot.elapsed_s is not None and snapshot.elapsed_s >= 0


def test_a_run_that_hits_its_time_limit_fails_in_flight_requests_and_does_not_run_the_rest(results_dir):
    """max_duration_s cuts the run (status failed): requests in flight then are failures, those
    not yet sent are not run, and attainment is over completed + failed."""
    config = parse_config(
        {
            "run_id": "limit",
            "max_duration_s": 20.0,
            "scheduler": {"name": "fcfs"},
            "workload": {"requests": 300, "arrival": {"process": "poisson", "rate": 8}},
        }
    )
    outcome = execute_run(config, results_dir)
    data = load_run(results_dir, "limit")
    rows, summary = data.requests, data.summary
    assert outcome.status == "failed" and "max_duration_s" in summary.error
    finished = rows["error"].isna()
    sent = rows["dispatch_s"].notna()
    failed, not_run = int((~finished & sent).sum()), int((~finished & ~sent).sum())
    assert failed > 0 and not_run > 0
    assert (rows.loc[~finished & ~sent, "arrival_s"] > 0).all()
    assert (summary.completed, summary.failed, summary.cancelled, summary.not_run) == (
        int(finished.sum()),
        failed,
        0,
        not_run,
    )
    met = int(rows["slo_met"].sum())
    assert summary.slo_attainment == pytest.approx(met / (finished.sum() + failed))
