"""``bench/client_vs_vllm_bench.py --quick`` still works (issue 28): one round of 16 requests at a
constant 8 req/s from vLLM's ``vllm bench serve`` and from schedlab against one CPU vLLM, the gap
table and the dispatch lag printed, nothing written. It checks that the script runs, not its
timings. Needs the CPU vLLM (``SCHEDLAB_VLLM_PYTHON``, as every real-vLLM test: tests/real_vllm.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.real_vllm import VLLM_PYTHON, needs_vllm

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def _stamps() -> dict[str, float]:
    return {path.name: path.stat().st_mtime for path in RESULTS.glob("client_vs_vllm_bench*")}


@needs_vllm
def test_the_client_benchmark_runs_in_quick_mode():
    before = _stamps()
    done = subprocess.run(
        [sys.executable, "-m", "bench.client_vs_vllm_bench", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, "SCHEDLAB_VLLM_PYTHON": str(VLLM_PYTHON), "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    # both tools ran the constant load and have a gap in the table and in the closing line
    assert re.search(r"\| vllm-bench \| -?\d+ \[", done.stdout), done.stdout[-3000:]
    assert re.search(r"\| schedlab \| -?\d+ \[", done.stdout), done.stdout[-3000:]
    closing = re.search(r"constant 8 req/s: gap .*: vllm-bench ([+-]\d+) ms, schedlab ([+-]\d+) ms", done.stdout)
    assert closing, done.stdout[-3000:]
    # schedlab's dispatch lag (mean / p99, ms) is reported: numbers, not dashes
    assert re.search(r"\| schedlab \|[^\n]*\| \d+\.\d \[[^\]]*\] / \d+\.\d \[", done.stdout), done.stdout[-3000:]
    assert _stamps() == before  # --quick writes nothing
