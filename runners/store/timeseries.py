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
    # the prefix cache's counters since the run's start, tokens (version 7+): prompt tokens looked up
    # and found cached; the hit rate over any stretch is the hits' rise over the queries' rise
    prefix_cache_queries_tokens: int | None = None
    prefix_cache_hits_tokens: int | None = None

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


#: The columns a simulated engine's sample fills (:func:`engine_sample_values`), in column order;
#: the others (GPU memory, the in-engine scheduler's decisions) are None in its rows.
ENGINE_SAMPLE_NAMES: tuple[str, ...] = (
    "t_s",
    "instance",
    "kv_usage",
    "running",
    "waiting",
    "preemptions",
    "tokens_per_s",
    "gateway_pending",
    "in_flight",
)
if TIMESERIES_NAMES[: len(ENGINE_SAMPLE_NAMES)] != ENGINE_SAMPLE_NAMES:  # pragma: no cover - a definition error
    raise AssertionError("TimeseriesRow's leading fields must be ENGINE_SAMPLE_NAMES")
#: The columns after those a simulated engine does not fill (GPU memory, the in-engine scheduler's
#: decisions): its prefix-cache counters, which it fills.
PREFIX_CACHE_NAMES: tuple[str, ...] = ("prefix_cache_queries_tokens", "prefix_cache_hits_tokens")
if TIMESERIES_NAMES[-len(PREFIX_CACHE_NAMES) :] != PREFIX_CACHE_NAMES:  # pragma: no cover - a definition error
    raise AssertionError("TimeseriesRow's last fields must be PREFIX_CACHE_NAMES")
_UNSET_TAIL = (None,) * (len(TIMESERIES_NAMES) - len(ENGINE_SAMPLE_NAMES) - len(PREFIX_CACHE_NAMES))


def engine_sample_values(
    t_s: float,
    instance: int,
    kv_usage: float,
    running: int,
    waiting: int,
    preemptions: int,
    tokens_per_s: float,
    gateway_pending: int,
    in_flight: int,
    prefix_queries_tokens: int | None = None,
    prefix_hits_tokens: int | None = None,
) -> tuple:
    """``TimeseriesRow(...).values()`` of a sample with only :data:`ENGINE_SAMPLE_NAMES` and the
    prefix-cache counters (:data:`PREFIX_CACHE_NAMES`, tokens) set (same units), without building the row: the simulator takes one per instance every quarter second
    of simulated time, a million in a long run."""
    return (
        t_s,
        instance,
        kv_usage,
        running,
        waiting,
        preemptions,
        tokens_per_s,
        gateway_pending,
        in_flight,
        *_UNSET_TAIL,
        prefix_queries_tokens,
        prefix_hits_tokens,
    )
