"""The result files as typed records (runners.store.models): every committed result file re-writes
byte for byte through its record, each earlier schema version reads, the published JSON Schemas
are current, and the writers write through the records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runners.benchmark import execute_run
from runners.config import parse_config
from runners.store.models import (
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


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_each_earlier_summary_version_reads(version):
    data = json.loads((RECORDS / f"summary.v{version}.json").read_text())
    summary = RunSummary.model_validate(data)
    assert summary.schema_version == version
    assert summary.status == "done" and summary.requests and summary.ttft_s is not None
    assert summary.ttft_s.mean == data["ttft_s"]["mean"]
    assert summary.oracle is None  # written before version 5
    if version < 3:
        assert "not_run" not in summary.model_fields_set
    assert json.loads(record_json(summary)) == data  # nothing lost or changed
    if version <= 2:  # v3 and v4 come from goldens written with sorted keys
        assert record_json(summary) == json.dumps(data, indent=2)


@pytest.mark.parametrize("version", [1, 2])
def test_each_earlier_study_version_reads(version):
    data = json.loads((RECORDS / f"study.v{version}.json").read_text())
    study = StudyRecord.model_validate(data)
    assert study.schema_version == version and study.baseline in study.schedulers
    assert study.oracles is None  # absent before version 3
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
