"""``bench/import_speed.py --quick`` still runs (issue 28): the smallest GuideLLM and AIPerf files
and ``import --help`` once each, every row printed, nothing written (its timings are not checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_the_import_benchmark_runs_in_quick_mode():
    report = ROOT / "bench" / "results" / "import_speed.json"
    before = report.read_bytes() if report.exists() else None
    done = subprocess.run(
        [sys.executable, "-m", "bench.import_speed", "--quick"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("| import --help |", "| GuideLLM, 75 benchmarks |", "| AIPerf, 25,000 records |"):
        assert name in done.stdout
    assert (report.read_bytes() if report.exists() else None) == before
