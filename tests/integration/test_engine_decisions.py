"""The in-engine schedulers' decisions, read while a run goes (runners.engines.engine_decisions)
and written into the time series (the wall-clock driver's samples, schema version 3), with
hand-made decisions files: no vLLM needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from runners.drivers.wall_clock import WallClockDriver
from runners.engines.engine_decisions import SAMPLE_COLUMNS, DecisionReader, EngineDecisionTracker, decisions_path
from runners.engines.launcher import ServerProcess
from runners.engines.openai_client import Endpoint
from runners.engines.real_config import ClientOptions
from runners.engines.real_engine import RealEngine, RealInstance
from runners.registry import make_policy
from runners.schedulers.vllm import DECISIONS_ENV
from runners.store.recording import RunRecorder
from runners.store.result_store import SCHEMA_VERSION, TIMESERIES_COLUMNS, load_run, read_table

ROOT = Path(__file__).resolve().parents[2]


def decision(step: int, limit: int, admitted: int = 0, held_back: int = 0, **extra) -> dict:
    """A decision as runners/schedulers/vllm/base.py records it (its documented fields)."""
    return {
        "step": step,
        "t": 1_700_000_000.0 + step,
        "limit": limit,
        "b_max": 64,
        "running": limit,
        "waiting": held_back,
        "admitted": admitted,
        "held_back": held_back,
        "preempted": 0,
        "free_blocks": 10,
        "total_blocks": 23,
        "block_size": 128,
        **extra,
    }


def line(record: dict) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def test_a_file_that_appears_late_reads_as_nothing_until_it_exists(tmp_path):
    path = tmp_path / "engine-decisions-0.jsonl"
    reader = DecisionReader(path)
    assert reader.read() == [] and reader.offset == 0
    append(path, line(decision(1, 12, admitted=3)))
    got = reader.read()
    assert [d["limit"] for d in got] == [12] and got[0]["admitted"] == 3
    assert reader.read() == []  # nothing new


def test_a_partial_last_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "d.jsonl"
    first, second = line(decision(1, 8)), line(decision(2, 6, admitted=2))
    append(path, first + second[:17])  # the engine is half-way through writing the second
    reader = DecisionReader(path)
    assert [d["step"] for d in reader.read()] == [1]
    assert reader.offset == len(first.encode())  # only whole lines are consumed
    append(path, second[17:])
    assert [(d["step"], d["limit"]) for d in reader.read()] == [(2, 6)]
    assert reader.offset == len((first + second).encode()) and reader.malformed == 0


def test_malformed_lines_are_skipped_and_counted(tmp_path):
    path = tmp_path / "d.jsonl"
    append(
        path,
        line(decision(1, 5))
        + "{not json\n"
        + "[1, 2]\n"
        + '{"limit": "7"}\n'
        + '{"limit": true}\n'
        + "\n"
        + line(decision(2, 4)),
    )
    with path.open("ab") as handle:
        handle.write(b"\xff\xfe\n")  # not UTF-8
    append(path, line(decision(3, 3)))
    reader = DecisionReader(path)
    assert [d["limit"] for d in reader.read()] == [5, 4, 3]
    assert reader.malformed == 5  # bad JSON, a list, a string limit, a boolean limit, bad bytes; blank lines are not
    assert reader.lines == 9  # the blank one included


def test_a_truncated_file_is_read_again_from_its_start(tmp_path):
    path = tmp_path / "d.jsonl"
    append(path, line(decision(1, 9)) + line(decision(2, 9)))
    reader = DecisionReader(path)
    assert len(reader.read()) == 2
    path.write_text(line(decision(1, 4)))
    assert [d["limit"] for d in reader.read()] == [4]


def test_admissions_between_records_are_counted_exactly_from_the_running_total(tmp_path):
    path = tmp_path / "engine-decisions-0.jsonl"
    tracker = EngineDecisionTracker(path)
    # steps 2-4 admitted 5 requests but were not recorded (unchanged limit within the interval):
    # the running total says so, the per-record counts (1 + 2) would miss them
    append(
        path, line(decision(1, 10, admitted=1, admitted_total=1)) + line(decision(5, 10, admitted=2, admitted_total=8))
    )
    assert tracker.sample()["engine_admitted"] == 8
    append(path, line(decision(9, 12, admitted=0, admitted_total=11)))
    assert tracker.sample()["engine_admitted"] == 3  # 11 - 8: admitted since the previous sample
    assert tracker.sample()["engine_admitted"] == 0


def test_two_instances_are_read_independently(tmp_path):
    paths = [tmp_path / f"engine-decisions-{i}.jsonl" for i in (0, 1)]
    trackers = [EngineDecisionTracker(path) for path in paths]
    append(paths[0], line(decision(1, 10, admitted=4, held_back=2)) + line(decision(2, 8, admitted=1, held_back=5)))
    assert trackers[0].sample() == {"engine_limit": 8, "engine_held_back": 5, "engine_admitted": 5}
    assert trackers[1].sample() == dict.fromkeys(SAMPLE_COLUMNS)  # instance 1 has recorded nothing yet
    append(paths[1], line(decision(1, 3, admitted=3)))
    append(paths[0], line(decision(3, 6, admitted=0, held_back=7)))
    assert trackers[1].sample() == {"engine_limit": 3, "engine_held_back": 0, "engine_admitted": 3}
    assert trackers[0].sample() == {"engine_limit": 6, "engine_held_back": 7, "engine_admitted": 0}
    # no new decision: the latest still holds, nothing admitted since
    assert trackers[0].sample() == {"engine_limit": 6, "engine_held_back": 7, "engine_admitted": 0}


def test_a_decision_missing_optional_fields_still_gives_its_limit(tmp_path):
    path = tmp_path / "d.jsonl"
    append(path, '{"limit": 11}\n' + '{"limit": 9, "admitted": 2.5, "held_back": null}\n')
    assert EngineDecisionTracker(path).sample() == {"engine_limit": 9, "engine_held_back": None, "engine_admitted": 0}


def test_the_path_comes_from_the_servers_environment(tmp_path):
    assert decisions_path({}) is None and decisions_path({DECISIONS_ENV: ""}) is None
    assert (
        decisions_path({DECISIONS_ENV: str(tmp_path / "engine-decisions-1.jsonl")})
        == tmp_path / "engine-decisions-1.jsonl"
    )


# -- the wall-clock driver's sample rows ------------------------------------------------------
def _driver(tmp_path: Path, envs: list[dict[str, str]], scheduler: str) -> WallClockDriver:
    """A driver over launched-server records (never started: only the sample rows are built)."""
    engine = RealEngine(config=None, log_folder=tmp_path)
    for index, env in enumerate(envs):
        server = ServerProcess([], 8000 + index, "127.0.0.1", tmp_path / f"server-{index}.log", env)
        engine.instances.append(RealInstance(index=index, endpoint=Endpoint(server.base_url, "m"), server=server))
    return WallClockDriver(
        engine=engine, policy=make_policy(scheduler), requests=[], recorder=RunRecorder([]), options=ClientOptions()
    )


def test_the_sample_row_carries_each_instances_latest_decision(tmp_path):
    files = [tmp_path / f"engine-decisions-{i}.jsonl" for i in (0, 1)]
    driver = _driver(tmp_path, [{DECISIONS_ENV: str(path)} for path in files], "engine-dynamic-mem")
    append(files[0], line(decision(1, 16, admitted=16)) + line(decision(2, 12, admitted=0, held_back=4)))
    rows = [driver._sample_row(index, None, 0.25) for index in (0, 1)]
    assert {k: getattr(rows[0], k) for k in SAMPLE_COLUMNS} == {
        "engine_limit": 12,
        "engine_held_back": 4,
        "engine_admitted": 16,
    }
    assert {k: getattr(rows[1], k) for k in SAMPLE_COLUMNS} == dict.fromkeys(SAMPLE_COLUMNS)
    append(files[0], "garbage\n" + line(decision(3, 14, admitted=2, held_back=1)))
    append(files[1], line(decision(1, 20, admitted=7)))
    rows = [driver._sample_row(index, None, 0.5) for index in (0, 1)]
    assert [(r.engine_limit, r.engine_held_back, r.engine_admitted) for r in rows] == [(14, 1, 2), (20, 0, 7)]
    assert driver.decisions_malformed == 1
    assert set(SAMPLE_COLUMNS) <= set(TIMESERIES_COLUMNS)


def test_a_server_without_a_decisions_file_gives_null_columns(tmp_path):
    driver = _driver(tmp_path, [{}], "fcfs")
    row = driver._sample_row(0, None, 0.25)
    assert all(getattr(row, column) is None for column in SAMPLE_COLUMNS)
    assert driver.decisions_malformed == 0


# -- the contract: schema version 3, old files still read ------------------------------------
def test_a_simulated_run_writes_null_engine_columns(tmp_path):
    out = tmp_path / "results"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runners",
            "run",
            "--engine",
            "sim",
            "--scheduler",
            "fcfs",
            "--requests",
            "30",
            "--rate",
            "4",
            "--out",
            str(out),
            "--run-id",
            "plain",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    run = load_run(out, "plain")
    assert run.summary.schema_version == SCHEMA_VERSION == 7
    assert list(run.timeseries.columns) == list(TIMESERIES_COLUMNS)
    assert len(run.timeseries) > 0
    for column in SAMPLE_COLUMNS:
        assert run.timeseries[column].isna().all(), column
    stored = pq.read_schema(run.folder / "timeseries.parquet")
    assert all(stored.field(column).type == pa.int64() for column in SAMPLE_COLUMNS)


def test_a_time_series_of_an_older_version_reads_with_the_new_columns_null(tmp_path):
    old = {name: dtype for name, dtype in TIMESERIES_COLUMNS.items() if name not in SAMPLE_COLUMNS}
    table = pa.table(
        {
            name: pa.array([0.25, 0.5] if name == "t_s" else [1, 2] if name == "running" else [None, None], type=dtype)
            for name, dtype in old.items()
        }
    )
    pq.write_table(table, tmp_path / "timeseries.parquet")
    frame = read_table(tmp_path, "timeseries", TIMESERIES_COLUMNS)
    assert list(frame.columns) == list(TIMESERIES_COLUMNS)
    assert frame["running"].tolist() == [1, 2]
    assert all(frame[column].isna().all() for column in SAMPLE_COLUMNS)
    assert isinstance(frame, pd.DataFrame)


def test_a_line_longer_than_a_read_is_skipped_once(tmp_path, monkeypatch):
    monkeypatch.setattr("runners.engines.engine_decisions.READ_LIMIT_BYTES", 64)
    path = tmp_path / "d.jsonl"
    append(path, "x" * 150 + "\n" + '{"limit": 5, "admitted": 1}\n')
    reader = DecisionReader(path)
    got = []
    for _ in range(5):  # a few reads of 64 bytes each get past the long line
        got += reader.read()
    assert [d["limit"] for d in got] == [5]
    assert reader.malformed == 1 and reader.lines == 2


# -- the charts and the live view ---------------------------------------------------------------
def _series(rows: list[tuple]) -> pd.DataFrame:
    """A time series of (t_s, instance, running, engine_limit, engine_held_back) rows, other
    columns null, as a saved table reads."""
    table = pa.table(
        {
            name: pa.array(
                [
                    dict(zip(("t_s", "instance", "running", "engine_limit", "engine_held_back"), row)).get(name)
                    for row in rows
                ],
                type=dtype,
            )
            for name, dtype in TIMESERIES_COLUMNS.items()
        }
    )
    return table.to_pandas()


def test_the_batch_size_chart_draws_the_engine_limit_summed_over_instances(tmp_path):
    from runners.store.result_store import RunData
    from runners.views.charts import batch_size_over_time

    engine = _series([(0.25, 0, 5, 8, 0), (0.25, 1, 3, 6, 2), (0.5, 0, 8, 8, 4), (0.5, 1, 6, 6, 1)])
    plain = _series([(0.25, 0, 4, None, None), (0.5, 0, 7, None, None)])
    runs = [
        RunData("in-engine", tmp_path, {}, {}, pd.DataFrame(), engine),
        RunData("client", tmp_path, {}, {}, pd.DataFrame(), plain),
    ]
    fig = batch_size_over_time(runs)
    traces = {trace.name: trace for trace in fig.data}
    assert set(traces) == {
        "in-engine",
        "in-engine: engine running limit (requests)",
        "in-engine: held back by the engine (requests)",
        "client",
    }
    assert list(traces["in-engine"].y) == [8, 14]
    assert list(traces["in-engine: engine running limit (requests)"].y) == [14, 14]
    assert list(traces["in-engine: held back by the engine (requests)"].y) == [2, 5]
    assert traces["in-engine: engine running limit (requests)"].line.dash == "dash"
    assert traces["in-engine: engine running limit (requests)"].line.color == traces["in-engine"].line.color
    assert list(traces["client"].y) == [4, 7]


def test_the_live_view_shows_the_engine_limit_per_instance_and_as_numbers(tmp_path):
    from runners.views.charts import live_instance_series
    from runners.views.live import latest_engine_state

    series = _series([(0.25, 0, 5, 8, 0), (0.25, 1, 3, None, None), (0.5, 0, 8, 7, 4), (0.5, 1, 6, None, None)])
    fig = live_instance_series(series)
    names = [trace.name for trace in fig.data]
    assert "instance 0: engine running limit (requests)" in names
    assert not any(name.startswith("instance 1:") for name in names)  # instance 1 records no decisions
    limit = next(trace for trace in fig.data if trace.name == "instance 0: engine running limit (requests)")
    assert list(limit.y) == [8, 7]
    latest = series[series["t_s"] == 0.5]
    assert latest_engine_state(latest) == {"engine_limit": 7, "engine_held_back": 4}
    assert latest_engine_state(_series([(0.5, 0, 8, None, None)])) == {}
