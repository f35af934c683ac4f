"""Issue 27 defect 7: the live view streams at every pace, and its statuses follow the workers.

At the Launch page's default pace (100x) a run of the default form lasts about a second of wall
time; its rows and telemetry samples reach the run folder at least every 0.5 s
(runners.run.benchmark.LIVE_FLUSH_S, the default of every run, a study's members too), so the
live view reads them while it runs. A 2-worker study's table of runs never shows more than 2
running: a run is running only while its folder says so (runners.views.live.job_run_states)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from runners import registry
from runners.app.jobs import new_job_spec, read_job, start_job
from runners.app.launch_form import DEFAULT_SCHEDULERS, build_job, default_form_values
from runners.run.benchmark import LIVE_FLUSH_S, execute_run
from runners.run.config import parse_config
from runners.schedulers.fcfs import FCFSPolicy
from runners.store import result_store
from runners.store.models import JobRunStatus, StudyRun
from runners.store.result_store import RunWriter
from runners.views.live import job_run_rows, job_run_states, read_live, read_study_progress

#: The Launch page's default run: 200 requests at 2.5 req/s on 16 slots (~125 simulated seconds).
DEFAULT_RUN = {
    "engine": {"kind": "sim", "max_num_seqs": 16},
    "workload": {"requests": 200, "arrival": {"process": "poisson", "rate": 2.5}},
}


def config(pace: float | None, scheduler: str = "fcfs", requests: int = 200, run_id: str = "live"):
    data = {
        "engine": {**DEFAULT_RUN["engine"], "pace": pace},
        "workload": {**DEFAULT_RUN["workload"], "requests": requests},
        "scheduler": {"name": scheduler},
        "run_id": run_id,
    }
    return parse_config(data)


def test_a_run_at_the_default_pace_shows_its_rows_and_samples_while_it_runs(results_dir):
    """The default form's run at 100x, read from another thread while it goes: some look sees
    0 < done < 200 with telemetry samples (before: the first flush came 2 s in, after the run's
    end, and every look read 0 / 200)."""
    looks = []
    run = threading.Thread(target=execute_run, args=(config(100.0), results_dir))  # the default flush
    run.start()
    while run.is_alive():
        snapshot = read_live(results_dir / "live")
        if snapshot is not None:
            looks.append((snapshot.status, snapshot.done, snapshot.total, len(snapshot.timeseries)))
        time.sleep(0.05)
    run.join()
    mid_run = [look for look in looks if look[0] == "running" and 0 < look[1] < look[2]]
    assert mid_run, f"no look saw rows while the run went: {looks}"
    assert all(total == 200 and samples > 0 for _, _, total, samples in mid_run)
    assert read_live(results_dir / "live").done == 200


class SlowDecisions(FCFSPolicy):
    """fcfs whose every decision takes 2 ms of wall time (a planning scheduler's cost)."""

    name = "slow-decisions"

    def decide(self, now):
        time.sleep(0.002)
        return super().decide(now)


@pytest.mark.parametrize(
    ("pace", "scheduler", "requests"),
    [
        (None, "slow-decisions", 300),  # as fast as possible, with slow decisions
        (100.0, "fcfs", 200),
        (10.0, "fcfs", 200),
        (1.0, "fcfs", 200),
    ],
)
def test_rows_reach_the_folder_at_least_every_half_second_at_every_pace(
    results_dir, monkeypatch, pace, scheduler, requests
):
    """Every flush of the run's writer is logged; between two of them (and from the run's first
    event to the first) at most LIVE_FLUSH_S plus a look (0.05 s) and some slack passes, at any
    pace; the slow runs are cancelled after 2.5 s."""
    monkeypatch.setitem(registry.SCHEDULERS, "slow-decisions", SlowDecisions)
    flushes: list[float] = []
    real_flush = RunWriter.flush

    def logged(self, summary_fields=None):
        flushes.append(time.monotonic())
        return real_flush(self, summary_fields)

    monkeypatch.setattr(result_store.RunWriter, "flush", logged)
    created = {}
    real_init = RunWriter.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        created["at"] = time.monotonic()

    monkeypatch.setattr(result_store.RunWriter, "__init__", init)
    started = time.monotonic()
    outcome = execute_run(
        config(pace, scheduler, requests), results_dir, should_stop=lambda: time.monotonic() - started > 2.5
    )
    ended = time.monotonic()
    assert outcome.status in ("done", "cancelled")
    assert len(flushes) >= 2, flushes
    marks = [created["at"], *flushes]
    gaps = [later - earlier for earlier, later in zip(marks, marks[1:])]
    assert max(gaps) <= LIVE_FLUSH_S + 0.3, [round(gap, 2) for gap in gaps]
    assert ended - flushes[-1] <= LIVE_FLUSH_S + 0.3


def test_a_two_worker_study_never_shows_more_than_two_runs_running(results_dir):
    """The default form's study (fcfs and slo-sa at 5 seeds, 100x) on a pool of 2 workers: every
    look at its table (as the Jobs panel makes it, every 50 ms) shows at most 2 runs running, a
    run running at some look shows a folder, and by the end every run was seen running."""
    spec = build_job(default_form_values(), list(DEFAULT_SCHEDULERS)).spec
    assert len(spec.runs) == 10
    folder = start_job(spec, results_dir)
    seen_running: set[str] = set()
    most = 0
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        job = read_job(folder)
        progress = read_study_progress(results_dir, spec.study.study_id)
        reported: dict[str, JobRunStatus | StudyRun] = {str(entry.run_id): entry for entry in job.runs}
        if progress is not None:
            assert progress.record.execution is None or progress.record.execution.workers in (None, 1, 2)
            reported.update({str(e.run_id): e for e in progress.record.runs if e.status != "pending"})
        live = read_live(results_dir / job.current_run_id) if job.current_run_id else None
        rows = job_run_rows(results_dir, job.spec.runs, reported, live)
        running = [row["run"] for row in rows if row["status"] == "running"]
        most = max(most, len(running))
        assert len(running) <= 2, rows
        assert all((results_dir / run_id).is_dir() for run_id in running)
        seen_running.update(running)
        if not job.active:
            break
        time.sleep(0.05)
    assert read_job(folder).state == "done"
    assert most == 2 and len(seen_running) >= 8, (most, seen_running)


def test_a_stale_running_report_never_outlives_its_run(results_dir):
    """status.json says three runs are running (one ended since: status.json and study.json are
    rewritten at most every half second); the folders say otherwise, and win: the ended run shows
    done, the one without a folder queued, and a run the worker is preparing 'starting'."""
    configs = [parse_config({"run_id": run_id, "workload": {"requests": 4}}) for run_id in ("a", "b", "c", "d")]
    execute_run(configs[0], results_dir)  # ended
    RunWriter(results_dir, "b", {}, {"engine": "sim"})  # running
    reported = {run_id: JobRunStatus(run_id=run_id, status="running") for run_id in ("a", "b", "c")}
    states = job_run_states(results_dir, configs, reported)
    assert {run_id: state.status for run_id, state in states.items()} == {
        "a": "done",
        "b": "running",
        "c": "starting",
        "d": "queued",
    }
    rows = job_run_rows(results_dir, configs, reported)
    assert [row["status"] for row in rows] == ["done", "running", "starting", "queued"]
    assert rows[0]["SLO attainment (%)"] != ""  # the ended run's results


def test_a_single_run_job_streams_through_the_worker(results_dir):
    """A job's run (the worker's default flush) at 100x shows rows before its end."""
    spec = new_job_spec([config(100.0, requests=300, run_id=None)])
    folder = start_job(spec, results_dir)
    run_folder = Path(results_dir) / spec.runs[0].run_id
    looks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and read_job(folder).active:
        snapshot = read_live(run_folder)
        if snapshot is not None:
            looks.append((snapshot.status, snapshot.done))
        time.sleep(0.05)
    assert any(status == "running" and 0 < done < 300 for status, done in looks), looks
