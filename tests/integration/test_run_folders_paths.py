"""Run folders are addressed by id inside the results folder only (issue 9, items 1, 2, 13).

A sentinel tree surrounds a temporary results folder: a copy of a real run next to it, files
and folders outside it, and a ``good-a/summary.json`` in the current directory. Every critical
command of the issue goes through ``runners.app.cli.main``; nothing outside the results folder may
change, and a refused command exits 2 with one line.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runners.app.cli import main
from runners.errors import SchedlabError
from runners.store import result_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real run folder, made once: `python -m runners run --engine sim --requests 5 --run-id x`."""
    out = tmp_path_factory.mktemp("base") / "res"
    assert main(["run", "--engine", "sim", "--requests", "5", "--run-id", "x", "--out", str(out), "--quiet"]) == 0
    return out / "x"


@pytest.fixture
def tree(tmp_path, real_run, monkeypatch) -> Path:
    """R/res (results: one run, good-a, as in the issue), R/outside-run (a real run),
    R/outside-file.txt, R/other/inner.txt, R/cwd/good-a/summary.json (the current directory)."""
    results = tmp_path / "res"
    results.mkdir()
    shutil.copytree(real_run, results / "good-a")
    shutil.copytree(real_run, tmp_path / "outside-run")
    (tmp_path / "outside-file.txt").write_text("keep me\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "inner.txt").write_text("keep me too\n")
    cwd = tmp_path / "cwd"
    shutil.copytree(real_run, cwd / "good-a")
    (cwd / "notes.txt").write_text("mine\n")
    monkeypatch.chdir(cwd)
    return tmp_path


def snapshot(top: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Every entry under ``top`` except ``skip``: kind, size and content hash."""
    seen: dict[str, tuple] = {}
    for path in sorted(top.rglob("*")):
        if skip is not None and (path == skip or skip in path.parents):
            continue
        if path.is_symlink():
            seen[str(path.relative_to(top))] = ("link", os.readlink(path))
        elif path.is_dir():
            seen[str(path.relative_to(top))] = ("dir",)
        else:
            seen[str(path.relative_to(top))] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return seen


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(code: int, err: str) -> bool:
    return code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def more_runs(tree: Path, *names: str) -> None:
    for name in names:
        shutil.copytree(tree / "res" / "good-a", tree / "res" / name)


@pytest.mark.parametrize(
    "target",
    [
        "../outside-run",
        "ABSOLUTE",
        "../outside-r",
        "../**/outside-run",
        ".",
        "",
        "*",
        "g",
        "?ood-a",
        "[g]ood-a",
        "./good-a",
        "good-a/",
        "good-a/../good-a",
        "..",
        "../res/good-a",
    ],
)
@pytest.mark.parametrize("where", ["cwd", "inside a run folder"])
def test_delete_never_reaches_outside_and_refuses_paths_and_patterns(tree, target, where, monkeypatch, capsys):
    results = tree / "res"
    if target == "ABSOLUTE":
        target = str(tree / "outside-run")
    if where != "cwd":  # `delete .` from inside a run folder deleted the current folder's contents
        monkeypatch.chdir(tree / "cwd" / "good-a")
    before_outside = snapshot(tree, skip=results)
    before_inside = snapshot(results)
    code, out, err = cli(["delete", target, "--out", str(results)], capsys)
    assert refused(code, err), (code, out, err)
    assert snapshot(tree, skip=results) == before_outside
    assert snapshot(results) == before_inside  # a refused delete removes nothing at all


def test_delete_by_id_removes_the_run_in_the_results_folder_not_the_current_directory(tree, capsys):
    results = tree / "res"
    more_runs(tree, "good-b")
    before_outside = snapshot(tree, skip=results)
    code, out, err = cli(["delete", "good-a", "--out", str(results)], capsys)
    assert code == 0 and f"deleted {results.resolve() / 'good-a'}" in out, err
    assert not (results / "good-a").exists() and (results / "good-b" / "summary.json").exists()
    assert snapshot(tree, skip=results) == before_outside  # cwd/good-a is still there
    assert (tree / "cwd" / "good-a" / "summary.json").exists()


def test_delete_wants_the_full_id_and_names_the_candidates(tree, capsys):
    code, _, err = cli(["delete", "good", "--out", str(tree / "res")], capsys)  # a unique prefix is not enough
    assert refused(code, err) and "takes the full run id: good-a" in err
    more_runs(tree, "good-b")
    code, _, err = cli(["delete", "good", "--out", str(tree / "res")], capsys)
    assert refused(code, err) and "good-a, good-b" in err
    assert (tree / "res" / "good-a").exists() and (tree / "res" / "good-b").exists()


def test_a_symlinked_run_folder_is_refused_and_its_target_kept(tree, capsys):
    results = tree / "res"
    (results / "linked").symlink_to(tree / "outside-run", target_is_directory=True)
    before = snapshot(tree, skip=results)
    code, _, err = cli(["delete", "linked", "--out", str(results)], capsys)
    assert refused(code, err) and "symbolic link" in err
    with pytest.raises(SchedlabError, match="symbolic link"):
        result_store.rename_run(results, "linked", "moved")
    code, _, err = cli(["show", "linked", "--out", str(results)], capsys)
    assert refused(code, err) and "symbolic link" in err
    assert snapshot(tree, skip=results) == before and (results / "linked").is_symlink()
    listed = {run.run_id: run for run in result_store.list_runs(results)}
    assert listed["linked"].status == "damaged" and "symbolic link" in listed["linked"].problem


@pytest.mark.parametrize("written_id", ["../outside-run", "ABSOLUTE"])
def test_ids_written_in_summaries_never_address_folders(tree, written_id):
    """The Results page deletes and renames the id list_runs gives, the folder's name; a run_id
    read from summary.json is checked like user input and never becomes a path."""
    results = tree / "res"
    more_runs(tree, "good-b", "ok-run")
    written = str(tree / "outside-run") if written_id == "ABSOLUTE" else written_id
    summary = results / "evil" / "summary.json"
    shutil.copytree(results / "good-b", results / "evil")
    summary.write_text(summary.read_text().replace('"run_id": "x"', f'"run_id": "{written}"'))
    before = snapshot(tree, skip=results)
    records = {run.run_id: run for run in result_store.list_runs(results)}
    assert set(records) == {"good-a", "good-b", "ok-run", "evil"}
    assert records["evil"].status == "damaged" and "run_id" in records["evil"].problem
    with pytest.raises(SchedlabError, match="not renamed"):
        result_store.rename_run(results, "evil", "renamed")
    for direct in (written, "../outside-run", str(tree / "outside-run")):
        with pytest.raises(SchedlabError):
            result_store.delete_run(results, direct)
        with pytest.raises(SchedlabError):
            result_store.rename_run(results, direct, "renamed")
    result_store.delete_run(results, records["evil"].run_id)
    assert not (results / "evil").exists() and not (tree / "renamed").exists()
    assert snapshot(tree, skip=results) == before


def test_rename_stays_inside_the_results_folder(tree):
    results = tree / "res"
    before = snapshot(tree, skip=results)
    for new in ("../moved", str(tree / "moved"), "a/b", ".", ""):
        with pytest.raises(SchedlabError):
            result_store.rename_run(results, "good-a", new)
    target = result_store.rename_run(results, "good-a", "good-c")
    assert target == results.resolve() / "good-c" and (target / "summary.json").exists()
    assert snapshot(tree, skip=results) == before


def test_read_only_commands_still_take_a_folder_path(tree, capsys):
    more_runs(tree, "ok-run")
    code, out, _ = cli(["show", str(tree / "outside-run"), "--out", str(tree / "res")], capsys)
    assert code == 0 and "5 request rows" in out
    code, out, _ = cli(["show", "ok", "--out", str(tree / "res")], capsys)  # unique prefix
    assert code == 0 and "run ok-run" in out
    for bad in ("*", "[g]ood-a", "", "."):
        code, _, err = cli(["show", bad, "--out", str(tree / "res")], capsys)
        assert refused(code, err), (bad, err)


# -- item 13: one line for each path problem -----------------------------------------------------------
@pytest.mark.parametrize("out", ["/dev/null", "FILE", "/proc", "/sys", "LONG"])
def test_run_into_an_unusable_results_folder_is_one_line(out, tmp_path, capsys):
    if out == "FILE":
        out = str(tmp_path / "a-file")
        Path(out).write_text("not a folder\n")
    elif out == "LONG":
        out = str(tmp_path / ("d" * 300))
    elif not Path(out).exists():
        pytest.skip(f"{out} does not exist here")
    code, _, err = cli(["run", "--engine", "sim", "--requests", "5", "--out", out, "--quiet"], capsys)
    assert refused(code, err), err
    assert out in err


def test_list_of_a_file_is_one_line(tmp_path, capsys):
    for out in ("/etc/passwd", str(tmp_path / "plain.txt")):
        Path(tmp_path / "plain.txt").write_text("x\n")
        if not Path(out).exists():
            continue
        code, _, err = cli(["list", "--out", out], capsys)
        assert refused(code, err) and "not a folder" in err and out in err


def test_a_300_character_run_id_is_one_line(results_dir, capsys):
    long_id = "r" * 300
    code, _, err = cli(["run", "--requests", "5", "--run-id", long_id, "--out", str(results_dir), "--quiet"], capsys)
    assert refused(code, err) and "300-character" in err
    for command in (["show", long_id], ["delete", long_id], ["compare", long_id, long_id]):
        code, _, err = cli([*command, "--out", str(results_dir)], capsys)
        assert refused(code, err), (command, err)
    assert list(results_dir.iterdir()) == []


def test_worker_on_a_folder_that_is_not_a_job_is_one_line(tree, capsys):
    results = tree / "res"
    before = snapshot(tree)
    for folder in (results, results / "good-a", tree / "missing", tree / "outside-file.txt"):
        code, _, err = cli(["worker", str(folder), "--results", str(results)], capsys)
        assert refused(code, err) and "not a job folder" in err, err
    bad_job = tree / "bad-job"
    bad_job.mkdir()
    (bad_job / "job.json").write_bytes(b'{"job_id": 5, "runs": []}')
    before = snapshot(tree)
    code, _, err = cli(["worker", str(bad_job), "--results", str(results)], capsys)
    assert refused(code, err) and "job.json: not a valid job" in err, err
    assert snapshot(tree) == before  # nothing written: no status.json


def test_demo_over_a_symlinked_demo_run_is_one_line_and_removes_nothing(tree, capsys):
    results = tree / "res"
    (results / "demo-fcfs-s3").symlink_to(tree / "outside-run", target_is_directory=True)
    shutil.copytree(results / "good-a", results / "demo-static-s0")
    before_outside, before_inside = snapshot(tree, skip=results), snapshot(results)
    code, _, err = cli(["demo", "--out", str(results)], capsys)
    assert refused(code, err) and "symbolic link" in err and "demo-fcfs-s3" in err
    assert snapshot(tree, skip=results) == before_outside
    assert snapshot(results) == before_inside  # checked before anything is removed


def test_the_module_entry_point_prints_one_line(tree):
    """The same through `python -m runners`, as a user runs it."""
    completed = subprocess.run(
        [sys.executable, "-m", "runners", "delete", "../outside-run", "--out", str(tree / "res")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2 and refused(2, completed.stderr), completed.stderr
    assert (tree / "outside-run" / "summary.json").exists()
