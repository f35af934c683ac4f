"""The job worker: ``python -m runners worker <job folder> --results <root>``.

Runs the job's configs one after the other with :func:`runners.run.benchmark.execute_run`,
reporting to ``status.json`` after each change. A ``cancel`` flag file or SIGTERM stops the
current run (it keeps its rows, status ``cancelled``) and skips the rest. One failed run does
not stop the job: the next scheduler still runs, so a comparison keeps what it can.

A job with a ``study`` runs its members through :func:`runners.study.runner.run_study`, exactly as the
CLI does (``results/<study_id>/study.json`` with the statistics), with the same cancel and
failure rules; the members' statuses come from study.json.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runners.app.jobs import JOBS_FOLDER, JobSpec, cancel_requested, read_json_or_none, write_status
from runners.errors import SchedlabError, format_validation_error
from runners.run.benchmark import execute_run
from runners.store.models import JobRunStatus, StudyRecord
from runners.store.result_store import INCOMPLETE, inspect_run

#: Seconds between two looks at the cancel flag file (a stat): a cancel reaches the run within this.
CANCEL_POLL_S = 0.05


def read_job_spec(folder: Path, given: str | None = None) -> JobSpec:
    """The job in ``folder``; SchedlabError, one line, when it is not a readable job folder.
    ``given``: the spec with its secrets (from the dashboard, on stdin); it must be the job that
    ``job.json`` (secrets written as ***) describes."""
    path = folder / "job.json"
    try:
        if not folder.is_dir():
            raise SchedlabError(f"{folder}: not a job folder (expected {JOBS_FOLDER}/<job_id> in the results folder)")
        text = path.read_bytes().decode("utf-8")
        spec = JobSpec.model_validate_json(text)
        if given is None:
            return spec
        path = Path("<stdin>")
        real = JobSpec.model_validate_json(given)
        if real.job_id != spec.job_id:
            raise SchedlabError(f"<stdin>: the job spec is for {real.job_id!r}, not {spec.job_id!r} ({folder})")
        return real
    except FileNotFoundError:
        raise SchedlabError(
            f"{folder}: not a job folder (no job.json; jobs live in <results>/{JOBS_FOLDER}/<job_id>)"
        ) from None
    except UnicodeDecodeError as exc:
        raise SchedlabError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    except ValidationError as exc:
        raise SchedlabError(f"{path}: not a valid job ({format_validation_error(exc)})") from None
    except (OSError, RecursionError) as exc:
        raise SchedlabError(f"{path}: unreadable ({getattr(exc, 'strerror', None) or exc})") from None


def run_job(folder: str | Path, results_root: str | Path, given_spec: str | None = None) -> str:
    """Execute the job in ``folder``; returns its final state. A folder that is not a job raises
    SchedlabError before anything is written. ``given_spec``: see :func:`read_job_spec`."""
    folder = Path(folder)
    spec = read_job_spec(folder, given_spec)
    runs = [JobRunStatus(run_id=run.run_id, status="queued") for run in spec.runs]
    terminated = {"flag": False}

    def on_term(signum: int, frame: Any) -> None:
        terminated["flag"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    checked, stop = 0.0, False

    def should_stop() -> bool:
        nonlocal checked, stop
        now = time.monotonic()
        if now - checked >= CANCEL_POLL_S:  # a stat() at most twenty times a second
            checked = now
            stop = terminated["flag"] or cancel_requested(folder)
        return stop

    def report(state: str, current: int | None, error: str | None = None) -> None:
        write_status(folder, {"state": state, "pid": os.getpid(), "current": current, "runs": runs, "error": error})

    if spec.study is not None:
        return _run_study_job(spec, runs, results_root, should_stop, report)
    from runners.study.runner import environment_failure, environment_skip_reason

    state = "done"
    stopped_by: tuple[str, str] | None = None  # (run id, error) of a run that failed for a reason of this machine
    for index, config in enumerate(spec.runs):
        if terminated["flag"] or cancel_requested(folder):
            runs[index].status = "skipped"
            state = "cancelled"
            continue
        if stopped_by is not None:  # every later run would meet it too: skip, saying why
            _set_status(runs[index], "skipped", environment_skip_reason(*stopped_by))
            continue
        runs[index].status = "running"
        report("running", index)
        try:
            outcome = execute_run(config, results_root, should_stop=should_stop)  # rows flushed for the live view
            _set_status(runs[index], outcome.status, outcome.error)
            if outcome.status == "cancelled":
                state = "cancelled"
        except Exception as exc:  # input errors raise before the run folder exists
            _set_status(runs[index], "failed", f"{type(exc).__name__}: {exc}")
            traceback.print_exc()
        error = environment_failure((runs[index].status or "", None, runs[index].error))
        if error is not None:
            stopped_by = (str(runs[index].run_id), error)
    state = _final_state(runs, state == "cancelled")
    report(state, None, _first_error(runs))
    return state


def _set_status(run: JobRunStatus, status: str | None, error: str | None) -> None:
    """Record how ``run`` ended: its status and its error (None: none; written either way)."""
    run.status = status
    run.error = error


def _first_error(runs: list[JobRunStatus]) -> str | None:
    """The first run's error, the job's error line (None when no run has one)."""
    return next((run.error for run in runs if run.error), None)


def _final_state(runs: list[JobRunStatus], cancelled: bool) -> str:
    """``cancelled`` when stopped; ``failed`` when every run that ran failed (the others skipped
    after a failure of this machine); else ``done`` (a failed run among others keeps what the
    others measured)."""
    if cancelled:
        return "cancelled"
    ran = [run for run in runs if run.status != "skipped"]
    if ran and all(run.status == "failed" for run in ran):
        return "failed"
    return "done"


def _run_study_job(
    spec: JobSpec,
    runs: list[JobRunStatus],
    results_root: str | Path,
    should_stop: Callable[[], bool],
    report: Callable[..., None],
) -> str:
    """Run the job's study with :func:`runners.study.runner.run_study` and report each member's status
    (read from study.json as each member starts, and from the final record)."""
    from runners.study.runner import STUDY_FILE, StudyMember, StudyPlan, run_study

    study = spec.study
    assert study is not None
    index = {run.run_id: number for number, run in enumerate(spec.runs)}
    plan = StudyPlan(
        study.study_id,
        study.baseline,
        list(study.schedulers),
        list(study.seeds),
        [
            StudyMember(str(run.run_id), run.scheduler.name, run.workload.seed, run.workload.arrival.rate, run)
            for run in spec.runs
        ],
        list(study.rates),
    )
    record_path = Path(results_root) / study.study_id / STUDY_FILE
    current = {"index": 0, "reported": 0.0}

    def sync(record: StudyRecord | None) -> None:
        for entry in record.runs if record is not None else []:
            number = index.get(entry.run_id)
            if number is not None and entry.status not in ("pending", "running"):
                _set_status(runs[number], entry.status, entry.error)
        for run in runs:  # study.json is rewritten at most once a second: a run's folder says it ended first
            if run.status == "running" and run.run_id is not None:
                ended = inspect_run(Path(results_root) / run.run_id)
                if ended.status not in ("running", INCOMPLETE):
                    _set_status(run, ended.status, ended.error or ended.problem)

    def progress(done: int, total: int, member: StudyMember) -> None:
        """Several members may run at once (a process pool): each is marked running as its first
        progress arrives; finished ones are read from study.json, at most twice a second."""
        number = index[member.run_id]
        started = runs[number].status == "queued"
        if started:
            runs[number].status = "running"
            current["index"] = number
        now = time.monotonic()
        if started or now - current["reported"] >= 0.5:
            current["reported"] = now
            sync(_study_so_far(record_path))
            report("running", current["index"])

    report("running", 0)
    try:
        result = run_study(plan, results_root, progress=progress, should_stop=should_stop)
    except Exception as exc:
        error = str(exc) if isinstance(exc, SchedlabError) else f"{type(exc).__name__}: {exc}"
        for run in runs:
            if run.status in ("queued", "running"):
                _set_status(run, "failed", error)
        traceback.print_exc()
        report("failed", None, error)
        return "failed"
    sync(result.record)
    state = _final_state(runs, result.record.status == "cancelled")
    if state == "done" and result.record.status == "failed":  # stopped at a member that failed for this machine
        state = "failed"
    report(state, None, _first_error(runs))
    return state


def _study_so_far(path: Path) -> StudyRecord | None:
    """The study.json its study is writing (at most once a second), as its record; None while
    there is none, or when it cannot be read (the next report reads it again)."""
    data = read_json_or_none(path)
    try:
        return None if data is None else StudyRecord.model_validate(data)
    except ValidationError:
        return None
