"""One bad run never breaks `list`, `show`, `compare` or the pages (issue 9, item 3).

Each variant corrupts a copy of a real run (made by `python -m runners run --engine sim
--requests 5`) next to two good ones: `list` still works and shows it as damaged (or incomplete)
with the reason, and `show` / `compare` of it give exit 2 and one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runners.app.cli import main
from runners.store import result_store


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("base") / "res"
    assert main(["run", "--engine", "sim", "--requests", "5", "--run-id", "x", "--out", str(out), "--quiet"]) == 0
    return out / "x"


def edit_summary(**fields):
    def change(folder: Path) -> None:
        path = folder / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))

    return change


def write_summary(content: bytes):
    def change(folder: Path) -> None:
        (folder / "summary.json").write_bytes(content)

    return change


def cut_requests(folder: Path) -> None:
    path = folder / "requests.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def summary_is_a_folder(folder: Path) -> None:
    (folder / "summary.json").unlink()
    (folder / "summary.json").mkdir()


def no_summary(folder: Path) -> None:
    (folder / "summary.json").unlink()


DAMAGED = {  # variant: (corruption, words of the reason)
    "list": (write_summary(b"[]"), "holds list, not an object"),
    "string": (write_summary(b'"str"'), "holds str, not an object"),
    "null": (write_summary(b"null"), "holds null, not an object"),
    "invalid-utf8": (write_summary(b'{"run_id": "\xff\xfe", "status": "done"}'), "not valid UTF-8"),
    "invalid-json": (write_summary(b'{"status": "done",'), "not valid JSON"),
    "deep-nesting": (write_summary(b"[" * 10_000 + b"]" * 10_000), "nested too deeply"),
    "deep-nesting-in-a-field": (
        write_summary(b'{"status": "done", "notes": ' + b"[" * 10_000 + b"]" * 10_000 + b"}"),
        "nested too deeply",
    ),
    "started_at-number": (edit_summary(started_at=5), "started_at is 5; expected text"),
    "engine-object": (edit_summary(engine={}), "engine is {}; expected text"),
    "run_id-object": (edit_summary(run_id={"a": 1}), 'run_id is {"a": 1}; expected text'),
    "run_id-path": (edit_summary(run_id="../outside-run"), "run_id '../outside-run' is not a run id"),
    "status-unknown": (edit_summary(status="finished"), "status is 'finished'"),
    "metric-text": (edit_summary(slo_attainment="high"), "slo_attainment is 'high'; expected a number"),
    "nested-metric-text": (edit_summary(e2e_s={"mean": "slow"}), "e2e_s.mean is 'slow'; expected a number"),
    "requests-cut-in-half": (cut_requests, "requests.parquet: not a readable table"),
    "summary-is-a-folder": (summary_is_a_folder, "is a folder, expected a JSON file"),
}
INCOMPLETE = {
    "no-summary": (no_summary, "no summary.json"),
    "empty-summary": (write_summary(b""), "summary.json is empty"),
}


@pytest.fixture
def results(tmp_path, real_run) -> Path:
    folder = tmp_path / "res"
    folder.mkdir()
    for name, started in (
        ("good-a", "2026-01-01T00:00:00Z"),
        ("good-b", "2026-01-02T00:00:00Z"),
        ("bad", "2026-12-31T00:00:00Z"),
    ):  # the damaged run is the newest
        shutil.copytree(real_run, folder / name)
        edit_summary(started_at=started)(folder / name)
    return folder


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("variant", [*DAMAGED, *INCOMPLETE])
def test_a_damaged_run_is_listed_as_such_and_the_rest_still_work(results, variant, capsys):
    corrupt, reason = {**DAMAGED, **INCOMPLETE}[variant]
    state = "damaged" if variant in DAMAGED else "incomplete"
    corrupt(results / "bad")

    records = {run.run_id: run for run in result_store.list_runs(results)}
    assert set(records) == {"good-a", "good-b", "bad"}
    assert records["bad"].status == state and reason in records["bad"].problem, records["bad"]
    assert records["good-a"].status == records["good-b"].status == "done"
    assert records["good-a"].rows == 5

    code, out, err = cli(["list", "--out", str(results)], capsys)
    assert code == 0 and not err
    lines = out.splitlines()
    assert sum(" done " in line for line in lines) == 2
    assert any(line.startswith("bad ") and state in line for line in lines)
    assert any(line.startswith(f"bad: {state}: ") and reason in line for line in lines), out

    for command in (["show", "bad"], ["compare", "good-a", "bad"], ["show", str(results / "bad")]):
        code, out, err = cli([*command, "--out", str(results)], capsys)
        assert code == 2, (command, out, err)
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert f"run 'bad' is {state}" in err, err
    code, out, _ = cli(["compare", "good-a", "good-b", "--out", str(results)], capsys)
    assert code == 0 and "good-b" in out

    result_store.delete_run(results, "bad")  # a damaged run can always be deleted
    assert not (results / "bad").exists()


def test_a_config_that_is_not_an_object_is_one_line(results, capsys):
    (results / "bad" / "config.json").write_text("[1, 2]")
    code, _, err = cli(["show", "bad", "--out", str(results)], capsys)
    assert code == 2 and "config.json: holds list, not an object" in err and len(err.strip().splitlines()) == 1


def test_a_folder_without_run_files_is_not_a_run(results, capsys):
    (results / "notes").mkdir()
    (results / "notes" / "readme.txt").write_text("mine")
    (results / "README.md").write_text("a file")
    assert {run.run_id for run in result_store.list_runs(results)} == {"good-a", "good-b", "bad"}
    code, _, err = cli(["delete", "notes", "--out", str(results)], capsys)
    assert code == 2 and "not a run folder" in err and (results / "notes" / "readme.txt").exists()
