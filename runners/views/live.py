"""Reading a run folder while its run goes: the rows flushed so far, progress, ETA and running
metrics, and the launched servers' log tails; and a study's progress from its study.json. Used by
the dashboard's live view. Numbers are shown with the metric catalog's labels and units
(:mod:`runners.metrics.catalog`: TPOT in ms, shares in percent).

Clocks: the live charts' x axes are the run's own clock (simulated seconds on the simulator, wall
seconds since the start on a real engine); :meth:`LiveSnapshot.clock_card` shows the elapsed time
on that clock, labelled "simulated" on the simulator. ETAs are wall-clock seconds (how long to
wait): one run's from its rows so far, a whole job's (every run of a study or sweep) from
:func:`job_eta_s`.

Part files are immutable once they appear (they are renamed into place whole), so each one is
read once and kept in a small cache keyed by (path, size, mtime); a refresh reads only new parts.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from runners.errors import SchedlabError
from runners.json_values import is_stored
from runners.metrics.catalog import metric, summary_value, timeseries_metric
from runners.metrics.outcomes import outcome_counts
from runners.metrics.run_metrics import summarize_requests
from runners.store.models import JobRunStatus, RunEntry, StudyRecord, StudyRun
from runners.store.result_store import (
    DAMAGED,
    INCOMPLETE,
    REQUEST_COLUMNS,
    TIMESERIES_COLUMNS,
    empty_frame,
    inspect_run,
    read_table,
)
from runners.timestamps import parse_utc_stamp

_PART_CACHE: "OrderedDict[tuple[str, int, int], pa.Table]" = OrderedDict()
_PART_CACHE_LIMIT = 8192


def _cached_table(path: Path) -> pa.Table:
    """``pq.read_table`` for immutable files, kept by (path, size, mtime)."""
    stat = path.stat()  # FileNotFoundError when the run merged it away: read_table tries again
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    table = _PART_CACHE.get(key)
    if table is None:
        table = pq.read_table(path)
        _PART_CACHE[key] = table
        if len(_PART_CACHE) > _PART_CACHE_LIMIT:
            _PART_CACHE.popitem(last=False)
    else:
        _PART_CACHE.move_to_end(key)
    return table


def log_tails(folder: Path, max_bytes: int = 6000) -> dict[str, str]:
    """The end of each ``server-N.log`` in the run folder (launched engines only)."""
    tails = {}
    for path in sorted(folder.glob("server-*.log")):
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            text = handle.read().decode("utf-8", errors="replace")
        tails[path.name] = text if size <= max_bytes else text.split("\n", 1)[-1]
    return tails


@dataclass
class LiveSnapshot:
    """One look at a run folder. Times in seconds; ``tokens_per_s`` is output tokens per second
    over the latest telemetry sample, summed over instances; ``header``: the run's summary as the
    result store lists it (only ``status`` and ``error`` for a damaged run); ``metrics``: the
    run metrics over the rows so far (runners.metrics.run_metrics.summarize_requests)."""

    run_id: str
    folder: Path
    status: str
    error: str | None
    header: RunEntry
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    total: int
    done: int
    elapsed_s: float | None
    eta_s: float | None
    metrics: dict[str, Any]
    tokens_per_s: float | None
    logs: dict[str, str] = field(default_factory=dict)
    #: the in-engine scheduler's state at the latest sample, summed over instances (time-series
    #: column -> requests); empty for a run without one
    engine: dict[str, int] = field(default_factory=dict)
    #: the latest time on the run's own clock (the charts' x axes), seconds: the last telemetry
    #: sample or finished request; simulated seconds on the simulator; None before either
    run_clock_s: float | None = None
    #: requests in flight when the run was cancelled, and requests never sent (the run ended first)
    cancelled: int = 0
    not_run: int = 0

    @property
    def fraction(self) -> float:
        """The share of the planned requests that ran to an end of their own (0-1)."""
        return min(1.0, self.done / self.total) if self.total else 0.0

    def progress_text(self, note: str = "") -> str:
        """``143 / 200 requests (cancelled: 41 cancelled, 16 never sent)``: requests that ran to
        an end of their own of those planned, the status, what did not run, then ``note`` (e.g.
        the time left) inside the brackets."""
        left = [
            f"{count:,} {what}"
            for count, what in ((self.cancelled, "cancelled"), (self.not_run, "never sent"))
            if count
        ]
        said = f": {', '.join(left)}" if left else ""
        return f"{self.done:,} / {self.total:,} requests ({self.status}{said}{note})"

    @property
    def simulated(self) -> bool:
        """True for a run on the simulator: its clock is simulated time, not wall time."""
        return self.header.engine == "sim"

    def clock_card(self) -> tuple[str, str]:
        """(label, value) of the elapsed time on the charts' clock: simulated seconds on the
        simulator (labelled so), wall seconds since the start otherwise."""
        unit = metric("duration_s").unit
        if self.simulated:
            return f"elapsed, simulated ({unit})", "-" if self.run_clock_s is None else f"{self.run_clock_s:,.1f}"
        return f"elapsed ({unit})", "-" if self.elapsed_s is None else f"{self.elapsed_s:,.0f}"

    def throughput_card(self) -> tuple[str, str, str]:
        """(label, value, help) of the output token rate: while the run goes, the latest telemetry
        sample (instantaneous, summed over instances); once it ended, the summary's
        ``output_throughput_tps`` (output tokens over the run's duration, the figure the Results
        page and the CLI show), labelled as the run's mean."""
        entry = metric("output_throughput_tps")
        if self.status == "running":
            return (
                qualified(entry.label, "now"),
                entry.format(self.tokens_per_s),
                "instantaneous: output tokens per second over the latest telemetry sample, all instances",
            )
        return (
            qualified(entry.label, "run mean"),
            entry.format(summary_value(self.header, entry.key)),
            "the run's mean: output tokens of its completed requests over its duration (summary.json), as on "
            "the Results page",
        )

    def cards(self) -> list[tuple[str, str]]:
        """(label, value) of :data:`LIVE_METRIC_KEYS` over the rows so far, from the catalog."""
        return live_cards(self.metrics)

    def engine_cards(self) -> list[tuple[str, str]]:
        """(catalog label, value) of the in-engine scheduler's running limit and held-back
        requests at the latest sample; [] for a run without an in-engine scheduler."""
        return [
            (timeseries_metric(column).label, timeseries_metric(column).format(value))
            for column, value in self.engine.items()
        ]


