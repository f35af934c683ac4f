"""Waiting for a dashboard job (runners.jobs) to end, for the tests that start one."""

from __future__ import annotations

import time
from pathlib import Path

from runners.jobs import JobStatus, read_job


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
