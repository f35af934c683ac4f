"""Reading a run folder while its run goes: the rows flushed so far, progress, ETA and running
metrics, and the launched servers' log tails; and a study's progress from its study.json. Used by
the dashboard's live view. Numbers are shown with the metric catalog's labels and units
(:mod:`runners.metrics.catalog`: TPOT in ms, shares in percent).

Part files are immutable once they appear (they are renamed into place whole), so each one is
read once and kept in a small cache keyed by (path, size, mtime); a refresh reads only new parts.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from runners.metrics.catalog import metric, summary_value, timeseries_metric
from runners.metrics.run_metrics import summarize_requests
from runners.errors import SchedlabError
from runners.result_store import (DAMAGED, INCOMPLETE, REQUEST_COLUMNS, TIMESERIES_COLUMNS, empty_frame, inspect_run,
                                  read_table)

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
    over the latest telemetry sample, summed over instances."""

    run_id: str
    folder: Path
    status: str
    error: str | None
    header: dict[str, Any]
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

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0

    def cards(self) -> list[tuple[str, str]]:
        """(label, value) of :data:`LIVE_METRIC_KEYS` over the rows so far, from the catalog."""
        return live_cards(self.metrics)

    def engine_cards(self) -> list[tuple[str, str]]:
        """(catalog label, value) of the in-engine scheduler's running limit and held-back
        requests at the latest sample; [] for a run without an in-engine scheduler."""
        return [(timeseries_metric(column).label, timeseries_metric(column).format(value))
                for column, value in self.engine.items()]


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


def _parse_utc(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    except ValueError:
        return None


def read_live(folder: str | Path, now: float | None = None) -> LiveSnapshot | None:
    """A snapshot of the run in ``folder``; None while the folder has no summary yet. A damaged
    run gives a snapshot with status ``damaged`` and the reason as its error; a run whose writer
    is gone, ``interrupted``."""
    path = Path(folder)
    summary = inspect_run(path)
    if summary["status"] == INCOMPLETE:
        return None
    problem = summary.get("problem")
    try:
        requests = read_table(path, "requests", REQUEST_COLUMNS, _cached_table)
        timeseries = read_table(path, "timeseries", TIMESERIES_COLUMNS, _cached_table)
    except SchedlabError as exc:
        problem = problem or str(exc)
        requests, timeseries = empty_frame(REQUEST_COLUMNS), empty_frame(TIMESERIES_COLUMNS)
    if problem is not None:
        summary = {"status": DAMAGED, "error": problem}
    config_total = None
    try:
        config = json.loads((path / "config.json").read_bytes().decode("utf-8"))
        config_total = config.get("config", {}).get("workload", {}).get("requests")
    except (OSError, ValueError, RecursionError, AttributeError):
        pass
    if not isinstance(config_total, int) or isinstance(config_total, bool):
        config_total = None
    total = int(summary.get("requests_total") or config_total or len(requests))
    done = int(len(requests))
    status = str(summary.get("status", "running"))
    started = summary.get("started_at_unix_s") or _parse_utc(summary.get("started_at"))
    finished = _parse_utc(summary.get("finished_at"))
    current = now if now is not None else time.time()
    elapsed = None
    if started is not None:
        elapsed = (finished if finished is not None and status != "running" else current) - started
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
    return LiveSnapshot(
        run_id=path.name, folder=path, status=status, error=summary.get("error"), header=summary,
        requests=requests, timeseries=timeseries, total=total, done=done, elapsed_s=elapsed, eta_s=eta,
        metrics=metrics, tokens_per_s=tokens_per_s, logs=log_tails(path), engine=engine,
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
    done, failed, cancelled or skipped), ``counts`` per status, ``status`` of the study."""

    study_id: str
    status: str
    total: int
    finished: int
    counts: dict[str, int]
    record: dict[str, Any]

    def fraction(self, current: float = 0.0) -> float:
        """Share of the study done, counting ``current`` (0-1) of the run in progress."""
        return min(1.0, (self.finished + current) / self.total) if self.total else 0.0

    def text(self) -> str:
        parts = ", ".join(f"{count} {status}" for status, count in sorted(self.counts.items()) if status != "pending")
        return f"study {self.study_id}: {self.finished} of {self.total} runs finished" + (f" ({parts})" if parts else "")


def read_study_progress(results_root: str | Path, study_id: str) -> StudyProgress | None:
    """The progress of study ``study_id`` in ``results_root``; None before its study.json exists
    or when it cannot be read."""
    from runners.study import read_study

    folder = Path(results_root) / study_id
    try:
        record = read_study(folder)
    except (SchedlabError, OSError):
        return None
    counts: dict[str, int] = {}
    for run in record["runs"]:
        status = str(run.get("status"))
        counts[status] = counts.get(status, 0) + 1
    total = len(record["runs"])
    return StudyProgress(str(record["study_id"]), str(record.get("status")), total, total - counts.get("pending", 0),
                         counts, record)