#: The running metrics the live view shows (run-metric keys of the catalog).
LIVE_METRIC_KEYS: tuple[str, ...] = ("slo_attainment", "G", "tpot_s.mean", "e2e_s.mean", "failed")


def live_cards(metrics: dict[str, Any], keys: tuple[str, ...] = LIVE_METRIC_KEYS) -> list[tuple[str, str]]:
    """(catalog label with its unit, value in display units) for each key; ``-`` when not yet
    measured. ``metrics``: fields of ``summary.json`` (stored units: seconds, fractions, 1/s)."""
    cards = []
    for key in keys:
        entry = metric(key)
        cards.append((entry.label, entry.format(summary_value(metrics, key))))
    return cards


def qualified(label: str, qualifier: str) -> str:
    """A catalog label with a qualifier before its unit: ("output throughput (tok/s)", "now") ->
    "output throughput, now (tok/s)"."""
    name, bracket, unit = label.rpartition(" (")
    return f"{name}, {qualifier} ({unit}" if bracket and label.endswith(")") else f"{label}, {qualifier}"


def job_eta_s(elapsed_s: float | None, finished: int, total: int, current: float = 0.0) -> float | None:
    """Wall-clock seconds left for a whole job of ``total`` runs, ``finished`` of them ended and
    ``current`` (0-1) of the running one done, after ``elapsed_s`` wall seconds: the rate so far
    applied to what is left (the runs of a study or sweep are alike in size). None before any
    progress, or when every run ended."""
    done = finished + min(max(current, 0.0), 1.0)
    if elapsed_s is None or done <= 0 or finished >= total:
        return None
    return max(0.0, elapsed_s * (total - done) / done)


