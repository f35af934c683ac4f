"""A ``timeseries.parquet`` row: :class:`TimeseriesRow` is its one definition. Its fields are the
file's columns, in order, and their annotations give the Arrow types (:data:`TIMESERIES_COLUMNS`,
derived from it). The drivers sample rows of it; the recorder and the result store write them.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, fields
from operator import attrgetter

import pyarrow as pa


@dataclass(slots=True)
class TimeseriesRow:
    """One instance at one telemetry sample: a row of ``timeseries.parquet``. None: not known (a
    real engine whose ``/metrics`` scrape failed or lacks the figure; no GPU reading; no in-engine
    scheduler)."""

    t_s: float  # seconds since the run's start
    instance: int  # the engine instance's index
    kv_usage: float | None  # fraction of the KV cache in use, 0-1
    running: int | None  # requests the engine is running
    waiting: int | None  # requests queued in the engine
    preemptions: int | None  # engine preemptions since the run's start
    tokens_per_s: float  # output tokens per second since the previous sample
    gateway_pending: int  # requests the policy holds (all instances)
    in_flight: int  # requests dispatched to this instance and not yet back
    gpu_memory_used_bytes: int | None = None  # bytes, all GPUs the monitor sees
    engine_limit: int | None = None  # requests: the in-engine scheduler's running limit
    engine_held_back: int | None = None  # requests its limit kept waiting
    engine_admitted: int | None = None  # requests it moved from waiting to running since the previous sample

    def values(self) -> tuple:
        """The row as a tuple in :data:`TIMESERIES_COLUMNS` order."""
        return _row_values(self)


_ARROW_TYPES: dict[type, pa.DataType] = {float: pa.float64(), int: pa.int64()}


def _arrow_type(annotation: object) -> pa.DataType:
    """The Arrow type of a field annotated ``T`` or ``T | None`` (every column is nullable)."""
    if isinstance(annotation, types.UnionType):
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return _ARROW_TYPES[typing.cast(type, annotation)]


_HINTS = typing.get_type_hints(TimeseriesRow)

#: The ``timeseries.parquet`` columns, in order, with their Arrow types: :class:`TimeseriesRow`'s fields.
TIMESERIES_COLUMNS: dict[str, pa.DataType] = {
    item.name: _arrow_type(_HINTS[item.name]) for item in fields(TimeseriesRow)
}
TIMESERIES_NAMES: tuple[str, ...] = tuple(TIMESERIES_COLUMNS)
_row_values = attrgetter(*TIMESERIES_NAMES)
