"""bench/session_fidelity.py still runs (its --quick mode: one seed, three sessions, nothing
written); the figures are the script's full run, not this test's. Needs ``SCHEDLAB_VLLM_PYTHON``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.real_vllm import needs_vllm

ROOT = Path(__file__).resolve().parents[2]


@needs_vllm
def test_session_fidelity_quick_runs():
    done = subprocess.run(
        [sys.executable, "-m", "bench.session_fidelity", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| hit rate |" in done.stdout and "| TTFT mean, turn 1 |" in done.stdout
