"""The result files as typed records (runners.store.models): every committed result file re-writes
byte for byte through its record, each earlier schema version reads, the published JSON Schemas
are current, and the writers write through the records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.models import (
    EngineRecord,
    JobStatusRecord,
    RunSummary,
    StudyRecord,
    json_schemas,
    record_json,
)

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "tests" / "data" / "records"
SUMMARIES = sorted((ROOT / "results").glob("*/summary.json")) + sorted((ROOT / "tests" / "data").rglob("summary.json"))
STUDIES = sorted((ROOT / "results").glob("*/study.json"))


def test_there_are_committed_files_to_check():
    assert len(SUMMARIES) >= 100 and len(STUDIES) >= 2


@pytest.mark.parametrize("path", SUMMARIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_summary_rewrites_identically(path):
    text = path.read_text()
    assert record_json(RunSummary.model_validate(json.loads(text))) == text


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_study_rewrites_identically(path):
    text = path.read_text()
    assert record_json(StudyRecord.model_validate(json.loads(text))) == text


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
def test_each_earlier_summary_version_reads(version):
    data = json.loads((RECORDS / f"summary.v{version}.json").read_text())
    summary = RunSummary.model_validate(data)
    assert summary.schema_version == version
    assert summary.status == "done" and summary.requests and summary.ttft_s is not None
    assert summary.ttft_s.mean == data["ttft_s"]["mean"]
    if version < 5:
        assert summary.oracle is None  # written before version 5
    if version < 6:
        assert summary.prefix_cache_hit_rate is None and "prefix_cache" not in data  # before version 6
    assert summary.sessions is None and summary.turns is None  # before version 7
    if version < 3:
        assert "not_run" not in summary.model_fields_set
    assert json.loads(record_json(summary)) == data  # nothing lost or changed
    if version <= 2:  # v3 and v4 come from goldens written with sorted keys
        assert record_json(summary) == json.dumps(data, indent=2)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_each_earlier_study_version_reads(version):
    data = json.loads((RECORDS / f"study.v{version}.json").read_text())
    study = StudyRecord.model_validate(data)
    assert study.schema_version == version and study.baseline in study.schedulers
    assert study.oracles == ({} if version == 3 else None)  # absent before version 3
    assert all(run.node is None and run.requests_done is None for run in study.runs)  # added in version 4
    assert study.execution is None or study.execution.resources is None
    metric = next(iter(study.statistics.values()))
    assert study.baseline in metric.schedulers
    if version == 1:
        assert study.config is None and study.writer is None
    else:
        assert study.writer is not None
    assert record_json(study) == json.dumps(data, indent=2)


def test_a_status_file_from_before_versioning_reads_as_version_0():
    old = {
        "state": "running",
        "pid": 12,
        "current": 0,
        "runs": [{"run_id": "r", "status": "running"}],
        "updated_at": 5.5,
    }
    record = JobStatusRecord.model_validate(old)
    assert record.schema_version == 0 and record.runs[0].run_id == "r" and record.error is None


def test_published_schemas_are_current():
    """docs/schemas/ holds each record's JSON Schema as runners.store.models makes it (rewrite
    them with: python -m runners schemas --write docs/schemas)."""
    folder = ROOT / "docs" / "schemas"
    for name, text in json_schemas().items():
        assert (folder / name).read_text() == text, f"docs/schemas/{name} is stale"
    assert sorted(p.name for p in folder.glob("*.schema.json")) == sorted(json_schemas())


def test_a_new_run_and_engine_record_are_written_through_the_records(tmp_path):
    config = parse_config({"workload": {"requests": 6, "seed": 1}, "scheduler": {"name": "fcfs"}})
    outcome = execute_run(config, tmp_path)
    text = (tmp_path / outcome.run_id / "summary.json").read_text()
    summary = RunSummary.model_validate(json.loads(text))
    assert record_json(summary) == text and summary.status == "done" and summary.requests == 6
    assert summary.oracle == [] and list(json.loads(text))[:3] == ["schema_version", "run_id", "engine"]


def test_the_store_reads_summaries_as_records(tmp_path):
    """Readers return the record: list_runs / load_run give RunEntry, with the computed run_id and
    rows, and the file's own fields typed (nested sections are records too)."""
    from runners.store.models import Distribution, RunEntry
    from runners.store.result_store import RunWriter, list_runs, load_run

    writer = RunWriter(tmp_path, "typed", {}, {"engine": "sim", "scheduler": "fcfs"})
    writer.close("done", {"completed": 3, "G": 1.5, "ttft_s": {"mean": 0.25, "p99": 0.5}, "tool_field": 7})
    [entry] = list_runs(tmp_path)
    assert isinstance(entry, RunEntry) and entry.run_id == "typed" and entry.rows == 0 and entry.problem is None
    run = load_run(tmp_path, "typed")
    assert run.summary.completed == 3 and run.summary.G == 1.5 and run.summary.scheduler == "fcfs"
    assert isinstance(run.summary.ttft_s, Distribution) and run.summary.ttft_s.p99 == 0.5
    assert run.summary.ttft_s.median is None and run.summary.tool_field == 7  # kept, not declared


def test_a_summary_the_record_refuses_is_listed_as_damaged(tmp_path):
    """A field of the wrong type that the quick check does not cover (cancelled is a count) makes
    the run damaged, with one line naming the field, and never hides the healthy run beside it."""
    from runners.errors import SchedlabError
    from runners.store.result_store import RunWriter, list_runs, load_run

    for name in ("good", "bad"):
        RunWriter(tmp_path, name, {}, {"started_at": "2026-01-01"}).close("done", {"completed": 1})
    summary = json.loads((tmp_path / "bad" / "summary.json").read_text())
    (tmp_path / "bad" / "summary.json").write_text(json.dumps({**summary, "cancelled": "three"}))
    entries = {entry.run_id: entry for entry in list_runs(tmp_path)}
    assert entries["good"].status == "done" and entries["bad"].status == "damaged"
    assert entries["bad"].problem.startswith("summary.json: cancelled is 'three'; ")
    assert "integer" in entries["bad"].problem
    with pytest.raises(SchedlabError, match="run 'bad' is damaged: summary.json: cancelled is 'three'"):
        load_run(tmp_path, "bad")


def test_engine_record_version_2_reads_without_beliefs_and_version_3_carries_them():
    data = json.loads((RECORDS / "engine.v2.json").read_text())
    record = EngineRecord.model_validate(data)
    assert record.schema_version == 2 and record.instances[0].beliefs is None
    assert record_json(record) == json.dumps(data, indent=2)
    data["schema_version"] = 3
    data["instances"][0]["beliefs"] = {
        "max_num_seqs": {"value": 64, "source": "launch config (--max-num-seqs)"},
        "prefix_caching": {"value": True, "source": "discovered (/metrics cache info)"},
    }
    record = EngineRecord.model_validate(data)
    beliefs = record.instances[0].beliefs
    assert beliefs is not None and beliefs["max_num_seqs"].value == 64
    assert beliefs["max_num_seqs"].source == "launch config (--max-num-seqs)"
    assert record_json(record) == json.dumps(data, indent=2)


def test_a_version_4_study_reads_without_the_side_by_side_fields():
    """Version 5 added each run's finished_at and dedicated and the study's side_by_side."""
    data = json.loads((RECORDS / "study.v4.json").read_text())
    study = StudyRecord.model_validate(data)
    assert study.schema_version == 4 and study.side_by_side is None
    assert all(run.finished_at is None and run.dedicated is None for run in study.runs)
    assert record_json(study) == json.dumps(data, indent=2)
