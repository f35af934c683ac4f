"""The job worker: ``python -m runners worker <job folder> --results <root>``.

Runs the job's configs one after the other with :func:`runners.benchmark.execute_run`,
reporting to ``status.json`` after each change. A ``cancel`` flag file or SIGTERM stops the
current run (it keeps its rows, status ``cancelled``) and skips the rest. One failed run does
not stop the job: the next scheduler still runs, so a comparison keeps what it can.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from runners.benchmark import execute_run
from runners.errors import SchedlabError, format_validation_error
from runners.jobs import JOBS_FOLDER, JobSpec, cancel_requested, write_status

LIVE_FLUSH_S = 0.5  # rows reach disk at least this often, for the live view (seconds)


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
        raise SchedlabError(f"{folder}: not a job folder (no job.json; jobs live in "
                            f"<results>/{JOBS_FOLDER}/<job_id>)") from None
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
    runs: list[dict[str, Any]] = [{"run_id": run.run_id, "status": "queued"} for run in spec.runs]
    terminated = {"flag": False}

    def on_term(signum, frame):  # noqa: ARG001 - signal handler signature
        terminated["flag"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    last_check = {"t": 0.0, "stop": False}

    def should_stop() -> bool:
        now = time.monotonic()
        if now - last_check["t"] >= 0.2:  # a stat() at most five times a second
            last_check["t"] = now
            last_check["stop"] = terminated["flag"] or cancel_requested(folder)
        return last_check["stop"]

    def report(state: str, current: int | None, error: str | None = None) -> None:
        write_status(folder, {"state": state, "pid": os.getpid(), "current": current, "runs": runs, "error": error})

    state = "done"
    for index, config in enumerate(spec.runs):
        if terminated["flag"] or cancel_requested(folder):
            runs[index]["status"] = "skipped"
            state = "cancelled"
            continue
        runs[index]["status"] = "running"
        report("running", index)
        try:
            outcome = execute_run(config, results_root, should_stop=should_stop, flush_seconds=LIVE_FLUSH_S)
            runs[index].update(status=outcome.status, error=outcome.error)
            if outcome.status == "cancelled":
                state = "cancelled"
        except Exception as exc:  # input errors raise before the run folder exists
            runs[index].update(status="failed", error=f"{type(exc).__name__}: {exc}")
            traceback.print_exc()
    if state != "cancelled" and any(run["status"] == "failed" for run in runs):
        state = "failed" if all(run["status"] == "failed" for run in runs) else "done"
    report(state, None, next((run.get("error") for run in runs if run.get("error")), None))
    return state
