"""The result store: incremental, atomic, crash-safe, and the list / load / delete API."""

from __future__ import annotations

import json

import pytest

from runners.errors import ConfigError, SchedlabError
from runners.store.result_store import SCHEMA_VERSION, RunWriter, delete_run, list_runs, load_run


def row(i: int) -> dict:
    return {"request_id": f"r{i}", "task": "chat", "arrival_s": float(i), "output_tokens": 3, "slo_met": True}


def test_rows_survive_a_crash_before_close(results_dir):
    writer = RunWriter(results_dir, "crashy", {"config": {}}, {"engine": "sim"}, flush_rows=2)
    for i in range(5):
        writer.add_request(row(i))
        if writer.due():
            writer.flush({"completed": i + 1})
    # the process dies here: no close()
    run = load_run(results_dir, "crashy")
    assert list(run.requests["request_id"]) == ["r0", "r1", "r2", "r3"]  # flushed parts are readable
    assert run.summary.status == "running" and run.summary.completed == 4


def test_close_merges_parts_and_records_status(results_dir):
    writer = RunWriter(
        results_dir, "ok", {"config": {"a": 1}}, {"engine": "sim", "started_at": "2026-01-01"}, flush_rows=2
    )
    for i in range(5):
        writer.add_request(row(i))
        writer.add_sample({"t_s": 0.25 * i, "instance": 0, "kv_usage": 0.1 * i})
        if writer.due():
            writer.flush()
    writer.close("cancelled", {"completed": 5}, error="cancelled by the user")
    files = sorted(p.name for p in (results_dir / "ok").iterdir())
    assert files == ["config.json", "requests.parquet", "summary.json", "timeseries.parquet"]
    run = load_run(results_dir, "ok")
    assert len(run.requests) == 5 and len(run.timeseries) == 5
    assert run.summary.status == "cancelled" and run.summary.error == "cancelled by the user"
    assert run.summary.schema_version == SCHEMA_VERSION and run.config["config"] == {"a": 1}


def test_list_load_delete_and_names(results_dir):
    for name, started in [("older", "2026-01-01"), ("newer", "2026-02-01")]:
        RunWriter(results_dir, name, {}, {"started_at": started}).close("done", {})
    assert [s.run_id for s in list_runs(results_dir)] == ["newer", "older"]
    assert load_run(results_dir, "new").run_id == "newer"  # unique prefix
    with pytest.raises(ConfigError, match="already exists"):
        RunWriter(results_dir, "older", {}, {})
    with pytest.raises(ConfigError, match="run_id: '../evil' is not allowed"):
        RunWriter(results_dir, "../evil", {}, {})
    delete_run(results_dir, "older")
    with pytest.raises(SchedlabError, match="run 'older' not found"):
        load_run(results_dir, "older")
    assert list_runs(results_dir / "missing") == []


def test_summary_is_never_half_written(results_dir):
    writer = RunWriter(results_dir, "atomic", {}, {})
    writer.write_summary({"status": "running", "completed": 1})
    leftovers = [p.name for p in (results_dir / "atomic").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    assert json.loads((results_dir / "atomic" / "summary.json").read_text())["completed"] == 1


def test_a_json_number_python_cannot_convert_is_a_named_error_and_a_job_file_reads_as_none(tmp_path):
    """A 5,000-digit integer is valid JSON that Python refuses to convert (ValueError, not a
    JSONDecodeError): one SchedlabError naming the file, and None for a job's files."""
    from runners.app.jobs import read_json_or_none
    from runners.store.result_store import read_json_object

    path = tmp_path / "status.json"
    path.write_text('{"state": ' + "1" * 5000 + "}")
    with pytest.raises(SchedlabError, match="status.json: not valid JSON"):
        read_json_object(path)
    assert read_json_or_none(path) is None


def test_job_files_have_no_size_limit_and_run_files_do(tmp_path):
    from runners.app.jobs import read_json_or_none
    from runners.store import result_store

    path = tmp_path / "job.json"
    path.write_text('{"runs": [' + ", ".join(["1"] * 200) + "]}")
    with pytest.raises(SchedlabError, match="too large"):
        result_store.read_json_object(path, max_bytes=100)
    assert read_json_or_none(path) == {"runs": [1] * 200}
