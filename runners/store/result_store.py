"""The result store: ``results/<run_id>/`` written incrementally and atomically.

Files (a contract: docs/design.md "Result contracts"; columns never change without a schema-version bump):

- ``config.json``: everything needed to rerun the run exactly, plus versions;
- ``summary.json``: status (running | done | failed | cancelled, with ``error``) and metrics,
  rewritten atomically as the run goes;
- ``requests.parquet``: one row per request; while the run goes, rows land in numbered
  ``requests.part-NNNNN.parquet`` files that are merged when the run ends, so a crash keeps
  every flushed row and :func:`load_run` reads the parts when the merged file is missing;
- ``timeseries.parquet``: one row per (sample time, instance), handled the same way.

A run is addressed only by its id, the name of its folder directly inside the results folder
(read-only commands also take a unique prefix, and ``show`` / ``compare`` a folder path). Delete
and rename take the exact id, refuse symbolic links and anything not directly inside the
resolved results folder, and never build a path from an id read from a file. Reading never
trusts a file either: :func:`list_runs` gives every folder a record, a ``damaged`` one (with
the reason) when its files are not what the pages expect, and a run whose writer process is gone
is reported as ``interrupted``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from runners.errors import ConfigError, SchedlabError
from runners.paths import default_results_dir
from runners.store.models import SUMMARY_SCHEMA_VERSION, RunEntry, RunSummary, record_json
from runners.store.run_ids import RUN_ID_PATTERN, validate_run_id

if TYPE_CHECKING:  # pandas and pyarrow load where tables are read or written (issue 28): listing
    # runs, reading a summary or refusing a run id imports neither
    import pandas as pd
    import pyarrow as pa

    #: The ``requests.parquet`` columns, in order, with their Arrow types (:func:`request_columns`).
    REQUEST_COLUMNS: dict[str, pa.DataType]
    #: The ``timeseries.parquet`` columns (runners.store.timeseries, the drivers' typed row).
    TIMESERIES_COLUMNS: dict[str, pa.DataType]

#: Version 2 added, without removing or renaming anything of version 1: ``resolved.tokenization`` in
#: config.json of real-engine runs, and imported runs (``summary.imported``; their config.json holds
#: ``label``, ``imported`` and ``versions`` instead of ``config`` and ``resolved``). Version 3 added
#: the time series' ``engine_limit``, ``engine_held_back`` and ``engine_admitted`` (requests; the
#: in-engine scheduler's decisions, runners.engines.engine_decisions; null without one), and the
#: summary's ``cancelled`` (requests in flight when the run was cancelled) and ``not_run``
#: (requests never sent: the run ended first), counted apart from ``failed``, which no longer
#: holds them, and left out of ``slo_attainment``'s denominator (runners.metrics.outcomes; the
#: request rows are written as before). Files of older versions lack them: :func:`read_table`
#: adds every missing column as nulls; an older summary without ``not_run`` counted its
#: cancelled and never-sent requests as failed. Version 4 added to real-engine summaries
#: ``warmup`` (what warm-up sent before the clock started: waves, requests, failed, output tokens,
#: seconds, why it stopped early) and ``telemetry`` (``/metrics`` scrapes tried, failed, refused as
#: too large, samples dropped as not finite or out of range), and to any summary ``rows_rejected``
#: (rows left out as holding a value no column can, per table; only when there were some); no
#: column changed, nothing was renamed or removed. Version 5 changed what ``G`` counts (failed
#: requests are misses whose time until failure is in the denominator; before, they were left
#: out of both sums: runners.metrics.run_metrics) and added the summary's ``oracle`` (the oracles
#: the policy used, one sentence each; empty: none; runners.run.knowledge) and config.json's
#: ``resolved.knowledge`` (the oracles, each task's calibration-sample moments, and on the
#: simulator the latency model the policy planned with and its error). The scheduler parameter
#: value ``output_prior: workload`` is read as ``workload-oracle``, what it always was. A run
#: written before version 5 has no ``oracle``: whether it used one is in its config.json.
#: Version 6 added ``prefix_cache_hit_rate`` (0-1) and ``prefix_cache {queries_tokens, hits_tokens,
#: source}`` where the engine reports them (the simulator, which models vLLM's prefix caching from
#: this version on: a simulated run that preempts or sends a request again reuses its cached
#: blocks, so such runs differ from version 5's); nothing was renamed or removed.
#: Version 7 added multi-turn sessions (runners.workload.sessions): ``requests.parquet``'s ``session``
#: (the session's id) and ``turn`` (from 1), null for a request that is not a session's turn, and
#: the summary's ``sessions`` (sessions, turns, sessions whose every turn completed or met its SLO)
#: and ``turns`` (per turn index: requests, completed, TTFT mean and p99, SLO attainment), only for
#: a run that sent sessions; a later turn never sent because an earlier one failed is *not run*
#: (error ``session ended: an earlier turn failed``); ``requests.parquet``'s ``cached_tokens`` (prompt
#: tokens the engine found in its prefix cache, summed over the request's dispatches: the simulator's
#: count, a real server's ``usage.prompt_tokens_details.cached_tokens``; null where not reported); and
#: the time series' ``prefix_cache_queries_tokens``
#: and ``prefix_cache_hits_tokens`` (each instance's prefix-cache counters since the run's start,
#: tokens; null where the engine does not report them). Nothing was renamed or removed.
SCHEMA_VERSION = SUMMARY_SCHEMA_VERSION
DEFAULT_RESULTS_DIR = default_results_dir()

#: The ``requests.parquet`` columns, in order, and their Arrow type names (:func:`request_columns`
#: gives the types; :data:`REQUEST_COLUMNS` is that mapping, made on first use).
REQUEST_COLUMN_TYPES: dict[str, str] = {
    "request_id": "string",
    "task": "string",
    "arrival_s": "float64",
    "dispatch_s": "float64",
    "first_token_s": "float64",
    "finish_s": "float64",
    "input_tokens": "int64",
    "output_tokens": "int64",
    "target_output_tokens": "int64",
    "ttft_s": "float64",
    "tpot_s": "float64",
    "e2e_s": "float64",
    "queue_s": "float64",
    "slo_met": "bool_",
    "instance": "int64",
    "slices": "int64",
    "error": "string",
    "preemptions": "int64",
    "itl_max_s": "float64",
    "session": "string",
    "turn": "int64",
    "cached_tokens": "int64",
}
STATUSES = ("running", "done", "failed", "cancelled")
INTERRUPTED = "interrupted"  # computed when read: status running, but the writer process is gone
DAMAGED = "damaged"  # computed when read: summary.json or a table is not what a run holds
INCOMPLETE = "incomplete"  # computed when read: a run folder with no (or an empty) summary.json
SUMMARY_MAX_BYTES = 16 * 2**20  # a summary is a few kB; anything this big is not one


def request_columns() -> dict[str, pa.DataType]:
    """The ``requests.parquet`` columns, in order, with their Arrow types (imports pyarrow; made
    once, the same mapping every time)."""
    columns: dict[str, pa.DataType] | None = globals().get("REQUEST_COLUMNS")
    if columns is None:
        import pyarrow as pa

        columns = {name: getattr(pa, kind)() for name, kind in REQUEST_COLUMN_TYPES.items()}
        globals()["REQUEST_COLUMNS"] = columns
    return columns


def timeseries_columns() -> dict[str, pa.DataType]:
    """The ``timeseries.parquet`` columns with their Arrow types (runners.store.timeseries, which
    imports pyarrow)."""
    from runners.store.timeseries import TIMESERIES_COLUMNS

    return TIMESERIES_COLUMNS


def __getattr__(name: str) -> Any:
    """:data:`REQUEST_COLUMNS` and :data:`TIMESERIES_COLUMNS`, made when first asked for (they
    need pyarrow)."""
    if name == "REQUEST_COLUMNS":
        return request_columns()
    if name == "TIMESERIES_COLUMNS":
        return timeseries_columns()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _schema(columns: dict[str, pa.DataType]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(name, dtype) for name, dtype in columns.items()])


def write_json_atomic(path: Path, data: Any, durable: bool = True) -> None:
    """Write JSON (``indent=2``) atomically: :func:`write_text_atomic`."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str), durable)


