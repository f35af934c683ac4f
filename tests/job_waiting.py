"""Waiting for a dashboard job (runners.app.jobs) to stream rows or to end, for the tests that start one."""

from __future__ import annotations

import time
from pathlib import Path

from runners.app.jobs import JobStatus, read_job
from runners.views.live import LiveSnapshot, read_live


def wait_for_job_folder(folder: Path, timeout_s: float = 120.0) -> JobStatus:
    """The job in ``folder`` once it is no longer active; AssertionError after ``timeout_s``
    seconds, naming its state."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        job = read_job(folder)
        if job is not None and not job.active:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job in {folder} still {read_job(folder)}")


def wait_for_streamed_rows(run_folder: Path, rows: int = 3, timeout_s: float = 60.0) -> LiveSnapshot:
    """The live view of the run in ``run_folder`` once ``rows`` requests have finished;
    AssertionError after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        snapshot = read_live(run_folder)
        if snapshot is not None and snapshot.done >= rows:
            return snapshot
        time.sleep(0.3)
    raise AssertionError(f"no {rows} rows streamed within {timeout_s:g} s")
