"""Importing peers' files (issue 28): whole-process seconds of ``python -m runners import FILE``
for GuideLLM files of 75, 150 and 300 benchmarks (each a copy of the first benchmark of
``tests/data/peer_results/guidellm-benchmarks.json``, 40 requests) and AIPerf
``profile_export.jsonl`` files of 25,000, 50,000 and 100,000 records (the 50 records of
``tests/data/peer_results/profile_export.jsonl`` repeated, each repeat 30 s later with its own
request ids, the aggregate file beside it), plus ``python -m runners import --help``. Median of
``--repeats`` rounds; a round runs every command once, in turn, into fresh results folders, so a
drift of the machine's speed spreads over all sizes.

Targets: 300 benchmarks <= 5 s, 100,000 records <= 5 s, time linear in the file's size (doubling
it about doubles the time), ``import --help`` <= 0.3 s.

    python -m bench.import_speed [--repeats 3] [--quick]

Writes bench/results/import_speed.json and .md (``--quick``: the smallest file of each tool and
``--help`` once, nothing written: the CI check that the benchmark still runs).
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

PEERS = ROOT / "tests" / "data" / "peer_results"
GUIDELLM_SIZES = (75, 150, 300)
AIPERF_SIZES = (25_000, 50_000, 100_000)
TARGET_S = 5.0
HELP_TARGET_S = 0.3


def make_guidellm(folder: Path, benchmarks: int) -> Path:
    """A GuideLLM report of ``benchmarks`` copies of the bundled file's first benchmark."""
    data = json.loads((PEERS / "guidellm-benchmarks.json").read_text())
    data["benchmarks"] = [copy.deepcopy(data["benchmarks"][0]) for _ in range(benchmarks)]
    path = folder / f"guidellm-{benchmarks}.json"
    path.write_text(json.dumps(data))
    return path


def make_aiperf(folder: Path, records: int) -> Path:
    """An AIPerf ``profile_export.jsonl`` of ``records`` records (the bundled 50 repeated, each
    repeat shifted 30 s later with its own ids) and the bundled aggregate file beside it."""
    bundled = [json.loads(line) for line in (PEERS / "profile_export.jsonl").read_text().splitlines() if line.strip()]
    target = folder / f"aiperf-{records}"
    target.mkdir()
    shutil.copyfile(PEERS / "profile_export_aiperf.json", target / "profile_export_aiperf.json")
    path = target / "profile_export.jsonl"
    with path.open("w") as stream:
        for index in range(records):
            record = copy.deepcopy(bundled[index % len(bundled)])
            repeat = index // len(bundled)
            metadata = record["metadata"]
            for key in ("credit_issued_ns", "request_start_ns", "request_ack_ns", "request_end_ns"):
                if isinstance(metadata.get(key), int):
                    metadata[key] += repeat * 30 * 10**9
            metadata["x_request_id"] = f"{metadata.get('x_request_id')}-{repeat}"
            stream.write(json.dumps(record) + "\n")
    return path


def time_import(arguments: list[str], results: Path) -> float:
    """Wall seconds of one ``python -m runners import ARGUMENTS --out RESULTS`` (a fresh folder)."""
    shutil.rmtree(results, ignore_errors=True)
    command = [sys.executable, "-m", "runners", "import", *arguments]
    if "--help" not in arguments:
        command += ["--out", str(results)]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(quick: bool, repeats: int) -> list[dict[str, Any]]:
    """One row per command: its tool, size, file size and seconds of every round."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="schedlab-import-speed-") as folder:
        base = Path(folder)
        sources: list[tuple[str, int, Path | None]] = [("import --help", 0, None)]
        for size in GUIDELLM_SIZES[:1] if quick else GUIDELLM_SIZES:
            sources.append(("GuideLLM", size, make_guidellm(base, size)))
        for size in AIPERF_SIZES[:1] if quick else AIPERF_SIZES:
            sources.append(("AIPerf", size, make_aiperf(base, size)))
        seconds: list[list[float]] = [[] for _ in sources]
        for _ in range(1 if quick else repeats):
            for index, (_, _, source) in enumerate(sources):
                arguments = ["--help"] if source is None else [str(source)]
                seconds[index].append(time_import(arguments, base / "results"))
        for (tool, size, source), times in zip(sources, seconds):
            rows.append(
                {
                    "tool": tool,
                    "size": size,
                    "unit": "benchmarks" if tool == "GuideLLM" else "records" if tool == "AIPerf" else "",
                    "file_mb": source.stat().st_size / 2**20 if source else 0.0,
                    "seconds_median": statistics.median(times),
                    "seconds": times,
                }
            )
    return rows


def doubling(rows: list[dict[str, Any]], tool: str) -> float | None:
    """Seconds of the largest file of ``tool`` over those of the one half its size."""
    sizes = {row["size"]: row["seconds_median"] for row in rows if row["tool"] == tool}
    largest = max(sizes, default=None)
    if largest is None or largest // 2 not in sizes:
        return None
    return sizes[largest] / sizes[largest // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smallest files and --help once, nothing written (CI)")
    args = parser.parse_args(argv)
    rows = measure(args.quick, args.repeats)
    ratios = {tool: doubling(rows, tool) for tool in ("GuideLLM", "AIPerf")}
    report = {
        "repeats": 1 if args.quick else args.repeats,
        "rows": rows,
        "doubling_ratio": ratios,
        "targets_s": {"largest_file": TARGET_S, "import --help": HELP_TARGET_S},
    }
    lines = [
        "# Importing peers' files (whole process, `python -m runners import FILE`)",
        "",
        *markdown_table(
            ["command", "file (MB)", "seconds (median)", "min-max", "target"],
            [
                [
                    row["tool"] if not row["size"] else f"{row['tool']}, {row['size']:,} {row['unit']}",
                    f"{row['file_mb']:.1f}" if row["file_mb"] else "-",
                    f"{row['seconds_median']:.2f}",
                    f"{min(row['seconds']):.2f}-{max(row['seconds']):.2f}",
                    f"<= {HELP_TARGET_S} s"
                    if not row["size"]
                    else (f"<= {TARGET_S:g} s" if row["size"] in (GUIDELLM_SIZES[-1], AIPERF_SIZES[-1]) else ""),
                ]
                for row in rows
            ],
        ),
        "",
        *(
            f"{tool}: doubling the file multiplies the time by {ratio:.2f} (linear: 2; quadratic: 4)."
            for tool, ratio in ratios.items()
            if ratio is not None
        ),
        f"Median of {report['repeats']} round(s); each round runs every command once, in turn.",
    ]
    if args.quick:
        print("\n".join(lines))
    else:
        write_report("import_speed", report, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