def write_record(path: Path, model: type[BaseModel], data: dict[str, Any], durable: bool = True) -> None:
    """``data`` validated as the typed record ``model`` (runners.store.models) and written
    atomically as the file text of the record (:func:`record_json`)."""
    write_text_atomic(path, record_json(model.model_validate(data)), durable)


def write_text_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Write ``text`` to a temporary file in the same folder, then rename it over ``path``.

    Readers never see a half-written file either way; ``durable`` also fsyncs, which can take
    seconds on a busy disk, so interim summaries skip it.
    """
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _write_parquet_atomic(path: Path, table: pa.Table) -> None:
    import pyarrow.parquet as pq

    temporary = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, path)


def table_from_rows(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """A table of ``rows``, each a tuple of values in ``schema``'s column order (None: null);
    every column converted as :meth:`pyarrow.Table.from_pylist` converts it."""
    import pyarrow as pa

    if not rows:
        return schema.empty_table()
    columns = list(zip(*rows))
    return pa.Table.from_arrays(
        [pa.array(column, type=field.type) for column, field in zip(columns, schema)], schema=schema
    )


#: Bytes of part tables (Arrow buffers) a parted table keeps in memory after writing them, so the
#: merge on close need not read them back from disk. A table whose parts outgrow it lets go of
#: them all and reads every part back (a big run's memory stays what it was without the cache).
MERGE_CACHE_BYTES = 16 * 2**20


class _PartedTable:
    """Rows buffered in memory (as tuples in column order) and flushed as numbered part files;
    merged on close (from the part tables still in memory while they fit in
    :data:`MERGE_CACHE_BYTES`, else from the files)."""

    def __init__(self, folder: Path, stem: str, columns: dict[str, pa.DataType]) -> None:
        self.folder = folder
        self.stem = stem
        self.schema = _schema(columns)
        self.names = tuple(columns)
        self.buffer: list[tuple] = []
        self.parts = 0
        self.cached: dict[str, pa.Table] | None = {}  # part file name -> its table; None: outgrown
        self.cached_bytes = 0
        self.rejected = 0  # rows no column type could hold (a value out of range): left out, counted

    def add(self, row: dict[str, Any]) -> None:
        self.buffer.append(tuple([row.get(name) for name in self.names]))

    def add_values(self, values: tuple) -> None:
        """A row as a tuple of values in column order."""
        self.buffer.append(values)

    def flush(self) -> None:
        """Write the buffered rows as the next part. Safe to call from a worker thread while
        the event loop keeps adding rows: the buffer is swapped out before it is written."""
        rows, self.buffer = self.buffer, []
        if not rows:
            return
        number = self.parts
        self.parts += 1
        table = self._table(rows)
        path = self.folder / f"{self.stem}.part-{number:05d}.parquet"
        _write_parquet_atomic(path, table)
        if self.cached is not None:
            self.cached_bytes += table.nbytes
            if self.cached_bytes <= MERGE_CACHE_BYTES:
                self.cached[path.name] = table
            else:
                self.cached = None

    def _table(self, rows: list[tuple]) -> pa.Table:
        """``rows`` as a table; when one holds a value its column cannot (an integer past int64,
        text in a number column), that row alone is left out and counted in ``rejected``, so one
        bad value never costs the others."""
        import pyarrow as pa

        try:
            return table_from_rows(rows, self.schema)
        except (OverflowError, TypeError, ValueError, pa.ArrowException):
            kept = []
            for row in rows:
                try:
                    table_from_rows([row], self.schema)
                except (OverflowError, TypeError, ValueError, pa.ArrowException):
                    self.rejected += 1
                    continue
                kept.append(row)
            return table_from_rows(kept, self.schema)

    def merge(self) -> None:
        """Write ``<stem>.parquet`` from all parts and the buffer, then remove the parts."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.flush()
        parts = sorted(self.folder.glob(f"{self.stem}.part-*.parquet"))
        cached = self.cached or {}
        tables = [
            cached[part.name] if part.name in cached else pq.read_table(part, schema=self.schema) for part in parts
        ]
        merged = pa.concat_tables(tables) if tables else self.schema.empty_table()
        _write_parquet_atomic(self.folder / f"{self.stem}.parquet", merged)
        for part in parts:
            part.unlink(missing_ok=True)
        self.cached, self.cached_bytes = {}, 0


