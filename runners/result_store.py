"""The result store: ``results/<run_id>/`` written incrementally and atomically.

Files (the contract in DESIGN.md; columns never change without a schema-version bump):

- ``config.json``: everything needed to rerun the run exactly, plus versions;
- ``summary.json``: status (running | done | failed | cancelled, with ``error``) and metrics,
  rewritten atomically as the run goes;
- ``requests.parquet``: one row per request; while the run goes, rows land in numbered
  ``requests.part-NNNNN.parquet`` files that are merged when the run ends, so a crash keeps
  every flushed row and :func:`load_run` reads the parts when the merged file is missing;
- ``timeseries.parquet``: one row per (sample time, instance), handled the same way.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from runners.errors import ConfigError, SchedlabError

SCHEMA_VERSION = 1
DEFAULT_RESULTS_DIR = Path(os.environ.get("SCHEDLAB_RESULTS_DIR") or Path(__file__).resolve().parents[1] / "results")
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

REQUEST_COLUMNS: dict[str, pa.DataType] = {
    "request_id": pa.string(),
    "task": pa.string(),
    "arrival_s": pa.float64(),
    "dispatch_s": pa.float64(),
    "first_token_s": pa.float64(),
    "finish_s": pa.float64(),
    "input_tokens": pa.int64(),
    "output_tokens": pa.int64(),
    "target_output_tokens": pa.int64(),
    "ttft_s": pa.float64(),
    "tpot_s": pa.float64(),
    "e2e_s": pa.float64(),
    "queue_s": pa.float64(),
    "slo_met": pa.bool_(),
    "instance": pa.int64(),
    "slices": pa.int64(),
    "error": pa.string(),
    "preemptions": pa.int64(),
    "itl_max_s": pa.float64(),
}
TIMESERIES_COLUMNS: dict[str, pa.DataType] = {
    "t_s": pa.float64(),
    "instance": pa.int64(),
    "kv_usage": pa.float64(),
    "running": pa.int64(),
    "waiting": pa.int64(),
    "preemptions": pa.int64(),
    "tokens_per_s": pa.float64(),
    "gateway_pending": pa.int64(),
    "in_flight": pa.int64(),
    "gpu_memory_used_bytes": pa.int64(),
}
STATUSES = ("running", "done", "failed", "cancelled")


def _schema(columns: dict[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, dtype) for name, dtype in columns.items()])


def write_json_atomic(path: Path, data: Any, durable: bool = True) -> None:
    """Write JSON to a temporary file in the same folder, then rename it over ``path``.

    Readers never see a half-written file either way; ``durable`` also fsyncs, which can take
    seconds on a busy disk, so interim summaries skip it.
    """
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(data, stream, indent=2, default=str)
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _write_parquet_atomic(path: Path, table: pa.Table) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, temporary)
    os.replace(temporary, path)


class _PartedTable:
    """Rows buffered in memory and flushed as numbered part files; merged on close."""

    def __init__(self, folder: Path, stem: str, columns: dict[str, pa.DataType]) -> None:
        self.folder = folder
        self.stem = stem
        self.schema = _schema(columns)
        self.buffer: list[dict[str, Any]] = []
        self.parts = 0

    def add(self, row: dict[str, Any]) -> None:
        self.buffer.append(row)

    def flush(self) -> None:
        """Write the buffered rows as the next part. Safe to call from a worker thread while
        the event loop keeps adding rows: the buffer is swapped out before it is written."""
        rows, self.buffer = self.buffer, []
        if not rows:
            return
        number = self.parts
        self.parts += 1
        table = pa.Table.from_pylist(rows, schema=self.schema)
        _write_parquet_atomic(self.folder / f"{self.stem}.part-{number:05d}.parquet", table)

    def merge(self) -> None:
        """Write ``<stem>.parquet`` from all parts and the buffer, then remove the parts."""
        self.flush()
        parts = sorted(self.folder.glob(f"{self.stem}.part-*.parquet"))
        tables = [pq.read_table(part, schema=self.schema) for part in parts]
        merged = pa.concat_tables(tables) if tables else self.schema.empty_table()
        _write_parquet_atomic(self.folder / f"{self.stem}.parquet", merged)
        for part in parts:
            part.unlink(missing_ok=True)


def validate_run_id(run_id: str) -> str:
    if not RUN_ID_PATTERN.match(run_id):
        raise ConfigError("run_id", f"{run_id!r} is not allowed; expected letters, digits, '.', '_' or '-'")
    return run_id


def new_run_id(scheduler: str, engine: str) -> str:
    """``YYYYmmdd-HHMMSS-<scheduler>-<engine>-<4 hex>`` (UTC)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return f"{stamp}-{scheduler}-{engine}-{os.urandom(2).hex()}"


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
        if self.folder.exists():
            raise ConfigError("run_id", f"a run named {run_id!r} already exists in {self.root}")
        self.folder.mkdir(parents=True)
        self.header = {"schema_version": SCHEMA_VERSION, "run_id": run_id, **header}
        self.requests = _PartedTable(self.folder, "requests", REQUEST_COLUMNS)
        self.timeseries = _PartedTable(self.folder, "timeseries", TIMESERIES_COLUMNS)
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self._last_flush = time.monotonic()
        self.closed = False
        write_json_atomic(self.folder / "config.json", {"schema_version": SCHEMA_VERSION, **config})
        self.write_summary({"status": "running"})

    def write_summary(self, fields: dict[str, Any], durable: bool = True) -> None:
        write_json_atomic(self.folder / "summary.json", {**self.header, **fields}, durable)

    def add_request(self, row: dict[str, Any]) -> None:
        self.requests.add(row)

    def add_sample(self, row: dict[str, Any]) -> None:
        self.timeseries.add(row)

    def due(self) -> bool:
        """True when buffered rows should be flushed."""
        pending = len(self.requests.buffer) + len(self.timeseries.buffer)
        return pending >= self.flush_rows or (pending and time.monotonic() - self._last_flush >= self.flush_seconds)

    def flush(self, summary_fields: dict[str, Any] | None = None) -> None:
        self.requests.flush()
        self.timeseries.flush()
        self._last_flush = time.monotonic()
        if summary_fields is not None:
            self.write_summary({"status": "running", **summary_fields}, durable=False)

    def close(self, status: str, summary_fields: dict[str, Any], error: str | None = None) -> None:
        """Merge the parts and write the final summary with ``status`` (and ``error``)."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}")
        self.requests.merge()
        self.timeseries.merge()
        fields = {"status": status, **summary_fields}
        if error is not None:
            fields["error"] = error
        self.write_summary(fields)
        self.closed = True


# -- reading ---------------------------------------------------------------------------------
@dataclass
class RunData:
    """A saved run: its config, summary and tables."""

    run_id: str
    folder: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    requests: pd.DataFrame
    timeseries: pd.DataFrame


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SchedlabError(f"{path}: missing (is this a schedlab run folder?)") from None
    except json.JSONDecodeError as exc:
        raise SchedlabError(f"{path}: not valid JSON ({exc.msg})") from exc


def read_table(
    folder: Path, stem: str, columns: dict[str, pa.DataType], read: Callable[[Path], pa.Table] = pq.read_table
) -> pd.DataFrame:
    """Rows of ``<stem>``: the merged file once the run has ended, else every part so far. A run
    may merge (and delete) its parts while they are listed; the read is then tried again.
    ``read`` reads one file (the live view passes a cached reader)."""
    for _ in range(3):
        try:
            merged = folder / f"{stem}.parquet"
            if merged.exists():
                return read(merged).to_pandas()
            parts = sorted(folder.glob(f"{stem}.part-*.parquet"))
            if parts:
                return pa.concat_tables([read(part) for part in parts]).to_pandas()
            break
        except FileNotFoundError:
            continue
    return _schema(columns).empty_table().to_pandas()


def resolve_run_folder(root: str | Path, run: str) -> Path:
    """The folder of ``run``: a path to a run folder, or a run id (or unique prefix) under ``root``."""
    candidate = Path(run)
    if (candidate / "summary.json").exists():
        return candidate
    base = Path(root)
    if (base / run / "summary.json").exists():
        return base / run
    matches = [p for p in base.glob(f"{run}*") if (p / "summary.json").exists()] if base.exists() else []
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise SchedlabError(f"run {run!r} is ambiguous in {base}: {', '.join(sorted(p.name for p in matches))}")
    raise SchedlabError(f"run {run!r} not found in {base} (see 'python -m runners list')")


def load_run(root: str | Path, run: str) -> RunData:
    folder = resolve_run_folder(root, run)
    return RunData(
        run_id=folder.name,
        folder=folder,
        config=_read_json(folder / "config.json"),
        summary=_read_json(folder / "summary.json"),
        requests=read_table(folder, "requests", REQUEST_COLUMNS),
        timeseries=read_table(folder, "timeseries", TIMESERIES_COLUMNS),
    )


def list_runs(root: str | Path = DEFAULT_RESULTS_DIR) -> list[dict[str, Any]]:
    """Summaries of every run under ``root``, newest first (by ``started_at``)."""
    base = Path(root)
    if not base.exists():
        return []
    summaries = []
    for folder in base.iterdir():
        path = folder / "summary.json"
        if folder.is_dir() and path.exists():
            try:
                summary = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                summary = {"run_id": folder.name, "status": "unreadable"}
            summary.setdefault("run_id", folder.name)
            summaries.append(summary)
    return sorted(summaries, key=lambda s: str(s.get("started_at", "")), reverse=True)


def delete_run(root: str | Path, run: str) -> Path:
    folder = resolve_run_folder(root, run)
    shutil.rmtree(folder)
    return folder


def rename_run(root: str | Path, run: str, new_id: str) -> Path:
    """Rename a finished run: its folder and the run id inside its config and summary."""
    folder = resolve_run_folder(root, run)
    validate_run_id(new_id)
    summary = _read_json(folder / "summary.json")
    if summary.get("status") == "running":
        raise SchedlabError(f"run {folder.name!r} is still running; rename it when it has finished")
    target = folder.parent / new_id
    if target.exists():
        raise ConfigError("run_id", f"a run named {new_id!r} already exists in {folder.parent}")
    folder.rename(target)
    config = _read_json(target / "config.json")
    if isinstance(config.get("config"), dict):
        config["config"]["run_id"] = new_id
        write_json_atomic(target / "config.json", config)
    write_json_atomic(target / "summary.json", {**summary, "run_id": new_id})
    return target
