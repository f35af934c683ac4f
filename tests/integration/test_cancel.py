"""Issue 27 defect 8: a cancel stops dispatching at once and is told in neutral colour.

The simulator's driver asks ``should_stop`` before every batch of dispatches and at least every
0.05 s of wall time, sleeps of a paced run included: nothing is dispatched after a cancel, only
requests already in flight may finish before the run stops (they end as cancelled otherwise),
and the run's folder is closed well within a second. The live view tells a cancelled run with
st.info (runners.views.live.LiveSnapshot.notice), never st.error: a cancel is no error."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from runners import registry
from runners.app.jobs import cancel_job, new_job_spec, read_job, start_job
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from runners.views.live import read_live
from tests.integration.test_live_pace import SlowDecisions
from tests.job_waiting import wait_for_job_folder, wait_for_streamed_rows

ROOT = Path(__file__).resolve().parents[2]


def config(pace: float | None, scheduler: str = "fcfs", requests: int = 200, run_id: str = "cut"):
    return parse_config(
        {
            "engine": {"kind": "sim", "max_num_seqs": 16, "pace": pace},
            "workload": {"requests": requests, "arrival": {"process": "poisson", "rate": 2.5}},
            "scheduler": {"name": scheduler},
            "run_id": run_id,
        }
    )


def cancel_after(done_at: int):
    """(progress, should_stop, state): the run is cancelled as its ``done_at``-th request ends;
    ``state`` keeps the count then and the wall time of the cancel (time.monotonic())."""
    flag = threading.Event()
    state: dict[str, float] = {}

    def progress(done: int, total: int) -> None:
        if done >= done_at and not flag.is_set():
            state.update(done=done, at=time.monotonic())
            flag.set()

    return progress, flag.is_set, state


def check_stopped_at_once(requests: pd.DataFrame, done_at_cancel: int) -> float:
    """Nothing dispatched after the cancel (the simulated time of the request whose end set it),
    and no more than the requests in flight then finished after it; returns that time."""
    ended = requests[requests["error"].isna()].sort_values("finish_s")
    cancel_s = float(ended["finish_s"].iloc[done_at_cancel - 1])
    dispatched = requests["dispatch_s"].dropna()
    assert (dispatched <= cancel_s + 1e-9).all(), dispatched[dispatched > cancel_s].head()
    in_flight = requests[(requests["dispatch_s"] <= cancel_s) & ~(requests["finish_s"] <= cancel_s)]
    finished_after = int((ended["finish_s"] > cancel_s).sum())
    assert len(ended) - done_at_cancel == finished_after <= len(in_flight)
    return cancel_s


@pytest.mark.parametrize(("pace", "scheduler"), [(10.0, "fcfs"), (None, "slow-decisions")])
def test_a_cancel_stops_dispatching_at_once_and_ends_the_run_within_a_second(results_dir, monkeypatch, pace, scheduler):
    """Cancelled as its 40th request ends (a paced run; and as fast as possible with decisions that
    take 2 ms each, where the driver looked only every 256 events before): the run keeps 200 rows,
    completed = 40 plus only requests that were in flight, the rest in flight end as cancelled
    and those never sent as not run; the run ends < 1 s after the cancel."""
    monkeypatch.setitem(registry.SCHEDULERS, "slow-decisions", SlowDecisions)
    progress, should_stop, state = cancel_after(40)
    outcome = execute_run(config(pace, scheduler), results_dir, progress=progress, should_stop=should_stop)
    ended = time.monotonic()
    assert outcome.status == "cancelled"
    assert ended - state["at"] < 1.0, f"the run went on {ended - state['at']:.2f} s after the cancel"
    data = load_run(results_dir, "cut")
    assert len(data.requests) == 200  # every request has its row
    check_stopped_at_once(data.requests, int(state["done"]))
    summary = outcome.summary
    assert summary.completed <= state["done"] + 16  # at most the engine's 16 slots finished after
    assert summary.completed + summary.failed + summary.cancelled + summary.not_run == 200
    assert summary.not_run > 0


def test_a_cancel_during_a_slow_pace_ends_the_run_within_a_second(results_dir):
    """At the slowest pace, 0.001x (a simulated second every 17 minutes), the driver sleeps
    between events (the first prefill step alone is tens of wall seconds); it sleeps in slices and
    looks at the cancel flag after each (before: one sleep to the next event)."""
    flag = threading.Event()
    cancelled_at: dict[str, float] = {}

    def cancel_once_running() -> None:
        while not (results_dir / "slow" / "summary.json").exists():
            time.sleep(0.02)
        time.sleep(0.6)
        cancelled_at["at"] = time.monotonic()
        flag.set()

    helper = threading.Thread(target=cancel_once_running)
    helper.start()
    outcome = execute_run(config(0.001, run_id="slow"), results_dir, should_stop=flag.is_set)
    ended = time.monotonic()
    helper.join()
    assert outcome.status == "cancelled"
    assert ended - cancelled_at["at"] < 1.0, f"the run went on {ended - cancelled_at['at']:.2f} s after the cancel"


def test_cancelling_a_job_ends_its_run_at_once_with_what_the_live_view_showed(results_dir):
    """Through the worker (the Cancel button's path): once the live view shows rows, the cancel
    flag ends the run within a second, and its completed count is at most what was in flight more
    than the live view's count (rows reach the folder every 0.5 s: a 10x run gains ~3 a flush)."""
    spec = new_job_spec([config(10.0, run_id=None)])
    folder = start_job(spec, results_dir)
    run_folder = results_dir / spec.runs[0].run_id
    shown = wait_for_streamed_rows(run_folder, rows=20)
    started = time.monotonic()
    cancel_job(folder)
    while read_live(run_folder).status == "running" and time.monotonic() - started < 10:
        time.sleep(0.02)
    assert time.monotonic() - started < 1.0
    job = wait_for_job_folder(folder, 30)
    assert job.state == "cancelled" and [run.status for run in job.runs] == ["cancelled"]
    summary = load_run(results_dir, spec.runs[0].run_id).summary
    assert shown.done <= summary.completed <= shown.done + 16


def test_the_live_view_tells_a_cancelled_run_in_neutral_colour(results_dir, monkeypatch):
    """The Launch page's live view of a cancelled job: st.info saying what was kept, no st.error
    (before: 'Run cancelled: cancelled by the user' in red); a failed run still shows st.error."""
    progress, should_stop, _ = cancel_after(30)
    execute_run(config(None), results_dir, progress=progress, should_stop=should_stop)
    snapshot = read_live(results_dir / "cut")
    kind, text = snapshot.notice()
    assert kind == "info"
    assert text.startswith(f"Run cancelled (cancelled by the user): {snapshot.done} of 200 requests ran to an end")
    assert f"{snapshot.not_run} never sent" in text

    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    spec = new_job_spec([config(10.0, run_id=None)])
    folder = start_job(spec, results_dir)
    wait_for_streamed_rows(results_dir / spec.runs[0].run_id, rows=5)
    cancel_job(folder)
    assert wait_for_job_folder(folder, 30).state == "cancelled"
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    app.switch_page("pages/1_Launch.py").run()
    assert not app.exception, app.exception
    assert not [error.value for error in app.error if "cancel" in error.value.lower()]
    infos = [info.value for info in app.info]
    assert any(value.startswith("Run cancelled (cancelled by the user): ") for value in infos), infos
    assert read_job(folder).runs[0].error == "cancelled by the user"


def test_a_cancel_on_a_real_engine_dispatches_nothing_more(server_factory, results_dir):
    """The wall-clock driver (an OpenAI-compatible fake server, 10 ms a token, 50 arrivals a
    second): cancelled as the 3rd request ends, it dispatches nothing after (it asks before every
    dispatch, not only every 0.1 s), the requests in flight end as cancelled, and the run ends
    within a second."""
    server = server_factory(behaviour="ok", token_delay_s=0.01)
    data = {
        "run_id": "real-cut",
        "engine": {"kind": "openai", "urls": server.url, "warmup_concurrency": [], "request_timeout_s": 60},
        "workload": {
            "requests": 60,
            "arrival": {"process": "poisson", "rate": 50},
            "filters": {"max_total_tokens": 300, "min_output_tokens": 8},
        },
        "sample_interval_s": 0.05,
    }
    progress, should_stop, state = cancel_after(3)
    outcome = execute_run(parse_config(data), results_dir, progress=progress, should_stop=should_stop)
    assert outcome.status == "cancelled"
    assert time.monotonic() - state["at"] < 1.0
    requests = load_run(results_dir, "real-cut").requests
    ended = requests[requests["error"].isna()].sort_values("finish_s")
    cancel_s = float(ended["finish_s"].iloc[2])  # the 3rd request's last token: the cancel follows at once
    late = requests[requests["dispatch_s"] > cancel_s + 0.01]
    assert late.empty, late[["request_id", "dispatch_s"]]
    assert outcome.summary.not_run > 0 and outcome.summary.cancelled > 0
