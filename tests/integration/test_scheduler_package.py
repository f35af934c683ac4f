"""An installed package's scheduler (issue 30): examples/shortest_prompt_package is installed by
pip (offline, into a folder of its own) and its entry point in ``schedlab.schedulers`` makes
``shortest-prompt`` a scheduler like the built-in ones: listed with its parameters, run, and
compared in a study whose worker processes find it too. Nothing in schedlab names it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "examples" / "shortest_prompt_package"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """The environment of a Python in which the example package is installed."""
    work = tmp_path_factory.mktemp("package")
    source = work / "source"
    shutil.copytree(PACKAGE, source)  # pip writes build files beside the source: not into the repository
    site = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation"]
        + ["--target", str(site), str(source)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (site / "schedlab_shortest_prompt" / "policy.py").is_file()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    env.pop("SCHEDLAB_SCHEDULER_PATH", None)
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runners", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_installed_package_is_listed_with_its_parameters(installed):
    listing = _cli(installed, "schedulers")
    assert listing.returncode == 0, listing.stderr
    line = next(line for line in listing.stdout.splitlines() if line.strip().startswith("shortest-prompt"))
    assert "Shortest prompt first (prompt tokens, known at arrival)" in line
    assert "examples/shortest_prompt_package (an installed package's entry point)" in line
    assert "max_in_flight" in listing.stdout and "most requests in flight per instance" in listing.stdout
    # without the package the name is unknown: it comes from the entry point alone
    bare = {**installed, "PYTHONPATH": str(ROOT)}
    assert "shortest-prompt" not in _cli(bare, "schedulers").stdout


def test_the_installed_scheduler_runs_in_a_study_on_worker_processes(installed, tmp_path):
    results = tmp_path / "results"
    done = _cli(
        installed, "run", "--scheduler", "shortest-prompt,fcfs", "--seeds", "2", "--requests", "40",
        "--rate", "8", "--executor", "process", "--workers", "2", "--run-id", "pkg", "--out", str(results),
        "--quiet", "--set", "scheduler.params.max_in_flight=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    study = json.loads((results / "pkg" / "study.json").read_text())
    assert {run["run_id"]: run["status"] for run in study["runs"]} == {
        "pkg-shortest-prompt-s0": "done",
        "pkg-shortest-prompt-s1": "done",
        "pkg-fcfs-s0": "done",
        "pkg-fcfs-s1": "done",
    }
    config = json.loads((results / "pkg-shortest-prompt-s0" / "config.json").read_text())
    assert config["config"]["scheduler"] == {
        "name": "shortest-prompt",
        "params": {"max_in_flight": 2},
        "decide_limit_s": 30.0,
    }
    summary = json.loads((results / "pkg-shortest-prompt-s0" / "summary.json").read_text())
    assert summary["completed"] == 40
