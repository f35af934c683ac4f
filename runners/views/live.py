"""Reading a run folder while its run goes: the rows flushed so far, progress, ETA and running
metrics, and the launched servers' log tails; and a study's progress from its study.json. Used by
the dashboard's live view. Numbers are shown with the metric catalog's labels and units
(:mod:`runners.metrics.catalog`: TPOT in ms, shares in percent).

Clocks: the live charts' x axes are the run's own clock (simulated seconds on the simulator, wall
seconds since the start on a real engine); :meth:`LiveSnapshot.clock_card` shows the elapsed time
on that clock, labelled "simulated" on the simulator. ETAs are wall-clock seconds (how long to
wait), :class:`Eta`: estimated from the plan (:func:`planned_wall_s`: the arrivals, the engine's
estimated capacity and the pace) until enough requests have run to an end
(:func:`measured_after`), then from the rate measured so far; one run's by :func:`run_eta`, a
whole job's (every run of a study or sweep) by :func:`job_eta`.

Statuses: the table of a job's runs says ``running`` only for a run whose folder says so (its
worker has started it and it has not ended), read once per look by :func:`job_run_states`; the
job's status.json and the study's study.json give the statuses of runs that ended or never
started.

Part files are immutable once they appear (they are renamed into place whole), so each one is
read once and kept in a small cache keyed by (path, size, mtime); a refresh reads only new parts.
"""

from __future__ import annotations