# -- the writer's process, to tell a run that is going from one whose writer died --------------
def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first; Linux); None when
    unreadable."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, Linux); None when unknown."""
    fields = _proc_stat(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def writer_identity() -> dict[str, Any]:
    """This process as recorded in a running run's summary: pid, hostname, and its start time
    and the machine's boot id (so a reused pid or a reboot is not taken for the writer)."""
    pid = os.getpid()
    return {
        "pid": pid,
        "hostname": socket.gethostname(),
        "start_ticks": _process_start_ticks(pid),
        "boot_id": _boot_id(),
    }


def process_alive(pid: int | None) -> bool:
    """Whether process ``pid`` exists on this machine (a zombie, finished but not yet reaped by
    its parent, counts as gone)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:
        return False
    fields = _proc_stat(pid)
    return not fields or fields[0] != "Z"


def writer_gone(summary: dict[str, Any]) -> str | None:
    """Why the process that writes a ``running`` run has ended, or None while it may still run
    (or cannot be checked: no recorded writer, as in old summaries, or another machine's)."""
    writer = summary.get("writer")
    if summary.get("status") != "running" or not isinstance(writer, dict):
        return None
    pid = writer.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or writer.get("hostname") != socket.gethostname():
        return None
    boot = writer.get("boot_id")
    if boot is not None and _boot_id() is not None and boot != _boot_id():
        return f"the machine restarted after the run began (writer pid {pid})"
    if not process_alive(pid):
        return f"the process that wrote it (pid {pid}) has ended without finishing it"
    ticks = writer.get("start_ticks")
    if ticks is not None and _process_start_ticks(pid) not in (None, ticks):
        return f"the process that wrote it (pid {pid}) has ended; the pid now belongs to another process"
    return None


class RunWriter:
    """Writes one run folder as the run goes. Flushes rows every ``flush_rows`` rows or
    ``flush_seconds`` of wall time, whichever comes first."""

    def __init__(
        self,
        root: str | Path,
        run_id: str,
        config: dict[str, Any],
        header: dict[str, Any],
        flush_rows: int = 2000,
        flush_seconds: float = 2.0,
    ) -> None:
        self.root = Path(root)
        self.run_id = validate_run_id(run_id)
        self.folder = self.root / run_id
        self._make_folder()
        self.header = {"schema_version": SCHEMA_VERSION, "run_id": run_id, **header, "writer": writer_identity()}
        self.requests = _PartedTable(self.folder, "requests", request_columns())
        self.timeseries = _PartedTable(self.folder, "timeseries", timeseries_columns())
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self._last_flush = self._last_summary = time.monotonic()
        try:
            write_json_atomic(self.folder / "config.json", {"schema_version": SCHEMA_VERSION, **config})
            self.write_summary({"status": "running"})
        except OSError as exc:  # nothing measured yet: remove the folder this writer just made
            shutil.rmtree(self.folder, ignore_errors=True)
            raise SchedlabError(f"{self.folder}: cannot write the run's files ({exc.strerror or exc})") from None

    def _make_folder(self) -> None:
        """Create the run folder (and the results folder), or say in one line why not."""
        results_folder(self.root)  # one line when it exists but is not a folder
        try:
            if os.path.lexists(self.folder):
                raise ConfigError("run_id", f"a run named {self.run_id!r} already exists in {self.root}")
            self.folder.mkdir(parents=True)
        except FileExistsError:
            raise ConfigError("run_id", f"a run named {self.run_id!r} already exists in {self.root}") from None
        except OSError as exc:
            raise SchedlabError(f"{self.folder}: cannot create the run folder ({exc.strerror or exc})") from None

    def write_summary(self, fields: dict[str, Any], durable: bool = True) -> None:
        """summary.json: the header and ``fields``, written through :class:`RunSummary`."""
        write_record(self.folder / "summary.json", RunSummary, {**self.header, **fields}, durable)

    def add_request(self, row: dict[str, Any]) -> None:
        self.requests.add(row)

    def add_request_values(self, values: tuple) -> None:
        """A request row as a tuple in :data:`REQUEST_COLUMNS` order."""
        self.requests.add_values(values)

    def add_sample(self, row: dict[str, Any]) -> None:
        self.timeseries.add(row)

    def add_sample_values(self, values: tuple) -> None:
        """A time-series row as a tuple in :data:`TIMESERIES_COLUMNS` order."""
        self.timeseries.add_values(values)

    def due(self) -> bool:
        """True when buffered rows should be flushed."""
        pending = len(self.requests.buffer) + len(self.timeseries.buffer)
        return pending >= self.flush_rows or (pending > 0 and time.monotonic() - self._last_flush >= self.flush_seconds)

    def summary_due(self) -> bool:
        """True when the interim summary is ``flush_seconds`` old (a flush for ``flush_rows``
        rows alone writes no summary: computing one costs a pass over every row so far)."""
        return time.monotonic() - self._last_summary >= self.flush_seconds

    def flush(self, summary_fields: dict[str, Any] | None = None) -> None:
        self.requests.flush()
        self.timeseries.flush()
        self._last_flush = time.monotonic()
        if summary_fields is not None:
            self._last_summary = self._last_flush
            self.write_summary({"status": "running", **summary_fields}, durable=False)

    def close(self, status: str, summary_fields: dict[str, Any], error: str | None = None) -> None:
        """Merge the parts and write the final summary with ``status`` (and ``error``)."""
        import pyarrow as pa

        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}")
        problems = []
        for table in (self.requests, self.timeseries):
            try:  # a table that cannot be merged keeps its part files (readers read those)
                table.merge()
            except (OSError, pa.ArrowException, ValueError) as exc:
                problems.append(f"{table.stem}: could not merge the part files ({type(exc).__name__}: {exc})")
        fields = {"status": status, **summary_fields}
        rejected = {table.stem: table.rejected for table in (self.requests, self.timeseries) if table.rejected}
        if rejected:
            fields["rows_rejected"] = rejected
            problems.append(
                "rows left out as holding a value out of range: "
                + ", ".join(f"{count} {stem}" for stem, count in rejected.items())
            )
        if problems:
            error = "; ".join(([error] if error else []) + problems)
        if error is not None:
            fields["error"] = error
        self.write_summary(fields)


# -- reading ---------------------------------------------------------------------------------
@dataclass
class RunData:
    """A saved run: its config, summary and tables."""

    run_id: str
    folder: Path
    config: dict[str, Any]
    summary: RunEntry
    requests: pd.DataFrame
    timeseries: pd.DataFrame


_NUMBER, _INTEGER, _TEXT, _FLAG, _MAPPING = "a number", "an integer", "text", "true or false", "an object"
# The summary fields the CLI and the pages read, and the JSON type each must have (or null).
SUMMARY_FIELDS: dict[str, str] = {
    **dict.fromkeys(
        (
            "run_id",
            "status",
            "engine",
            "scheduler",
            "workload",
            "started_at",
            "finished_at",
            "arrival_process",
            "sweep_id",
            "notes",
            "error",
        ),
        _TEXT,
    ),
    **dict.fromkeys(
        ("schema_version", "instances", "requests", "requests_total", "completed", "failed", "slo_met", "preemptions"),
        _INTEGER,
    ),
    **dict.fromkeys(
        (
            "arrival_rate_rps",
            "started_at_unix_s",
            "slo_attainment",
            "G",
            "goodput_rps",
            "request_throughput_rps",
            "output_throughput_tps",
            "total_throughput_tps",
            "duration_s",
            "wall_time_s",
        ),
        _NUMBER,
    ),
    **dict.fromkeys(
        ("slos", "slo_attainment_by_task", "ttft_s", "tpot_s", "e2e_s", "queue_s", "itl_s", "writer"), _MAPPING
    ),
    "synthetic": _FLAG,
}
_NUMBER_MAPPINGS = ("slo_attainment_by_task", "ttft_s", "tpot_s", "e2e_s", "queue_s", "itl_s")


#: Per kind, the exact types (JSON's) :func:`_has_type` accepts without a closer look.
_PLAIN_TYPES: dict[str, tuple[type, ...]] = {
    _TEXT: (str,),
    _FLAG: (bool,),
    _MAPPING: (dict,),
    _NUMBER: (int, float),
    _INTEGER: (int,),
}


def _has_type(value: Any, kind: str) -> bool:
    if value is None:
        return True
    if kind == _TEXT:
        return isinstance(value, str)
    if kind == _FLAG:
        return isinstance(value, bool)
    if kind == _MAPPING:
        return isinstance(value, dict)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return kind == _NUMBER or isinstance(value, int) or (math.isfinite(value) and value == int(value))


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def summary_problem(summary: Any) -> str | None:
    """Why ``summary`` (parsed summary.json) is not a usable run summary, or None."""
    if not isinstance(summary, dict):
        return f"summary.json holds {type(summary).__name__ if summary is not None else 'null'}, not an object"
    for name, kind in SUMMARY_FIELDS.items():
        value = summary.get(name)
        if value is None or type(value) in _PLAIN_TYPES[kind]:  # what JSON gives: no call needed
            continue
        if not _has_type(value, kind):
            return f"summary.json: {name} is {_shown(value)}; expected {kind}"
    for name in _NUMBER_MAPPINGS:
        for key, value in (summary.get(name) or {}).items():
            if not _has_type(value, _NUMBER):
                return f"summary.json: {name}.{key} is {_shown(value)}; expected a number"
    for key, value in (summary.get("slos") or {}).items():
        if not isinstance(value, str):
            return f"summary.json: slos.{key} is {_shown(value)}; expected text"
    run_id = summary.get("run_id")
    if run_id is not None and not RUN_ID_PATTERN.match(run_id):
        return f"summary.json: run_id {_shown(run_id)} is not a run id"
    status = summary.get("status")
    if status not in STATUSES:
        return f"summary.json: status is {_shown(status)}; expected one of {', '.join(STATUSES)}"
    return None


def read_json_file(path: Path, max_bytes: int | None = SUMMARY_MAX_BYTES) -> Any:
    """The JSON value in ``path``; SchedlabError naming the file and what is wrong with it
    (FileNotFoundError passes through). ``max_bytes``: larger files are refused unread (None: no
    limit)."""
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise SchedlabError(f"{path}: is a folder, expected a JSON file")
        if max_bytes is not None and size > max_bytes:
            raise SchedlabError(f"{path}: {size} bytes, too large for a run's JSON file")
        text = path.read_bytes().decode("utf-8")
        return json.loads(text)
    except FileNotFoundError:
        raise
    except UnicodeDecodeError as exc:
        raise SchedlabError(f"{path}: not valid UTF-8 (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise SchedlabError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise SchedlabError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise SchedlabError(f"{path}: nested too deeply to be a run's JSON file") from None
    except OSError as exc:
        raise SchedlabError(f"{path}: unreadable ({exc.strerror or exc})") from None


def read_json_object(path: Path, max_bytes: int | None = SUMMARY_MAX_BYTES) -> dict[str, Any]:
    """The JSON object in ``path``; SchedlabError naming the file when it is missing, unreadable,
    not UTF-8 JSON, larger than ``max_bytes`` (None: no limit) or not an object (the one reader
    of schedlab's own JSON files)."""
    try:
        data = read_json_file(path, max_bytes)
    except FileNotFoundError:
        raise SchedlabError(f"{path}: missing (is this a schedlab run folder?)") from None
    if not isinstance(data, dict):
        raise SchedlabError(f"{path}: holds {type(data).__name__ if data is not None else 'null'}, not an object")
    return data


def read_table(
    folder: Path, stem: str, columns: dict[str, pa.DataType], read: Callable[[Path], pa.Table] | None = None
) -> pd.DataFrame:
    """Rows of ``<stem>``: the merged file once the run has ended, else every part so far. A run
    may merge (and delete) its parts while they are listed; the read is then tried again.
    ``read`` reads one file (the live view passes a cached reader). A file that is not a
    readable table raises SchedlabError naming it. A column of ``columns`` that the file lacks
    (written by an older schema version) is added as nulls of its type. ``read`` None:
    :func:`pyarrow.parquet.read_table`."""
    import pyarrow as pa

    if read is None:
        import pyarrow.parquet as pq

        read = pq.read_table
    for _ in range(3):
        try:
            merged = folder / f"{stem}.parquet"
            if merged.exists():
                return _with_columns(_read_one(read, merged).to_pandas(), columns)
            parts = sorted(folder.glob(f"{stem}.part-*.parquet"))
            if parts:
                return _with_columns(pa.concat_tables([_read_one(read, part) for part in parts]).to_pandas(), columns)
            break
        except FileNotFoundError:
            continue
    return empty_frame(columns)


def _with_columns(frame: pd.DataFrame, columns: dict[str, pa.DataType]) -> pd.DataFrame:
    """``frame`` with each of ``columns`` it lacks added as nulls (dtype as a saved table's), in
    the contract's column order (a version may add columns between older ones' places, e.g. the
    time series' engine_* of version 3 before version 7's prefix-cache counters); columns the
    contract does not know stay after them."""
    missing = [name for name in columns if name not in frame.columns]
    if not missing:
        return frame
    import pandas as pd
    import pyarrow as pa

    nulls = pa.table({name: pa.nulls(len(frame), columns[name]) for name in missing}).to_pandas()
    nulls.index = frame.index
    joined = pd.concat([frame, nulls], axis=1)
    extra = [name for name in frame.columns if name not in columns]
    return joined[[*columns, *extra]]


def empty_frame(columns: dict[str, pa.DataType]) -> pd.DataFrame:
    """A table with no rows and the given columns (dtypes as a saved table would have)."""
    return _schema(columns).empty_table().to_pandas()


def _read_one(read: Callable[[Path], pa.Table], path: Path) -> pa.Table:
    import pyarrow as pa

    try:
        return read(path)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SchedlabError(f"{path}: not a readable table ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= 160 else text[:157] + "..."


_ROW_COUNTS: dict[tuple[str, int, int], int] = {}


def _footer_rows(path: Path) -> int:
    """Rows in the parquet file ``path``, from its footer: what ``pyarrow.parquet.read_metadata``
    gives (same errors), through the reader it wraps, without its file-system lookup (a third of
    the time of listing runs: issue 28)."""
    try:
        from pyarrow._parquet import ParquetReader
    except ImportError:  # a pyarrow without it: the public call
        import pyarrow.parquet as pq

        return pq.read_metadata(path).num_rows
    reader = ParquetReader()
    reader.open(str(path))
    try:
        return reader.metadata.num_rows
    finally:
        reader.close()


def _file_rows(path: Path) -> int:
    """Rows in one parquet file, from its footer (kept by path, size and mtime)."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _ROW_COUNTS:
        if not S_ISREG(stat.st_mode):  # Path.is_file of the same stat
            raise SchedlabError(f"{path}: not a file")
        import pyarrow as pa

        try:
            rows = _footer_rows(path)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise SchedlabError(f"{path.name}: not a readable table ({_first_line(exc)})") from None
        if len(_ROW_COUNTS) > 4096:
            _ROW_COUNTS.clear()
        _ROW_COUNTS[key] = rows
    return _ROW_COUNTS[key]


def count_rows(folder: Path, stem: str) -> int:
    """Rows of ``<stem>`` so far (the merged file, else the parts), from the files' footers."""
    for _ in range(3):
        try:
            merged = folder / f"{stem}.parquet"
            if os.path.lexists(merged):
                return _file_rows(merged)
            return sum(_file_rows(part) for part in folder.glob(f"{stem}.part-*.parquet"))
        except FileNotFoundError:  # merged away while counted
            continue
    return 0


def _is_run_folder(folder: Path) -> bool:
    """Whether a folder holds (the start of) a run: summary.json, config.json or row files."""
    return any(os.path.lexists(folder / name) for name in ("summary.json", "config.json")) or any(
        folder.glob("requests*.parquet")
    )


def _is_empty(folder: Path) -> bool:
    try:
        return not any(folder.iterdir())
    except OSError:
        return False


def _problem_record(run_id: str, status: str, problem: str) -> RunEntry:
    return RunEntry(run_id=run_id, status=status, problem=problem)


def _validation_problem(exc: ValidationError) -> str:
    """One line for the first field of summary.json that does not fit :class:`RunSummary`."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "the summary"
    return f"summary.json: {where} is {_shown(error.get('input'))}; {error['msg'].lower()}"


def inspect_run(folder: Path) -> RunEntry:
    """The entry of one run folder, as :func:`list_runs` gives it: the summary (run_id = the
    folder name; status ``interrupted`` when its writer is gone; ``rows`` = request rows so far),
    or one with only ``run_id``, ``status`` (``damaged`` | ``incomplete``) and ``problem`` (why)."""
    name = folder.name
    if folder.is_symlink():
        return _problem_record(
            name, DAMAGED, f"{folder} is a symbolic link; a run folder must be a real folder inside the results folder"
        )
    try:
        summary = read_json_file(folder / "summary.json")
    except FileNotFoundError:
        return _problem_record(name, INCOMPLETE, "no summary.json (the run never started, or its folder was cut short)")
    except SchedlabError as exc:
        if (folder / "summary.json").is_file() and _size(folder / "summary.json") == 0:
            return _problem_record(name, INCOMPLETE, "summary.json is empty")
        return _problem_record(name, DAMAGED, str(exc).replace(str(folder) + os.sep, ""))
    problem = summary_problem(summary)
    if problem is not None:
        return _problem_record(name, DAMAGED, problem)
    fields = {**summary, "run_id": name}
    try:
        fields["rows"] = count_rows(folder, "requests")
        count_rows(folder, "timeseries")
    except SchedlabError as exc:
        return _problem_record(name, DAMAGED, str(exc))
    gone = writer_gone(summary)
    if gone is not None:
        fields["status"] = INTERRUPTED
        fields["error"] = f"interrupted: {gone}; {fields['rows']} request rows kept"
    try:
        return RunEntry.model_validate(fields)
    except ValidationError as exc:
        return _problem_record(name, DAMAGED, _validation_problem(exc))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def results_folder(root: str | Path) -> Path:
    """The results folder, resolved; SchedlabError when it exists but is not a folder."""
    try:
        base = Path(root).resolve()
        if base.exists() and not base.is_dir():
            raise SchedlabError(f"{root}: not a folder; expected the results folder (--out)")
    except OSError as exc:
        raise SchedlabError(f"{root}: unusable as the results folder ({exc.strerror or exc})") from None
    return base


def folder_entries(base: Path) -> list[str]:
    """Names directly inside the results folder (none when it does not exist)."""
    try:
        with os.scandir(base) as entries:
            return [entry.name for entry in entries]
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SchedlabError(f"{base}: cannot read the results folder ({exc.strerror or exc})") from None


def _run_names(base: Path) -> list[str]:
    """Names of the run folders (and run-like entries) in ``base``: valid ids only."""
    names = []
    try:
        with os.scandir(base) as listing:  # the entries' types come with the listing: no stat each
            entries = list(listing)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SchedlabError(f"{base}: cannot read the results folder ({exc.strerror or exc})") from None
    for entry in entries:
        name = entry.name
        if not RUN_ID_PATTERN.match(name):
            continue
        try:
            link, folder = entry.is_symlink(), entry.is_dir()
        except OSError:
            link, folder = False, False
        path = base / name
        if link or (folder and (_is_run_folder(path) or _is_empty(path))):
            names.append(name)  # an empty folder: a run cut short before its first file (incomplete)
    return names


def _is_listed_run(base: Path, name: str) -> bool:
    """Whether :func:`_run_names` would list ``name`` (a valid id), checked on that entry alone:
    an entry of exactly that name, a link or a run folder (or an empty one). Reading one run of a
    study of n members inspected all n folders (issue 42: n^2 for the Results page's study)."""
    path = base / name
    try:
        if name not in os.listdir(base):  # the entry's own name, as the listing compares it
            return False
        if path.is_symlink():
            return True
        return path.is_dir() and (_is_run_folder(path) or _is_empty(path))
    except OSError:
        return False  # the listing decides


def resolve_run_folder(root: str | Path, run: str, allow_path: bool = False) -> Path:
    """The folder of ``run``: a run id, or a unique id prefix, inside ``root`` (compared with the
    names of its entries, never as a path or pattern). With ``allow_path`` (read-only commands)
    a path to a run folder is also accepted when ``run`` names no run inside ``root``."""
    base = results_folder(root)
    if isinstance(run, str) and RUN_ID_PATTERN.match(run):
        if _is_listed_run(base, run):  # an exact id: no need to inspect every other folder
            return _checked(base, run)
        names = _run_names(base)
        if run in names:
            return _checked(base, run)
        matches = sorted(name for name in names if name.startswith(run))
        if len(matches) == 1:
            return _checked(base, matches[0])
        if len(matches) > 1:
            raise SchedlabError(f"run {run!r} is ambiguous in {base}: {', '.join(matches)}")
    if allow_path and isinstance(run, str) and run.strip():
        candidate = Path(run)
        try:
            if candidate.is_dir() and _is_run_folder(candidate):
                return candidate
        except OSError:  # a name too long to be a folder, or unreachable: not a run folder
            pass
    if not isinstance(run, str) or not RUN_ID_PATTERN.match(run):
        raise SchedlabError(
            f"run {_shown(run)} is not a run id (letters, digits, '.', '_' or '-'; see "
            "'python -m runners list')" + (" nor a run folder" if allow_path else "")
        )
    raise SchedlabError(f"run {run!r} not found in {base} (see 'python -m runners list')")


def _checked(base: Path, name: str) -> Path:
    folder = base / name
    if folder.is_symlink():
        raise SchedlabError(
            f"{folder} is a symbolic link; schedlab reads, renames and deletes only real run "
            "folders inside the results folder (remove the link yourself)"
        )
    return folder


def entry_fields(entry: RunEntry) -> dict[str, Any]:
    """A listed run as plain values, as the Results page offers it for download: summary.json's
    fields in the file's order (fields this version does not declare last, as they are written),
    then what reading added: ``rows`` (request rows saved) and, for an interrupted run, the
    ``error`` that says so. Python values, so ``json.dumps`` of it writes the file's own values."""
    fields = entry.model_dump(mode="python", exclude_unset=True)
    added = {"rows": fields.pop("rows")} if "rows" in fields else {}
    if entry.status == INTERRUPTED and "error" in fields:
        added["error"] = fields.pop("error")
    return {**fields, **added}


def read_summary(folder: Path) -> RunEntry:
    """The checked summary of the run in ``folder`` (see :func:`inspect_run`); SchedlabError, one
    line, when the run is damaged or incomplete."""
    record = inspect_run(folder)
    if record.status in (DAMAGED, INCOMPLETE):
        raise SchedlabError(f"run {folder.name!r} is {record.status}: {record.problem}")
    return record


def load_run(root: str | Path, run: str, allow_path: bool = False) -> RunData:
    """A saved run by id or unique prefix inside ``root`` (or, with ``allow_path``, a folder path).
    A damaged run raises SchedlabError naming the file and what is wrong."""
    folder = resolve_run_folder(root, run, allow_path)
    summary = read_summary(folder)
    return RunData(
        run_id=folder.name,
        folder=folder,
        config=read_json_object(folder / "config.json"),
        summary=summary,
        requests=read_table(folder, "requests", request_columns()),
        timeseries=read_table(folder, "timeseries", timeseries_columns()),
    )


def list_runs(root: str | Path = DEFAULT_RESULTS_DIR) -> list[RunEntry]:
    """An entry for every run folder under ``root`` (see :func:`inspect_run`), newest first by
    ``started_at``; damaged and incomplete runs last. SchedlabError when ``root`` is not a folder."""
    base = results_folder(root)
    records = [inspect_run(base / name) for name in sorted(_run_names(base))]
    return sorted(records, key=lambda r: (r.status not in (DAMAGED, INCOMPLETE), str(r.started_at or "")), reverse=True)


def owned_run_folder(root: str | Path, run_id: str, action: str = "delete") -> Path:
    """The folder of run ``run_id`` for ``action`` (delete, rename, replace): the exact id of a
    real folder directly inside the resolved results folder, holding a run (or nothing).
    Anything else, a path, a pattern, a prefix, a symbolic link, raises SchedlabError."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
        raise SchedlabError(
            f"{action}: {_shown(run_id)} is not a run id; expected the exact id of a run in the "
            "results folder (letters, digits, '.', '_' or '-'; see 'python -m runners list'), "
            "never a path or pattern"
        )
    base = results_folder(root)
    names = folder_entries(base)
    if run_id not in names:
        close = sorted(name for name in _run_names(base) if name.startswith(run_id))
        hint = f"; {action} takes the full run id: {', '.join(close)}" if close else " (see 'python -m runners list')"
        raise SchedlabError(f"{action}: run {run_id!r} not found in {base}{hint}")
    folder = base / run_id
    if folder.is_symlink():
        raise SchedlabError(
            f"{action}: {folder} is a symbolic link, not a run folder; schedlab does not {action} "
            "through links (remove the link yourself)"
        )
    if not folder.is_dir() or folder.resolve().parent != base:
        raise SchedlabError(f"{action}: {folder} is not a run folder inside {base}")
    if not _is_run_folder(folder) and any(folder.iterdir()):
        raise SchedlabError(f"{action}: {folder} is not a run folder (no summary.json or config.json)")
    return folder


def deletable_run_folder(root: str | Path, run_id: str) -> Path:
    """The folder of run ``run_id`` if it may be deleted now (see :func:`owned_run_folder`):
    SchedlabError, one line, while the process writing it is alive (deleting it would cost that
    run every row). Damaged, incomplete and interrupted runs may be deleted; so may a ``running``
    run that records no writer (summaries older than the writer record), which cannot be checked."""
    folder = owned_run_folder(root, run_id, "delete")
    if _is_run_folder(folder):
        record = inspect_run(folder)
        writer = record.writer
        if record.status == "running" and writer is not None and writer.pid is not None:
            where = "" if writer.hostname == socket.gethostname() else f" on {_shown(writer.hostname)}"
            raise SchedlabError(
                f"delete: run {run_id!r} is still being written (process {_shown(writer.pid)}{where}); "
                "cancel it or let it finish, then delete it (nothing deleted)"
            )
    return folder


def delete_run(root: str | Path, run_id: str) -> Path:
    """Delete run ``run_id`` (the exact id; see :func:`deletable_run_folder`: never while its
    writer is alive); returns its folder. Damaged, incomplete and interrupted runs can be deleted too."""
    folder = deletable_run_folder(root, run_id)
    try:
        shutil.rmtree(folder)  # never follows links inside; refuses a folder swapped for a link
    except OSError as exc:
        raise SchedlabError(f"delete: {folder}: {exc.strerror or exc}") from None
    return folder


def rename_run(root: str | Path, run_id: str, new_id: str) -> Path:
    """Rename a finished (or interrupted) run: its folder, and the run id inside its config and
    summary. ``run_id`` is the exact id (see :func:`owned_run_folder`)."""
    folder = owned_run_folder(root, run_id, "rename")
    validate_run_id(new_id)
    record = inspect_run(folder)
    if record.status in (DAMAGED, INCOMPLETE):
        raise SchedlabError(
            f"rename: run {run_id!r} is {record.status} ({record.problem}); it can be deleted, not renamed"
        )
    if record.status == "running":
        raise SchedlabError(f"run {run_id!r} is still running; rename it when it has finished")
    target = folder.parent / new_id
    if os.path.lexists(target):
        raise ConfigError("run_id", f"a run named {new_id!r} already exists in {folder.parent}")
    summary = read_json_object(folder / "summary.json")  # as written: a computed status is not saved
    config = read_json_object(folder / "config.json") if (folder / "config.json").is_file() else None
    try:
        folder.rename(target)
    except OSError as exc:
        raise SchedlabError(f"rename: {folder} -> {target}: {exc.strerror or exc}") from None
    if config is not None and isinstance(config.get("config"), dict):
        config["config"]["run_id"] = new_id
        write_json_atomic(target / "config.json", config)
    write_json_atomic(target / "summary.json", {**summary, "run_id": new_id})
    return target
