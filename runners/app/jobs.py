"""Background jobs: one or more runs, or one study, executed in a separate worker process.

The dashboard starts a job and returns at once; the worker (``python -m runners worker JOB``)
writes every run into ``results/<run_id>/`` as it goes, so closing or reloading the browser
changes nothing and any page can re-attach by reading the job folder. Layout::

    results/.jobs/<job_id>/job.json     the spec: label, kind, run configs (run ids fixed up front),
                                        secrets written as *** (the worker reads the real spec on stdin);
                                        a study's job adds ``study`` (its id, baseline, schedulers,
                                        seeds, rates), and the study writes results/<study_id>/study.json
    results/.jobs/<job_id>/status.json  state, worker pid, per-run status; rewritten atomically
    results/.jobs/<job_id>/cancel       present = the user asked to stop
    results/.jobs/<job_id>/worker.log   the worker's own stdout/stderr

The worker is started with an argument list (never a shell) in its own session, so it outlives
the Streamlit server's request handling; cancel is a flag file the run's ``should_stop`` polls,
then the run's servers are stopped and its partial rows kept (see ``runners.run.benchmark``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from runners.engines.real_config import REDACT_SECRETS
from runners.errors import SchedlabError
from runners.run.config import RunConfig
from runners.store.models import JOB_STATUS_SCHEMA_VERSION, JobRunStatus, JobStatusRecord
from runners.store.result_store import (
    DEFAULT_RESULTS_DIR,
    process_alive,
    read_json_object,
    write_json_atomic,
    write_record,
)
from runners.store.run_ids import RUN_ID_PATTERN, new_run_id
from runners.timestamps import id_stamp, utc_stamp

JOBS_FOLDER = ".jobs"
FINAL_STATES = ("done", "failed", "cancelled", "lost")


class SweepSpec(BaseModel):
    """A rate sweep: every scheduler at every rate, one workload and seed."""

    model_config = ConfigDict(defer_build=True)  # built when first validated (issue 42)

    rates_rps: list[float] = Field(min_length=1, description="arrival rates to sweep, requests per second")
    target_attainment: float = Field(default=0.9, gt=0, le=1, description="SLO attainment that defines capacity")


class StudySpec(BaseModel):
    """A job that is one study (:mod:`runners.study.runner`): its ``runs`` are the study's members in
    plan order (every scheduler at every seed, and rate for a sweep), each with its own scheduler
    parameters; the worker runs them with :func:`runners.study.runner.run_study`, which writes
    ``results/<study_id>/study.json``. Rates in req/s, empty when the study has one rate."""

    model_config = ConfigDict(defer_build=True)  # built when first validated (issue 42)

    study_id: str
    baseline: str
    schedulers: list[str] = Field(min_length=1)

    @field_validator("study_id")
    @classmethod
    def _study_id_is_an_id(cls, value: str) -> str:
        """A study id names a folder directly inside the results folder: never a path (``../x``,
        ``/abs``, ``..``) or a hidden name (``.jobs``)."""
        if not RUN_ID_PATTERN.match(value):
            raise ValueError(
                "expected 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit (a folder name, "
                "never a path)"
            )
        return value

    seeds: list[int] = Field(min_length=1)
    rates: list[float] = Field(default_factory=list)


class JobSpec(BaseModel):
    """What a job runs. ``runs`` are full run configs (validated), executed in order; with
    ``study`` they are the members of that study (a job spec without it, as older versions wrote,
    runs them one after the other as independent runs). Its validator, holding every run config's,
    is built when it first validates, not when a page imports this module (issue 42)."""

    model_config = ConfigDict(defer_build=True)

    job_id: str
    label: str = ""
    created_at: str = ""
    runs: list[RunConfig] = Field(min_length=1)
    sweep: SweepSpec | None = None
    study: StudySpec | None = None
    baseline: str | None = None  # single runs: the scheduler they are compared with (a study has its own)


@dataclass
class JobStatus:
    """The worker's last report, plus whether its process still lives. ``runs``: each run's
    status as status.json lists it (entries that are not a run's status left out);
    ``updated_at``: when the worker wrote it, Unix seconds (0.0 when unknown)."""

    job_id: str
    folder: Path
    spec: JobSpec
    state: str
    pid: int | None
    current: int | None
    runs: list[JobRunStatus]
    error: str | None
    updated_at: float

    @property
    def active(self) -> bool:
        return self.state not in FINAL_STATES

    @property
    def run_ids(self) -> list[str]:
        return [run.run_id for run in self.spec.runs if run.run_id]

    @property
    def current_run_id(self) -> str | None:
        if self.current is None or not 0 <= self.current < len(self.spec.runs):
            return None
        return self.spec.runs[self.current].run_id


def jobs_root(results_root: str | Path = DEFAULT_RESULTS_DIR) -> Path:
    return Path(results_root) / JOBS_FOLDER


def new_job_spec(
    configs: list[RunConfig],
    label: str = "",
    sweep: SweepSpec | None = None,
    study: StudySpec | None = None,
    baseline: str | None = None,
) -> JobSpec:
    """A job for ``configs``, giving each run without a ``run_id`` a fresh one now, so pages can
    follow them before they start. ``study``: the configs are that study's members; ``baseline``:
    for single runs, the scheduler they are compared with."""
    stamp = id_stamp()
    job_id = f"job-{stamp}-{os.urandom(2).hex()}"
    runs = []
    for index, config in enumerate(configs):
        run_id = config.run_id or f"{new_run_id(config.scheduler.name, config.engine.kind)}-{index:02d}"
        runs.append(config.model_copy(update={"run_id": run_id}))
    return JobSpec(
        job_id=job_id,
        label=label,
        created_at=utc_stamp(),
        runs=runs,
        sweep=sweep,
        study=study,
        baseline=baseline,
    )


def start_job(spec: JobSpec, results_root: str | Path = DEFAULT_RESULTS_DIR) -> Path:
    """Write the job folder and start its worker process; returns the folder."""
    root = Path(results_root)
    folder = jobs_root(root) / spec.job_id
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise SchedlabError(f"{folder}: cannot create the job folder ({exc.strerror or exc})") from None
    # job.json is read by the pages: secrets (secret-looking engine.env values, --api-key ...) written as ***;
    # the worker gets the spec with the real values on its stdin, never through a file
    write_json_atomic(folder / "job.json", spec.model_dump(mode="json", context=REDACT_SECRETS))
    write_status(
        folder,
        {
            "state": "starting",
            "pid": None,
            "current": None,
            "runs": [{"run_id": run.run_id, "status": "queued"} for run in spec.runs],
        },
    )
    log = (folder / "worker.log").open("ab")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "runners", "worker", str(folder), "--results", str(root), "--spec-stdin"],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE,
        start_new_session=True,
        cwd=str(Path(__file__).resolve().parents[2]),
        env=env,
    )
    log.close()
    try:
        process.stdin.write(spec.model_dump_json().encode("utf-8"))  # type: ignore[union-attr]
        process.stdin.close()  # type: ignore[union-attr]
    except BrokenPipeError:  # the worker died at once: its log says why, the job shows as lost
        pass
    status = _read_status_record(folder)
    if status is not None and status.state == "starting":
        write_status(folder, {**status.model_dump(exclude_unset=True), "pid": process.pid})
    return folder


def _read_status_record(folder: Path) -> JobStatusRecord | None:
    """The job's status.json as its record; None when it is missing, unreadable or not one."""
    data = read_json_or_none(folder / "status.json")
    try:
        return None if data is None else JobStatusRecord.model_validate(data)
    except ValidationError:
        return None


def write_status(folder: Path, fields: dict[str, Any]) -> None:
    """status.json through :class:`JobStatusRecord` (schema version, state, pid, current run,
    each run's status, error, ``updated_at`` Unix seconds)."""
    data = {**fields, "schema_version": JOB_STATUS_SCHEMA_VERSION, "updated_at": time.time()}
    write_record(folder / "status.json", JobStatusRecord, data, durable=False)


def read_json_or_none(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not an object (a job's
    files are read while its worker may be writing them; the reader is result_store's, without
    its size limit for run files: a job of many runs may be larger)."""
    try:
        return read_json_object(path, max_bytes=None)
    except (SchedlabError, OSError):
        return None


def read_job(folder: str | Path) -> JobStatus | None:
    """The job in ``folder``; None when it is not a readable job folder. A job whose worker died
    without a final report is reported as ``lost`` (its runs keep the rows they flushed)."""
    path = Path(folder)
    spec_data = read_json_or_none(path / "job.json")
    if spec_data is None:
        return None
    try:
        spec = JobSpec.model_validate(spec_data)
    except (ValueError, SchedlabError):  # not a job this version can read: not listed
        return None
    status = read_json_or_none(path / "status.json") or {}
    state = str(status.get("state", "starting"))
    pid = status.get("pid") if isinstance(status.get("pid"), int) else None
    updated = status.get("updated_at")
    updated = float(updated) if isinstance(updated, (int, float)) and not isinstance(updated, bool) else 0.0
    if state not in FINAL_STATES and not process_alive(pid) and (pid or time.time() - updated > 30):
        state = "lost"
    current = status.get("current") if isinstance(status.get("current"), int) else None
    runs = _run_statuses(status.get("runs"))
    error = status.get("error")
    return JobStatus(spec.job_id, path, spec, state, pid, current, runs, None if error is None else str(error), updated)


def _run_statuses(listed: Any) -> list[JobRunStatus]:
    """The runs' statuses of a status.json as read (any JSON value): each entry that is a run's
    status, typed; entries that are not (a malformed or foreign entry) are left out."""
    if not isinstance(listed, list):
        return []
    runs = []
    for entry in listed:
        try:
            runs.append(JobRunStatus.model_validate(entry))
        except ValidationError:
            continue
    return runs


def list_jobs(results_root: str | Path = DEFAULT_RESULTS_DIR) -> list[JobStatus]:
    """Every job, newest first."""
    base = jobs_root(results_root)
    if not base.is_dir():
        return []
    jobs = [job for folder in base.iterdir() if folder.is_dir() and (job := read_job(folder)) is not None]
    return sorted(jobs, key=lambda job: job.spec.created_at, reverse=True)


def cancel_job(folder: str | Path) -> None:
    """Ask the worker to stop: it ends the current run (keeping its rows) and skips the rest."""
    (Path(folder) / "cancel").touch()


def cancel_requested(folder: str | Path) -> bool:
    return (Path(folder) / "cancel").exists()
