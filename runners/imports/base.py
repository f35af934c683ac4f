"""What every importer shares: the parsed run (:class:`ImportedRun`), the per-request row it
becomes, and :func:`write_run`, which saves it as an ordinary run folder.

An imported run is a run folder like any other (``config.json``, ``summary.json``,
``requests.parquet``, ``timeseries.parquet``; the timeseries is empty, the tools sample no
engine state), plus a byte-for-byte copy of the tool's file. Its summary metrics are computed by
:func:`runners.metrics.run_metrics.summarize_requests` from the request rows, the same function
as for a schedlab run, wherever the tool wrote per-request times; a run-level figure of the
tool's is written in our summary only where its definition is ours (``mapped``). Where a
definition differs, the tool's figure is kept beside ours in ``imported.definitions`` and the
Results page says so.

Provenance (``summary.json`` key ``imported``, optional; the full record is in
``config.json`` under the same key)::

    {"tool": "vllm-bench", "tool_version": "0.32.0", "label": "imported from vLLM bench serve 0.32.0",
     "source_file": "source-<name>", "benchmark": <index or null>,
     "metrics": {<summary key>: "recomputed" | "mapped" | "not measured"},
     "definitions": [{"metric": <summary key>, "tool_metric": <their name>, "tool_value": <seconds or null>,
                      "note": <how the definitions differ>}]}

Times in rows are seconds since the run's first arrival; token counts are tokens.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import runners
from runners.errors import SchedlabError
from runners.store.run_ids import validate_run_id
from runners.timestamps import utc_stamp

if TYPE_CHECKING:  # numpy, pandas and the result store are imported where used: `import --help` loads none
    import numpy as np

#: An imported request has no task of ours; it is counted as a chat request (the CDF panels
#: are per task), and the SLO metrics are left unmeasured since the tools hold no SLO.
IMPORTED_TASK = "chat"
#: Summary keys an import never fills: the tools know no SLO of ours.
SLO_KEYS = ("slo_attainment", "slo_met", "G", "goodput_rps")
RECOMPUTED, MAPPED, NOT_MEASURED = "recomputed", "mapped", "not measured"
#: The summary's run-level counts and rates (request counts, seconds, per-second rates).
RUN_LEVEL_KEYS = (
    "requests",
    "completed",
    "failed",
    "duration_s",
    "request_throughput_rps",
    "output_throughput_tps",
    "total_throughput_tps",
)
#: The ``requests.parquet`` columns in the order :func:`request_values` gives a row's values:
#: runners.store.result_store's REQUEST_COLUMNS (tests/unit/test_imports_rows.py holds them equal).
ROW_COLUMNS = (
    "request_id",
    "task",
    "arrival_s",
    "dispatch_s",
    "first_token_s",
    "finish_s",
    "input_tokens",
    "output_tokens",
    "target_output_tokens",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "queue_s",
    "slo_met",
    "instance",
    "slices",
    "error",
    "preemptions",
    "itl_max_s",
    "session",
    "turn",
    "cached_tokens",
)


def per_request_keys() -> tuple[str, ...]:
    """The summary metrics recomputed from per-request rows (the distributions' keys included)."""
    from runners.metrics.run_metrics import LATENCY_COLUMNS

    return (*RUN_LEVEL_KEYS, *LATENCY_COLUMNS)


class ImportFormatError(SchedlabError):
    """The file is not (or not wholly) the format an importer reads; the message names the file
    and what was expected."""


@dataclass
class RequestTimes:
    """One request as a tool measured it, in seconds since the run's first arrival: ``arrival_s``
    (when the load generator released it), ``sent_s`` (when it went to the server), first token
    and finish (None when it failed before them), token counts, the gaps between its streamed
    chunks (``itl_s``, seconds; None when the tool kept none) and the tool's error text."""

    request_id: str
    arrival_s: float
    sent_s: float
    first_token_s: float | None
    finish_s: float | None
    input_tokens: int
    output_tokens: int
    itl_s: Sequence[float] | None = None
    error: str | None = None


@dataclass
class WrittenRun:
    """One run folder an import wrote: the folder, the run it holds, and how many request rows
    ``requests.parquet`` holds (rows with a value no column can hold are left out by the store)."""

    folder: Path
    run: ImportedRun
    rows: int


@dataclass
class Definition:
    """A metric whose definition differs between the tool and schedlab (see module docstring)."""

    metric: str
    tool_metric: str
    tool_value: float | None
    note: str

    def record(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "tool_metric": self.tool_metric,
            "tool_value": self.tool_value,
            "note": self.note,
        }


@dataclass
class ImportedRun:
    """One run parsed from a tool's file, ready for :func:`write_run`.

    ``requests``: per-request times (empty when the tool kept only run-level figures);
    ``mapped``: summary fields taken from the tool's run-level figures whose definition is ours
    (used only where no per-request data recomputes them); ``definitions``: differing ones;
    ``tool_summary``: the tool's own run-level figures as it named them (kept in config.json)."""

    tool: str
    tool_name: str
    tool_version: str | None
    workload: str
    requests: list[RequestTimes]
    arrival_process: str | None = None
    arrival_rate_rps: float | None = None
    started_at_unix_s: float | None = None
    benchmark: int | None = None
    model: str | None = None
    target: str | None = None
    mapped: dict[str, Any] = field(default_factory=dict)
    definitions: list[Definition] = field(default_factory=list)
    tool_summary: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"imported from {self.tool_name} {self.tool_version or '(version unknown)'}"


def request_values(times: RequestTimes) -> tuple[Any, ...]:
    """The ``requests.parquet`` row of one imported request, its values in :data:`ROW_COLUMNS`
    order: latencies from arrival by :func:`runners.metrics.request_metrics.request_latencies`
    (the tool's client-side queue, ``sent_s - arrival_s``, is our queue time); no SLO, so
    ``slo_met`` is False. Seconds; token counts in tokens."""
    from runners.metrics.request_metrics import request_latencies

    itl_max = _largest_gap(times.itl_s)
    ttft = tpot = e2e = None
    queue = times.sent_s - times.arrival_s
    if times.error is None and times.first_token_s is not None and times.finish_s is not None:
        latencies = request_latencies(
            times.arrival_s, times.sent_s, times.first_token_s, times.finish_s, times.output_tokens
        )
        ttft, tpot, e2e, queue = latencies.ttft_s, latencies.tpot_s, latencies.e2e_s, latencies.queue_s
    output = int(times.output_tokens)
    return (
        times.request_id,
        IMPORTED_TASK,
        times.arrival_s,
        times.sent_s,
        times.first_token_s,
        times.finish_s,
        int(times.input_tokens),
        output,
        output,
        ttft,
        tpot,
        e2e,
        queue,
        False,
        0,
        1,
        times.error,
        None,
        itl_max,
        None,  # session: imported requests are single turns
        None,  # turn
        None,  # cached_tokens: not in the tools' files
    )


def _largest_gap(gaps: Sequence[float] | np.ndarray | None) -> float | None:
    """The largest of a request's chunk gaps (seconds), as ``float(np.max)`` gives it; None without any."""
    if gaps is None or len(gaps) == 0:
        return None
    import numpy as np

    return float(np.asarray(gaps, dtype=float).max())


def request_row(times: RequestTimes) -> dict[str, Any]:
    """The ``requests.parquet`` row of one imported request as a mapping column -> value
    (:func:`request_values`)."""
    return dict(zip(ROW_COLUMNS, request_values(times)))


def imported_summary(
    run: ImportedRun, rows: list[tuple[Any, ...]] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """(summary metric fields, provenance per summary key) of ``run``: recomputed from its
    request rows by the project's own :func:`summarize_requests`, else mapped from the tool's
    run-level figures; SLO metrics are not measured. ``rows``: the run's :func:`request_values`,
    when the caller already has them (they are computed once per import)."""
    import numpy as np
    import pandas as pd

    from runners.metrics.run_metrics import LATENCY_COLUMNS, summarize_requests

    if rows is None:
        rows = [request_values(times) for times in run.requests]
    # built from tuples as it was from mappings: the same object columns, the same inferred dtypes
    table = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    gaps = [
        np.asarray(times.itl_s, dtype=float)
        for times in run.requests
        if times.error is None and times.itl_s is not None
    ]
    itl = np.concatenate(gaps) if gaps else None
    provenance: dict[str, str] = {}
    if run.requests:
        summary = summarize_requests(table, itl_gaps_s=itl)
        provenance.update(dict.fromkeys(per_request_keys(), RECOMPUTED))
        if itl is not None and itl.size:
            provenance["itl_s"] = RECOMPUTED
    else:  # run-level figures only: ours are the tool's where the definitions match, else unmeasured
        summary = summarize_requests(table)
        for key in RUN_LEVEL_KEYS:
            summary[key] = None
        for key in (*LATENCY_COLUMNS, "itl_s"):
            summary[key] = {"mean": None, "median": None, "p90": None, "p99": None}
    for key, value in run.mapped.items():
        if provenance.get(key.split(".")[0]) == RECOMPUTED:
            continue
        _set_dotted(summary, key, value)
        provenance[key] = MAPPED
    for key in SLO_KEYS:
        summary[key] = None
        provenance[key] = NOT_MEASURED
    summary["slo_attainment_by_task"] = {task: None for task in summary.get("slo_attainment_by_task", {})}
    summary["preemptions"] = None
    provenance["preemptions"] = NOT_MEASURED
    if summary.get("itl_s", {}).get("mean") is None and "itl_s" not in provenance:
        provenance["itl_s"] = NOT_MEASURED
    return summary, provenance


def _set_dotted(target: dict[str, Any], key: str, value: Any) -> None:
    head, _, rest = key.partition(".")
    if rest:
        inner = target.get(head)
        if not isinstance(inner, dict):
            inner = target[head] = {}
        _set_dotted(inner, rest, value)
    else:
        target[head] = value


def file_digest(source: Path) -> str:
    """The first 4 hex digits of the SHA-256 of ``source``'s bytes (:func:`bytes_digest`)."""
    return bytes_digest(source.read_bytes())


def bytes_digest(raw: bytes) -> str:
    """The first 4 hex digits of the SHA-256 of a file's bytes ``raw`` (once per import)."""
    return hashlib.sha256(raw).hexdigest()[:4]


def default_run_id(run: ImportedRun, source: Path, digest: str | None = None) -> str:
    """``imported-<tool>-<file stem>[-b<benchmark>]-<4 hex of the file's bytes>``, a valid run id
    (``digest``: :func:`file_digest` of ``source``, when the caller already has it)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", source.stem)[:60].strip("-._") or "file"
    digest = digest or file_digest(source)
    bench = f"-b{run.benchmark}" if run.benchmark is not None else ""
    return f"imported-{run.tool}-{stem}{bench}-{digest}"


def write_run(
    root: str | Path, run: ImportedRun, source: Path, run_id: str | None = None, copy_of_source: Path | None = None
) -> Path:
    """Save ``run`` (parsed from ``source``) as a run folder in ``root``; returns the folder
    (:func:`write_imported_run`, which also says how many request rows it wrote)."""
    return write_imported_run(root, run, source, run_id, copy_of_source).folder


def write_imported_run(
    root: str | Path, run: ImportedRun, source: Path, run_id: str | None = None, copy_of_source: Path | None = None
) -> WrittenRun:
    """Save ``run`` (parsed from ``source``) as a run folder in ``root``.

    The source file is copied unchanged into the folder as ``source-<its name>``; with
    ``copy_of_source`` (that copy, already in another run folder of the same import) it is a hard
    link to it when the file system allows (else a copy), so a file of n benchmarks costs one
    copy, not n: each folder still holds the whole file, and deleting one run leaves the others'.
    Raises ConfigError when a run named ``run_id`` exists (nothing is overwritten)."""
    from runners.store.result_store import RunWriter

    run_id = validate_run_id(run_id or default_run_id(run, source))
    rows = [request_values(times) for times in run.requests]  # once: the summary's table and the file's rows
    summary, provenance = imported_summary(run, rows)
    copy_name = source_copy_name(source)
    record = {
        "tool": run.tool,
        "tool_name": run.tool_name,
        "tool_version": run.tool_version,
        "label": run.label,
        "source_file": copy_name,
        "source_path": str(source),
        "benchmark": run.benchmark,
        "metrics": provenance,
        "definitions": [definition.record() for definition in run.definitions],
        "notes": run.notes,
    }
    config = {
        "label": run.label,
        "imported": {**record, "model": run.model, "target": run.target, "tool_summary": run.tool_summary},
        "versions": {
            "schedlab": runners.__version__,
            "engine": run.tool_name + (f" {run.tool_version}" if run.tool_version else ""),
            "python": platform.python_version(),
        },
    }
    started = run.started_at_unix_s
    header: dict[str, Any] = {
        "engine": "imported",
        "scheduler": run.tool,
        "workload": run.workload,
        "synthetic": None,
        "started_at": _stamp(started, "start") if started else None,
        "started_at_unix_s": started,
        "slos": {},
        "arrival_process": run.arrival_process,
        "arrival_rate_rps": run.arrival_rate_rps,
        "instances": 1,
        "sweep_id": None,
        "notes": run.label,
    }
    finished_at = _finished_at(started, summary.get("duration_s"))  # refused before a folder exists
    writer = RunWriter(root, run_id, config, header)
    try:
        _place_source(source, copy_of_source, writer.folder / copy_name)
        for values in rows:
            writer.add_request_values(values)
        writer.close(
            "done",
            {
                **summary,
                "requests_total": len(run.requests) or summary.get("requests"),
                "imported": record,
                "finished_at": finished_at,
            },
        )
    except OSError as exc:
        shutil.rmtree(writer.folder, ignore_errors=True)
        raise SchedlabError(f"{writer.folder}: cannot write the imported run ({exc.strerror or exc})") from None
    return WrittenRun(writer.folder, run, len(rows) - writer.requests.rejected)


def _place_source(source: Path, copy_of_source: Path | None, target: Path) -> None:
    """``target``: a hard link to ``copy_of_source`` when there is one and linking works, else a copy of ``source``."""
    if copy_of_source is not None:
        try:
            os.link(copy_of_source, target)
            return
        except OSError:  # another file system, or links not allowed: copy
            pass
    shutil.copyfile(source, target)


def source_copy_name(source: Path) -> str:
    """The name of ``source``'s unchanged copy in each run folder it was imported into."""
    return "source-" + re.sub(r"[^A-Za-z0-9._-]+", "_", source.name)


def _finished_at(started: float | None, duration_s: float | None) -> str | None:
    """UTC time of the run's last finish: its start plus our duration (None when unknown)."""
    if started is None:
        return None
    return _stamp(started + (duration_s or 0.0), "last finish")


def _stamp(unix_s: float, what: str) -> str:
    """``unix_s`` as a UTC stamp; SchedlabError naming ``what`` when no date holds it (a
    timestamp of another unit, or garbage: 1e30 ns is 3e13 years)."""
    try:
        return utc_stamp(unix_s)
    except (OverflowError, OSError, ValueError):
        raise SchedlabError(
            f"the run's {what} would be {unix_s:.4g} s after 1970, which no date holds; expected "
            "timestamps in the tool's own unit (AIPerf: nanoseconds since the epoch)"
        ) from None


def read_bytes(path: str | Path, limit: int = 512 * 2**20) -> bytes:
    """The bytes of ``path``; SchedlabError naming it when it is missing, a folder, empty or huge."""
    path = Path(path)
    try:
        if path.is_dir():
            raise ImportFormatError(
                f"{path}: is a folder; expected a result file of vLLM bench serve, GuideLLM or AIPerf"
            )
        size = path.stat().st_size
    except FileNotFoundError:
        raise SchedlabError(f"{path}: no such file") from None
    except OSError as exc:
        raise SchedlabError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if size == 0:
        raise ImportFormatError(
            f"{path}: the file is empty; expected a result file of vLLM bench serve, GuideLLM or AIPerf"
        )
    if size > limit:
        raise ImportFormatError(f"{path}: {size} bytes, larger than the {limit >> 20} MiB an import reads")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise SchedlabError(f"{path}: unreadable ({exc.strerror or exc})") from None


def number(value: Any) -> float | None:
    """``value`` as a finite float, or None (for bools, text, NaN, missing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None