import json
import math
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
from runners.run.capacity_estimate import offered_load
from runners.run.config import RunConfig, parse_config
from runners.store.models import JobRunStatus, RunEntry, StudyRecord, StudyRun
from runners.store.result_store import (
    DAMAGED,
    INCOMPLETE,
    INTERRUPTED,
    REQUEST_COLUMNS,
    TIMESERIES_COLUMNS,
    empty_frame,
    inspect_run,
    read_table,
)
from runners.timestamps import parse_utc_stamp
from runners.workload.arrivals import RATE_PROCESSES
from runners.workload.slo import TASKS

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
    #: the ETA with its basis (measured or estimated from the plan); ``eta_s`` is its seconds
    eta: Eta | None = None

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

    def notice(self) -> tuple[str, str] | None:
        """How the run's end is told, when it has something to tell: (kind, text), kind ``info``
        for a run its user cancelled (a cancel is no error: neutral colour) and ``error`` for a
        run that failed, was interrupted or is damaged; None while it runs or when it ended
        without an error."""
        if not self.error:
            return None
        if self.status == "cancelled":
            left = [
                f"{count:,} {what}"
                for count, what in ((self.cancelled, "cancelled in flight"), (self.not_run, "never sent"))
                if count
            ]
            return "info", (
                f"Run cancelled ({self.error}): {self.done:,} of {self.total:,} requests ran to an end and are kept"
                + (f"; {', '.join(left)}" if left else "")
                + "."
            )
        return "error", f"Run {self.status}: {self.error}"

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
        short = f"output {entry.unit}"  # the card's label: whole at a third of a 1,024 px page
        if self.status == "running":
            return (
                f"{short}, now",
                entry.format(self.tokens_per_s),
                f"{entry.label}, instantaneous: output tokens per second over the latest telemetry sample, all "
                "instances",
            )
        return (
            f"{short}, run mean",
            entry.format(summary_value(self.header, entry.key)),
            f"{entry.label}, the run's mean: output tokens of its completed requests over its duration "
            "(summary.json), as on the Results page",
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


#: A run's (or a job's) ETA is measured from the rate so far once this share of its planned
#: requests has run to an end, and at least :data:`MEASURED_AFTER_REQUESTS` of them; before that it
#: is estimated from the plan (:func:`planned_wall_s`).
MEASURED_AFTER_SHARE = 0.1
MEASURED_AFTER_REQUESTS = 20


@dataclass(frozen=True)
class Eta:
    """Wall-clock seconds left, and what they come from: ``measured`` (the rate of the requests
    that ran to an end so far) or not (an estimate from the plan: arrivals, the engine's
    estimated capacity, the pace)."""

    seconds: float
    measured: bool

    @property
    def basis(self) -> str:
        return "measured" if self.measured else "estimate from the plan"

    def text(self, what: str = "") -> str:
        """``about 42 s left (estimate from the plan)`` / ``about 12 s left (measured)``;
        ``what`` goes after "left" (`` for the whole job``)."""
        return f"about {self.seconds:,.0f} s left{what} ({self.basis})"


def measured_after(total: int) -> int:
    """Requests (of ``total`` planned) that must have run to an end before an ETA is measured
    rather than estimated: :data:`MEASURED_AFTER_SHARE` of them, at least
    :data:`MEASURED_AFTER_REQUESTS`, at most ``total``. 200 requests: 20; 10,000: 1,000."""
    return min(total, max(MEASURED_AFTER_REQUESTS, math.ceil(MEASURED_AFTER_SHARE * total)))


def run_eta(elapsed_s: float | None, done: int, total: int, planned_s: float | None = None) -> Eta | None:
    """The ETA of one run, ``done`` of its ``total`` requests ended after ``elapsed_s`` wall
    seconds: measured (``elapsed_s * (total - done) / done``) once :func:`measured_after` of them
    have ended; before that from the plan (``planned_s - elapsed_s``, ``planned_s``: the run's
    planned wall seconds, :func:`planned_wall_s`), or measured when there is no plan or it has
    run out (and something has ended). None before the run's start, once every request ended,
    or with neither a plan nor a request ended."""
    if elapsed_s is None or total <= 0 or done >= total:
        return None
    if done > 0 and (done >= measured_after(total) or planned_s is None or planned_s <= elapsed_s):
        return Eta(max(0.0, elapsed_s * (total - done) / done), True)
    if planned_s is not None and planned_s > elapsed_s:
        return Eta(planned_s - elapsed_s, False)
    return None


def job_eta(
    elapsed_s: float | None,
    finished: int,
    total: int,
    current: float = 0.0,
    planned_run_s: float | None = None,
    workers: int = 1,
    requests_per_run: int | None = None,
) -> Eta | None:
    """The ETA of a whole job of ``total`` runs: ``finished`` of them ended and ``current`` runs'
    worth of the running ones done (the sum of their shares, 0-1 each), after ``elapsed_s`` wall
    seconds (since its first run started). Measured (the rate so far applied to what is left,
    ``elapsed_s * (total - done) / done`` with done = finished + current; the runs of a study or
    sweep are alike in size) once :data:`MEASURED_AFTER_SHARE` of the job, and at least
    :data:`MEASURED_AFTER_REQUESTS` requests (with ``requests_per_run``), are done; before that
    from the plan: what is left, ``total - done`` runs of ``planned_run_s`` wall seconds each, run
    ``workers`` at a time (fewer when fewer are left). None when every run ended, or with neither
    a plan nor enough done."""
    done = finished + min(max(current, 0.0), float(max(total - finished, 0)))
    if finished >= total or total <= 0:
        return None
    enough = done >= MEASURED_AFTER_SHARE * total and (
        requests_per_run is None or done * requests_per_run >= MEASURED_AFTER_REQUESTS
    )
    if enough and done > 0 and elapsed_s is not None:
        return Eta(max(0.0, elapsed_s * (total - done) / done), True)
    if planned_run_s is not None:
        at_once = max(1, min(workers, total - finished))
        return Eta((total - done) * planned_run_s / at_once, False)
    return None


def job_eta_s(elapsed_s: float | None, finished: int, total: int, current: float = 0.0) -> float | None:
    """:func:`job_eta`'s seconds without a plan: the measured ETA of a job, None before enough
    of it is done."""
    eta = job_eta(elapsed_s, finished, total, current)
    return eta.seconds if eta is not None else None


def planned_clock_s(config: RunConfig) -> float | None:
    """How long a run of ``config`` lasts on its own clock (simulated seconds on the simulator,
    wall seconds on a real engine), from its plan: the arrivals' span (``(requests - 1) / rate``
    for a rate process, 0 for all at once), then, on the simulator, the requests still in the
    engine at the end of the arrivals (the capacity estimate's fluid model,
    :mod:`runners.run.capacity_estimate`) served at its estimated capacity, and the last one's
    decode at a full batch's step time. Measured on the simulator (fcfs, 200-500 requests, 16-256
    slots, 1-2 instances): 4-15% short of the run's duration, 7% over at 256 slots. A real
    engine's capacity is not known before its server runs: the arrivals' span alone. None for
    replayed arrivals, all-at-once arrivals on a real engine, a simulator whose estimate cannot
    be made, or one reading a hub dataset (its lengths are known once it is downloaded)."""
    workload = config.workload
    arrival = workload.arrival
    requests = workload.requests
    if arrival.process in RATE_PROCESSES and arrival.rate:
        span = (requests - 1) / arrival.rate
    elif arrival.process == "all-at-once":
        span = 0.0
    else:
        return None
    if config.engine.kind != "sim":
        return span if span > 0 else None
    if any(getattr(getattr(workload, task, None), "kind", None) == "hub" for task in TASKS):
        return None  # the page never waits for a hub
    try:
        load = offered_load(config)
    except (SchedlabError, ValueError, OSError):
        return None
    estimate = load.estimate
    if estimate is None:
        return None
    occupancy = load.occupancy if load.occupancy is not None else requests / estimate.instances
    drain = occupancy * estimate.instances / estimate.capacity_rps
    return span + drain + estimate.lengths.mean_decode_steps * estimate.step_s


_PLANS: dict[str, float | None] = {}


def planned_wall_s(config: RunConfig) -> float | None:
    """How many wall seconds a run of ``config`` lasts by its plan (:func:`planned_clock_s`):
    on the simulator its simulated seconds over the pace (None without one: as fast as possible
    takes what the CPU takes), on a real engine the same seconds. Kept per engine and workload
    (the seed, scheduler and run id do not change the plan)."""
    pace = getattr(config.engine, "pace", None) if config.engine.kind == "sim" else 1.0
    if pace is None:
        return None
    key = json.dumps(
        {
            "engine": config.engine.model_dump(mode="json", exclude={"pace"}),
            "workload": config.workload.model_dump(mode="json", exclude={"seed"}),
        },
        sort_keys=True,
        default=str,
    )
    if key not in _PLANS:
        if len(_PLANS) > 256:
            _PLANS.clear()
        _PLANS[key] = planned_clock_s(config)
    clock = _PLANS[key]
    return None if clock is None else clock / pace


_CONFIGS: dict[str, tuple[tuple[int, int], RunConfig | None]] = {}


def _file_stamp(path: Path) -> tuple[int, int] | None:
    """(size in bytes, mtime in ns) of ``path``, the key of the caches below; None when it cannot be read."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def run_config_of(folder: Path) -> RunConfig | None:
    """The run config in ``folder``'s config.json (kept while the file's size and mtime stay);
    None when it cannot be read or is not a run config this version reads."""
    path = folder / "config.json"
    stamp = _file_stamp(path)
    if stamp is None:
        return None
    cached = _CONFIGS.get(str(folder))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    config = None
    try:
        data = json.loads(path.read_bytes().decode("utf-8")).get("config")
        config = parse_config(data) if isinstance(data, dict) else None
    except (OSError, ValueError, RecursionError, AttributeError, SchedlabError):
        config = None
    if len(_CONFIGS) > 256:
        _CONFIGS.clear()
    _CONFIGS[str(folder)] = (stamp, config)
    return config


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
    if status == "running":
        config = run_config_of(path)
        eta = run_eta(elapsed, done, total, planned_wall_s(config) if config is not None else None)
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
        eta_s=eta.seconds if eta is not None else None,
        eta=eta,
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


def runs_progress_text(counts: Mapping[str, int], total: int, study_id: str | None = None) -> str:
    """``study s1: 3 of 10 runs finished (3 done, 2 running, 5 queued)``: the runs that ended of
    ``total``, then ``counts`` (status -> runs; pending ones left out); without ``study_id`` it
    starts at the count."""
    finished = sum(count for status, count in counts.items() if status in ENDED)
    parts = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()) if status != "pending" and count)
    head = f"study {study_id}: " if study_id else ""
    return f"{head}{finished} of {total} runs finished" + (f" ({parts})" if parts else "")


@dataclass
class StudyProgress:
    """How far a study has come, from its study.json: ``total`` runs planned, ``finished`` (ended
    done, failed, cancelled, skipped, interrupted or damaged), ``counts`` per status, ``status``
    of the study, and its ``record`` (study.json)."""

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
        return runs_progress_text(self.counts, self.total, self.study_id)


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
    finished = sum(count for status, count in counts.items() if status in ENDED)
    return StudyProgress(str(record.study_id), str(record.status), total, finished, counts, record)


#: The results shown for each run in the live view's table of a job's runs (run-metric keys).
RUN_TABLE_KEYS: tuple[str, ...] = ("slo_attainment", "G", "tpot_s.mean", "e2e_s.mean", "output_throughput_tps")
_SUMMARY_CACHE: dict[str, tuple[tuple[int, int], RunEntry]] = {}


def _finished_summary(folder: Path) -> RunEntry | None:
    """summary.json of a run that ended (kept while its size and mtime stay); None otherwise."""
    stamp = _file_stamp(folder / "summary.json")
    if stamp is None:
        return None
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


#: Statuses a run ends with, as a job or a study reports them (``skipped``: never started).
ENDED = ("done", "failed", "cancelled", "skipped", "lost", INTERRUPTED, DAMAGED)


@dataclass(frozen=True)
class RunState:
    """One run of a job as the live view shows it: ``status`` (``queued``, ``starting``,
    ``running`` or how it ended), ``error`` and ``entry``, its folder's summary as the result
    store lists it (None while it has no folder). A study member also carries what its study.json
    says of it: ``node`` (where it runs or ran), ``hardware``, ``requests_done`` of
    ``requests_total`` (its last progress report: a member running on another Ray node has no
    folder here until it ends) and ``started_at_unix_s``."""

    status: str
    error: str | None = None
    entry: RunEntry | None = None
    node: str | None = None
    hardware: str | None = None
    requests_done: int | None = None
    requests_total: int | None = None
    started_at_unix_s: float | None = None

    def done(self) -> int:
        """Requests of the run that ended: its folder's rows (their last flush) or, when larger,
        the count its study last reported."""
        rows = self.entry.rows if self.entry is not None and self.entry.rows is not None else 0
        return max(rows, self.requests_done or 0)

    def share(self, planned: int) -> float:
        """The share (0-1) of ``planned`` requests a running run has ended (:meth:`done`)."""
        return min(1.0, self.done() / planned) if planned > 0 else 0.0

    def started(self) -> float | None:
        """When the run started (Unix seconds): its folder's summary, else its study's record."""
        if self.entry is not None and self.entry.started_at_unix_s is not None:
            return self.entry.started_at_unix_s
        return self.started_at_unix_s


def _member_facts(entry: JobRunStatus | StudyRun | None) -> dict[str, Any]:
    """What a study.json entry says of where and how far a member runs (RunState's fields); nothing
    for a job's status.json entry."""
    if not isinstance(entry, StudyRun):
        return {}
    started = parse_utc_stamp(str(entry.started_at)) if entry.started_at else None
    return {
        "node": entry.node,
        "hardware": entry.hardware,
        "requests_done": entry.requests_done,
        "requests_total": entry.requests_total,
        "started_at_unix_s": started,
    }


def job_run_states(
    results_root: str | Path, runs: list[Any], statuses: Mapping[str, JobRunStatus | StudyRun]
) -> dict[str, RunState]:
    """Each run of a job (``runs``: its RunConfigs in order) by its run id, one source per fact:
    a run that ended as the job or study reports it (``statuses``: run id -> the status.json or
    study.json entry, read before this) keeps that status and error; otherwise its folder says
    (``running`` only while its folder says so: a worker has started it and it has not ended;
    a folder without its summary yet: ``running`` too, its writer is making it); a run with no
    folder is ``queued`` (``starting`` when the job's worker reports it running: it is being
    prepared). The folders are read last, in reverse order of the plan: workers take runs in
    plan order, so a run seen running means the run it replaced had ended before, and is seen
    ended when read after it; the table never shows more runs running than there are workers."""
    root = Path(results_root)
    states: dict[str, RunState] = {}
    for run in reversed(runs):
        run_id = str(run.run_id)
        reported = statuses.get(run_id)
        status, error = _reported(reported)
        facts = _member_facts(reported)
        folder = root / run_id
        if status in ENDED:
            states[run_id] = RunState(status, error, _finished_summary(folder), **facts)
            continue
        try:
            exists = folder.is_dir()
        except OSError:
            exists = False
        if not exists:  # reporting progress from another node (a Ray member writes there): running
            placed = status == "running" and facts.get("requests_done") is not None
            states[run_id] = RunState("running" if placed else "starting" if status == "running" else "queued", **facts)
            continue
        entry = inspect_run(folder)
        if entry.status == INCOMPLETE:
            states[run_id] = RunState("running", None, None, **facts)
        else:
            states[run_id] = RunState(str(entry.status), entry.error or entry.problem, entry, **facts)
    return {str(run.run_id): states[str(run.run_id)] for run in runs}


def job_run_rows(
    results_root: str | Path,
    runs: list[Any],
    statuses: Mapping[str, JobRunStatus | StudyRun],
    live: LiveSnapshot | None = None,
    states: Mapping[str, RunState] | None = None,
) -> list[dict[str, Any]]:
    """One row per run of a job (``runs``: its RunConfigs in order): scheduler, seed, rate, status
    (:func:`job_run_states` of ``statuses``, run id -> the job's or study's entry; or ``states``
    when the caller read them already) and, for a run that ended, its results from its
    summary.json (:data:`RUN_TABLE_KEYS`, catalog labels and display units); the running run
    (``live``, when its folder says it runs) shows its results so far. The run id is the last
    column."""
    root = Path(results_root)
    states = states if states is not None else job_run_states(root, runs, statuses)
    rows = []
    for run in runs:
        state = states.get(str(run.run_id)) or RunState("queued")
        status = state.status
        summary: RunEntry | dict[str, Any] | None = None
        if status == "running":
            if live is not None and live.run_id == run.run_id and live.status == "running":
                summary = live.metrics
        elif status not in ("queued", "starting", "skipped"):
            summary = state.entry if state.entry is not None else _finished_summary(root / run.run_id)
        row: dict[str, Any] = {
            "scheduler": run.scheduler.name,
            "seed": run.workload.seed,
            f"rate ({metric('request_throughput_rps').unit})": run.workload.arrival.rate,
            "status": status,
        }
        for key in RUN_TABLE_KEYS:
            entry = metric(key)
            row[entry.label] = entry.format(summary_value(summary, key)) if summary else ""
        row["node"] = state.node  # a study member's machine (None elsewhere: the panel drops the column)
        row["error"] = state.error
        row["run"] = run.run_id
        rows.append(row)
    return rows


def running_member_rows(
    runs: list[Any], states: Mapping[str, RunState], now: float | None = None
) -> list[dict[str, Any]]:
    """One row per run running now (``states`` of :func:`job_run_states`), wherever it runs: run id,
    scheduler, seed, node and hardware (a study member's, from its study.json), requests ended of
    those planned, wall seconds since it started, and its ETA (:func:`run_eta`, measured from its
    pace: a member on another node reports only its count of ended requests)."""
    clock = now if now is not None else time.time()
    rows = []
    for run in runs:
        state = states.get(str(run.run_id))
        if state is None or state.status != "running":
            continue
        total = state.requests_total or run.workload.requests
        started = state.started()
        elapsed = max(0.0, clock - started) if started is not None else None
        eta = run_eta(elapsed, state.done(), total, planned_wall_s(run))
        rows.append(
            {
                "run": run.run_id,
                "scheduler": run.scheduler.name,
                "seed": run.workload.seed,
                "node": state.node or "this machine",
                "hardware": state.hardware,
                "requests": f"{state.done():,} of {total:,}",
                "running (s)": round(elapsed) if elapsed is not None else None,
                "ETA": eta.text() if eta is not None else "",
            }
        )
    return rows


@dataclass(frozen=True)
class JobProgress:
    """How far a whole job has come, from its runs' states (:func:`job_run_states`): ``total``
    runs, ``finished`` (ended), ``current`` (runs' worth of the running ones done, from their
    rows so far), ``counts`` per status and the job's ``eta``."""

    total: int
    finished: int
    current: float
    counts: dict[str, int]
    eta: Eta | None

    def fraction(self) -> float:
        """Share of the job done (0-1)."""
        return min(1.0, (self.finished + self.current) / self.total) if self.total else 0.0

    def text(self, study_id: str | None = None) -> str:
        """:func:`runs_progress_text` of the job, with its ETA after a dash."""
        text = runs_progress_text(self.counts, self.total, study_id)
        return text + (f" — {self.eta.text(' for the whole job')}" if self.eta is not None else "")


def job_progress(
    runs: list[Any], states: Mapping[str, RunState], workers: int = 1, now: float | None = None
) -> JobProgress:
    """The progress of a job of ``runs`` (its RunConfigs, in order) in ``states``: the ETA of
    :func:`job_eta` from the wall time since its first run started (the worker's own start is
    not a run's pace), the runs' planned wall seconds (:func:`planned_wall_s` of the first run;
    a study's or sweep's runs are alike in size) and ``workers`` runs at a time."""
    counts: dict[str, int] = {}
    finished = 0
    current = 0.0
    starts = []
    for run in runs:
        state = states.get(str(run.run_id)) or RunState("queued")
        counts[state.status] = counts.get(state.status, 0) + 1
        if state.status in ENDED:
            finished += 1
        elif state.status == "running":
            current += state.share(run.workload.requests)
        started = state.started()
        if started is not None:
            starts.append(started)
    clock = now if now is not None else time.time()
    elapsed = max(0.0, clock - min(starts)) if starts else None
    planned = planned_wall_s(runs[0]) if runs else None
    requests = runs[0].workload.requests if runs else None
    eta = job_eta(elapsed, finished, len(runs), current, planned, workers, requests)
    return JobProgress(len(runs), finished, current, counts, eta)