def read_live(folder: str | Path, now: float | None = None) -> LiveSnapshot | None:
    """A snapshot of the run in ``folder``; None while the folder has no summary yet. A damaged
    run gives a snapshot with status ``damaged`` and the reason as its error; a run whose writer
    is gone, ``interrupted``."""
    path = Path(folder)
    summary = inspect_run(path)
    if summary.status == INCOMPLETE:
        return None
    problem = summary.problem
    try:
        requests = read_table(path, "requests", REQUEST_COLUMNS, _cached_table)
        timeseries = read_table(path, "timeseries", TIMESERIES_COLUMNS, _cached_table)
    except SchedlabError as exc:
        problem = problem or str(exc)
        requests, timeseries = empty_frame(REQUEST_COLUMNS), empty_frame(TIMESERIES_COLUMNS)
    if problem is not None:
        summary = RunEntry(status=DAMAGED, error=problem)
    config_total = None
    try:
        config = json.loads((path / "config.json").read_bytes().decode("utf-8"))
        config_total = config.get("config", {}).get("workload", {}).get("requests")
    except (OSError, ValueError, RecursionError, AttributeError):
        pass
    if not isinstance(config_total, int) or isinstance(config_total, bool):
        config_total = None
    total = int(summary.requests_total or config_total or len(requests))
    outcomes = outcome_counts(requests)
    done = outcomes["completed"] + outcomes["failed"]  # cancelled and never-sent rows did not run to an end
    status = str(summary.status) if is_stored(summary, "status") else "running"
    started = summary.started_at_unix_s or parse_utc_stamp(summary.started_at)
    finished = parse_utc_stamp(summary.finished_at)
    current = now if now is not None else time.time()
    elapsed = None
    if started is not None:  # the finish stamp has whole seconds: never below 0
        elapsed = max(0.0, (finished if finished is not None and status != "running" else current) - started)
    eta = None
    if status == "running" and elapsed is not None and done:
        eta = elapsed * (total - done) / done
    metrics = summarize_requests(requests) if done else {}
    tokens_per_s = None
    engine: dict[str, int] = {}
    if len(timeseries):
        latest = timeseries[timeseries["t_s"] == timeseries["t_s"].max()]
        tokens_per_s = float(latest["tokens_per_s"].fillna(0).sum())
        engine = latest_engine_state(latest)
    clocks = [
        float(frame[column].max())
        for frame, column in ((timeseries, "t_s"), (requests, "finish_s"))
        if len(frame) and frame[column].notna().any()
    ]
    return LiveSnapshot(
        run_id=path.name,
        folder=path,
        status=status,
        error=summary.error,
        header=summary,
        requests=requests,
        timeseries=timeseries,
        total=total,
        done=done,
        elapsed_s=elapsed,
        eta_s=eta,
        metrics=metrics,
        tokens_per_s=tokens_per_s,
        logs=log_tails(path),
        engine=engine,
        run_clock_s=max(clocks) if clocks else None,
        cancelled=outcomes["cancelled"],
        not_run=outcomes["not_run"],
    )


#: The in-engine scheduler's time-series columns the live view shows as numbers.
LIVE_ENGINE_COLUMNS: tuple[str, ...] = ("engine_limit", "engine_held_back")


def latest_engine_state(latest: pd.DataFrame) -> dict[str, int]:
    """Each of :data:`LIVE_ENGINE_COLUMNS` summed over the instances of one sample (``latest``:
    its rows), for the columns with a value there; {} when none has one."""
    state = {}
    for column in LIVE_ENGINE_COLUMNS:
        if column in latest.columns and latest[column].notna().any():
            state[column] = int(latest[column].sum())
    return state


