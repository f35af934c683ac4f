"""Imports of peers' files fast and linear (issue 28): `import --help` loads none of the heavy
modules, the CLI prints what it wrote without reading each run back (that made a file of n
benchmarks quadratic), and AIPerf records read column by column give exactly the runs the
line-by-line reader gives, records it cannot read exactly (errors, missing fields, other units,
warm-up) included, and the same refusal for a bad record."""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runners.imports import aiperf, aiperf_columns
from runners.imports.base import ROW_COLUMNS, ImportFormatError

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "data" / "peer_results"
HEAVY = ("pandas", "pyarrow", "pydantic", "numpy", "scipy", "numba")


def test_import_help_loads_no_heavy_module():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runners", "import", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    modules = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "runners.imports" in modules and "aiperf-records:" in done.stdout
    assert sorted(name for name in modules if name.split(".")[0] in HEAVY) == []


def test_row_columns_are_the_stores_request_columns():
    from runners.store.result_store import REQUEST_COLUMNS

    assert ROW_COLUMNS == tuple(REQUEST_COLUMNS)


def test_cli_prints_what_it_wrote_without_reading_runs_back(tmp_path, monkeypatch, capsys):
    import runners.store.result_store as store
    from runners.imports.cli import command_import

    data = json.loads((PEERS / "guidellm-benchmarks.json").read_text())
    data["benchmarks"] = [copy.deepcopy(data["benchmarks"][0]) for _ in range(3)]
    source = tmp_path / "three.json"
    source.write_text(json.dumps(data))

    def refuse(*args, **kwargs):
        raise AssertionError("load_run called: the import reads every run back")

    monkeypatch.setattr(store, "load_run", refuse)
    arguments = argparse.Namespace(file=str(source), out=str(tmp_path / "r"), name="g", tool=None, tool_version=None)
    assert command_import(arguments) == 0
    lines = capsys.readouterr().out.splitlines()
    heads = [line for line in lines if not line.startswith("  note")]
    assert [line.split(":")[0] for line in heads] == ["g-b0", "g-b1", "g-b2"]
    assert all("imported from GuideLLM" in line and "(40 requests recomputed)" in line for line in heads)
    assert sum(line.startswith("  note tpot_s:") for line in lines) == 6


def _records() -> list[dict]:
    """400 records of every kind the reader meets: errors, warm-up, missing usage or credit,
    other units, no chunk gaps, fractional token counts."""
    bundled = [json.loads(line) for line in (PEERS / "profile_export.jsonl").read_text().splitlines()]
    rng = np.random.default_rng(5)
    records = []
    for index in range(400):
        record = copy.deepcopy(bundled[index % len(bundled)])
        metadata, metrics = record["metadata"], record["metrics"]
        for key in ("credit_issued_ns", "request_start_ns", "request_end_ns"):
            metadata[key] += index * 123_456_789
        metadata["x_request_id"] = f"r{index}"
        metrics["time_to_first_token"]["value"] = float(rng.uniform(0.01, 900))
        metrics["request_latency"]["value"] = metrics["time_to_first_token"]["value"] + float(rng.uniform(0, 5000))
        metrics["inter_chunk_latency"]["value"] = [float(gap) for gap in rng.uniform(0, 80, int(rng.integers(0, 60)))]
        kind = index % 11
        if kind == 1:
            metadata["benchmark_phase"] = "warmup"
        elif kind == 2:
            del metrics["usage_completion_tokens"]
        elif kind == 3:
            del metadata["credit_issued_ns"]
        elif kind == 4:
            record["error"] = {"code": 500, "type": "ServerError", "message": "boom"}
            del metrics["time_to_first_token"]
        elif kind == 5:
            record["error"] = {}
        elif kind == 6:
            del metrics["inter_chunk_latency"]
        elif kind == 7:
            metrics["time_to_first_token"] = {"value": metrics["time_to_first_token"]["value"] / 1000, "unit": "sec"}
        elif kind == 8:
            metrics["inter_chunk_latency"]["unit"] = "us"
        elif kind == 9:
            metrics["input_sequence_length"]["value"] = 1234.7
        records.append(record)
    return records


def _fields(runs):
    [run] = runs
    rows = [
        (t.request_id, t.arrival_s, t.sent_s, t.first_token_s, t.finish_s, t.input_tokens, t.output_tokens, t.error)
        for t in run.requests
    ]
    gaps = [None if t.itl_s is None else [float(gap) for gap in t.itl_s] for t in run.requests]
    return rows, gaps, run.notes, run.started_at_unix_s, run.tool_version


def test_columns_give_the_line_by_line_runs_bit_for_bit(tmp_path):
    records = _records()
    path = tmp_path / "profile_export.jsonl"
    text = "\n".join(json.dumps(record) for record in records) + "\n"
    path.write_text(text)
    table = aiperf_columns.read_table(text.encode())
    assert table is not None and table.num_rows == 400
    fast = aiperf_columns.parse_table(path, text, table)
    slow = aiperf.parse_records(path, [json.loads(line) for line in text.splitlines()])
    assert _fields(fast) == _fields(slow)
    rows = _fields(fast)[0]
    assert (
        len(rows) == 400 - 37 and sum(row[7] is not None for row in rows) == 36
    )  # warm-up left out; errors kept ({} is none)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"metadata": {"request_start_ns": 1}, "metrics": {}}\nnull\n', "a bare null (crashes pyarrow)"),
        ('{"metadata": {"request_start_ns": 1},\n "metrics": {}}\n', "an object over two lines"),
        ('{"metadata": {"request_start_ns": 1}, "metrics": {}}\n\n', "a blank line"),
        ('{"metadata": {"request_start_ns": 1, "request_start_ns": 2}, "metrics": {}}\n', "a duplicated key"),
        ('{"metadata": {"request_start_ns": 1.5}, "metrics": {}}\n', "nanoseconds that are not integers"),
        ('{"metadata": {"request_start_ns": 1, "x": "a\u2028b"}, "metrics": {}}\n', "a line break splitlines sees"),
        ('{"metadata": {"request_start_ns": 1}, "metrics": {}} {"metadata": {}}\n', "two values on a line"),
    ],
)
def test_files_the_columns_cannot_read_exactly_are_left_to_the_line_reader(text, why):
    assert aiperf_columns.read_table(text.encode()) is None, why


def test_a_bad_record_is_refused_as_the_line_reader_refuses_it(tmp_path):
    records = _records()[:30]
    records[13]["metrics"]["inter_chunk_latency"]["value"][0] = None  # a gap that is not a number
    path = tmp_path / "profile_export.jsonl"
    text = "\n".join(json.dumps(record) for record in records)
    path.write_text(text)
    with pytest.raises(ImportFormatError) as line_by_line:
        aiperf.parse_records(path, [json.loads(line) for line in text.splitlines()])
    table = aiperf_columns.read_table(text.encode())
    assert table is not None
    with pytest.raises(ImportFormatError) as columns:
        aiperf_columns.parse_table(path, text, table)
    assert (
        str(columns.value)
        == str(line_by_line.value)
        == (f"{path}: line 14: inter_chunk_latency is not a list of numbers in ms")
    )
