"""The one typed time-series row (runners.store.timeseries.TimeseriesRow) and the schema derived from it."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq

from runners.store import result_store
from runners.store.recording import RunRecorder
from runners.store.result_store import RunWriter
from runners.store.timeseries import TIMESERIES_COLUMNS, TimeseriesRow
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO

# the timeseries.parquet contract of schema version 3, written out once here to pin it
SCHEMA_3 = [
    ("t_s", pa.float64()),
    ("instance", pa.int64()),
    ("kv_usage", pa.float64()),
    ("running", pa.int64()),
    ("waiting", pa.int64()),
    ("preemptions", pa.int64()),
    ("tokens_per_s", pa.float64()),
    ("gateway_pending", pa.int64()),
    ("in_flight", pa.int64()),
    ("gpu_memory_used_bytes", pa.int64()),
    ("engine_limit", pa.int64()),
    ("engine_held_back", pa.int64()),
    ("engine_admitted", pa.int64()),
]
# version 7 added the prefix-cache counters (tokens), after every column of version 3
SCHEMA_7 = [*SCHEMA_3, ("prefix_cache_queries_tokens", pa.int64()), ("prefix_cache_hits_tokens", pa.int64())]


def test_the_derived_columns_are_schema_version_7s():
    assert result_store.SCHEMA_VERSION == 7  # versions 4, 5 and 6 changed summary fields only
    assert list(TIMESERIES_COLUMNS.items()) == SCHEMA_7
    assert list(result_store.TIMESERIES_COLUMNS.items()) == SCHEMA_7  # the store writes the same columns


def test_a_row_gives_its_values_in_column_order():
    row = TimeseriesRow(
        t_s=1.5,
        instance=1,
        kv_usage=0.25,
        running=3,
        waiting=None,
        preemptions=2,
        tokens_per_s=40.0,
        gateway_pending=7,
        in_flight=4,
        engine_limit=9,
    )
    assert row.values() == (1.5, 1, 0.25, 3, None, 2, 40.0, 7, 4, None, 9, None, None, None, None)


def _request(request_id: str) -> Request:
    return Request(request_id, "chat", "hi", 10, 5, 0.0, TaskSLO(ttft_s=1.0))


def test_the_recorder_writes_rows_to_timeseries_parquet_and_counts_preemptions(tmp_path):
    writer = RunWriter(tmp_path, "run", {}, {})
    recorder = RunRecorder([_request("r0")], writer)
    recorder.sample(TimeseriesRow(0.25, 0, 0.5, 2, 1, 3, 80.0, 4, 2))
    recorder.sample(TimeseriesRow(0.25, 1, None, None, None, None, 0.0, 4, 0, gpu_memory_used_bytes=2**30))
    recorder.sample(TimeseriesRow(0.5, 0, 0.75, 3, 0, 5, 120.0, 2, 3))
    assert recorder.preemptions_by_instance == {0: 5}  # the latest count per instance; None is no reading
    writer.close("done", {})
    table = pq.read_table(tmp_path / "run" / "timeseries.parquet")
    assert table.schema == pa.schema([pa.field(name, dtype) for name, dtype in SCHEMA_7])
    rows = table.to_pylist()
    assert rows[0] == {
        "t_s": 0.25,
        "instance": 0,
        "kv_usage": 0.5,
        "running": 2,
        "waiting": 1,
        "preemptions": 3,
        "tokens_per_s": 80.0,
        "gateway_pending": 4,
        "in_flight": 2,
        "gpu_memory_used_bytes": None,
        "engine_limit": None,
        "engine_held_back": None,
        "engine_admitted": None,
        "prefix_cache_queries_tokens": None,
        "prefix_cache_hits_tokens": None,
    }
    assert rows[1]["gpu_memory_used_bytes"] == 2**30 and rows[1]["kv_usage"] is None
    assert [row["t_s"] for row in rows] == [0.25, 0.25, 0.5]
    # the contention summary reads the samples kept in memory: a missing waiting count is NaN
    assert math.isnan(recorder._samples["waiting"][1]) and list(recorder._samples["instance"]) == [0.0, 1.0, 0.0]