@dataclass
class StudyProgress:
    """How far a study has come, from its study.json: ``total`` runs planned, ``finished`` (ended
    done, failed, cancelled or skipped), ``counts`` per status, ``status`` of the study, and its
    ``record`` (study.json)."""

    study_id: str
    status: str
    total: int
    finished: int
    counts: dict[str, int]
    record: StudyRecord

    def fraction(self, current: float = 0.0) -> float:
        """Share of the study done, counting ``current`` (0-1) of the run in progress."""
        return min(1.0, (self.finished + current) / self.total) if self.total else 0.0

    def text(self) -> str:
        parts = ", ".join(f"{count} {status}" for status, count in sorted(self.counts.items()) if status != "pending")
        return f"study {self.study_id}: {self.finished} of {self.total} runs finished" + (
            f" ({parts})" if parts else ""
        )


def read_study_progress(results_root: str | Path, study_id: str) -> StudyProgress | None:
    """The progress of study ``study_id`` in ``results_root``; None before its study.json exists
    or when it cannot be read."""
    from runners.study.runner import read_study

    folder = Path(results_root) / study_id
    try:
        record = read_study(folder)
    except (SchedlabError, OSError):
        return None
    counts: dict[str, int] = {}
    for run in record.runs:
        status = str(run.status)
        counts[status] = counts.get(status, 0) + 1
    total = len(record.runs)
    return StudyProgress(
        str(record.study_id), str(record.status), total, total - counts.get("pending", 0), counts, record
    )


#: The results shown for each run in the live view's table of a job's runs (run-metric keys).
RUN_TABLE_KEYS: tuple[str, ...] = ("slo_attainment", "G", "tpot_s.mean", "e2e_s.mean", "output_throughput_tps")
_SUMMARY_CACHE: dict[str, tuple[tuple[int, int], RunEntry]] = {}


def _finished_summary(folder: Path) -> RunEntry | None:
    """summary.json of a run that ended (kept while its size and mtime stay); None otherwise."""
    try:
        stat = (folder / "summary.json").stat()
    except OSError:
        return None
    stamp = (stat.st_size, stat.st_mtime_ns)
    cached = _SUMMARY_CACHE.get(str(folder))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    record = inspect_run(folder)
    if record.status in ("running", INCOMPLETE):
        return None
    _SUMMARY_CACHE[str(folder)] = (stamp, record)
    return record


def _reported(entry: JobRunStatus | StudyRun | None) -> tuple[str, str | None]:
    """(status, error) of a run as its job's status.json or its study.json reports it: ``queued``
    (and no error) when there is no entry or it holds no status."""
    if entry is None:
        return "queued", None
    return (str(entry.status) if is_stored(entry, "status") else "queued"), entry.error


def job_run_rows(
    results_root: str | Path,
    runs: list[Any],
    statuses: Mapping[str, JobRunStatus | StudyRun],
    live: LiveSnapshot | None = None,
) -> list[dict[str, Any]]:
    """One row per run of a job (``runs``: its RunConfigs in order): scheduler, seed, rate, status
    (``statuses``: run id -> the job's or study's entry; ``queued`` when absent) and, for a run that
    ended, its results from its summary.json (:data:`RUN_TABLE_KEYS`, catalog labels and display
    units); the running run (``live``) shows its results so far. The run id is the last column."""
    root = Path(results_root)
    rows = []
    for run in runs:
        status, error = _reported(statuses.get(run.run_id))
        summary: RunEntry | dict[str, Any] | None = None
        if live is not None and live.run_id == run.run_id and live.status == "running":
            status, summary = "running", live.metrics
        elif status not in ("queued", "pending", "running", "skipped"):
            summary = _finished_summary(root / run.run_id)
        row: dict[str, Any] = {
            "scheduler": run.scheduler.name,
            "seed": run.workload.seed,
            f"rate ({metric('request_throughput_rps').unit})": run.workload.arrival.rate,
            "status": status,
        }
        for key in RUN_TABLE_KEYS:
            entry = metric(key)
            row[entry.label] = entry.format(summary_value(summary, key)) if summary else ""
        row["error"] = error
        row["run"] = run.run_id
        rows.append(row)
    return rows
