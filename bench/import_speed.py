"""Importing a GuideLLM file of many benchmarks (issue 24, item 10): whole-process seconds of
``python -m runners import FILE`` for files of 75, 150 and 300 benchmarks, each a copy of the
first benchmark of ``tests/data/peer_results/guidellm-benchmarks.json`` (40 requests), median of
``--repeats`` runs into fresh results folders. Linear means the time per benchmark stays the same
as the file grows (the file is copied once and hard-linked into each run folder; one copy per run
made it quadratic in the file's size: over 120 s for 300 benchmarks).

    python -m bench.import_speed [--repeats 3]

Writes bench/results/import_speed.json and .md.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, markdown_table, write_report

SIZES = (75, 150, 300)


def make_file(folder: Path, benchmarks: int) -> Path:
    data = json.loads((ROOT / "tests" / "data" / "peer_results" / "guidellm-benchmarks.json").read_text())
    data["benchmarks"] = [copy.deepcopy(data["benchmarks"][0]) for _ in range(benchmarks)]
    path = folder / f"guidellm-{benchmarks}.json"
    path.write_text(json.dumps(data))
    return path


def time_import(source: Path, results: Path) -> float:
    shutil.rmtree(results, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "runners", "import", str(source), "--out", str(results)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="schedlab-import-speed-") as folder:
        base = Path(folder)
        for size in SIZES:
            source = make_file(base, size)
            times = [time_import(source, base / "results") for _ in range(args.repeats)]
            rows.append(
                {
                    "benchmarks": size,
                    "file_mb": source.stat().st_size / 2**20,
                    "seconds_median": statistics.median(times),
                    "seconds": times,
                }
            )
    for row in rows:
        row["seconds_per_benchmark"] = row["seconds_median"] / row["benchmarks"]
    ratio = rows[-1]["seconds_median"] / rows[-2]["seconds_median"]
    report = {"rows": rows, "doubling_ratio_150_to_300": ratio, "repeats": args.repeats}
    lines = [
        "# Importing a GuideLLM file of many benchmarks (whole process)",
        "",
        *markdown_table(
            ["benchmarks", "file (MB)", "seconds (median)", "min-max", "ms per benchmark"],
            [
                [
                    row["benchmarks"],
                    f"{row['file_mb']:.1f}",
                    f"{row['seconds_median']:.2f}",
                    f"{min(row['seconds']):.2f}-{max(row['seconds']):.2f}",
                    f"{1000 * row['seconds_per_benchmark']:.0f}",
                ]
                for row in rows
            ],
        ),
        "",
        f"Doubling 150 -> 300 benchmarks multiplies the time by {ratio:.2f} (linear: 2; quadratic: 4).",
    ]
    write_report("import_speed", report, lines)


if __name__ == "__main__":
    main()
