"""bench/study_speed.py still runs (its quick mode: a tiny study on serial and process, and the
small study once per executor, nothing written); the timings themselves are the benchmark's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_the_study_benchmark_runs_in_quick_mode():
    before = (ROOT / "bench" / "results" / "study_speed.json").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "bench.study_speed", "--quick"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "identical_results        True" in done.stdout
    # the small study: the size rule keeps 4 runs of 20 requests in this process
    assert "'chosen': 'study " in done.stdout and "runs one at a time in this process: a small study" in done.stdout
    assert (ROOT / "bench" / "results" / "study_speed.json").read_bytes() == before  # quick writes nothing
