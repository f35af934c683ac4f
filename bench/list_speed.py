"""``python -m runners list`` of many saved runs, and the refusal of ``show no-such-run`` (issue 28):
whole-process wall seconds, the median (min-max) of ``--repeats`` runs after one warm-up run, the
two commands taken in turn. Targets: ``list`` of 10,000 runs <= 2 s; the refusal <= 0.3 s.

The runs are made cheaply: one 20-request simulator run, copied ``--runs`` times (its parquet files
hard-linked, its summary.json rewritten with the copy's run id and start time), so every folder is
a whole run that ``list`` reads as it reads any (summary, both tables' footers).

    python -m bench.list_speed [--runs 10000] [--repeats 5] [--quick]

Writes bench/results/list_speed.json and .md (``--quick``: 50 runs, one repeat, nothing written:
the CI check that the benchmark still runs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, markdown_table, write_report

#: Seconds each command may take (issue 28).
TARGETS = {"list": 2.0, "refusal: show no-such-run": 0.3}


def make_runs(results: Path, count: int) -> None:
    """``count`` copies of one small simulator run in ``results`` (ids ``run-00000`` ...)."""
    seed_folder = results.parent / "seed"
    subprocess.run(
        [sys.executable, "-m", "runners", "run", "--requests", "20", "--rate", "4", "--run-id", "seed-run"]
        + ["--out", str(seed_folder), "--quiet"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    source = seed_folder / "seed-run"
    summary = json.loads((source / "summary.json").read_text())
    config = (source / "config.json").read_text()
    results.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        run_id = f"run-{index:05d}"
        folder = results / run_id
        folder.mkdir()
        for name in ("requests.parquet", "timeseries.parquet"):
            try:
                os.link(source / name, folder / name)
            except OSError:
                shutil.copyfile(source / name, folder / name)
        started = f"2026-01-01T{index // 3600 % 24:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z"
        (folder / "summary.json").write_text(json.dumps({**summary, "run_id": run_id, "started_at": started}))
        (folder / "config.json").write_text(config)


def time_once(arguments: list[str]) -> tuple[float, int, int]:
    """Wall seconds, exit code and stdout lines of one ``python -m runners ARGUMENTS``."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "runners", *arguments], cwd=ROOT, capture_output=True, text=True, check=False
    )
    return time.perf_counter() - start, done.returncode, len(done.stdout.splitlines())


def measure(runs: int, repeats: int) -> dict[str, dict[str, Any]]:
    """Per command: every counted run's seconds, the exit codes and the lines ``list`` printed."""
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results"
        make_runs(results, runs)
        commands = {
            "list": ["list", "--out", str(results)],
            "refusal: show no-such-run": ["show", "no-such-run", "--out", str(results)],
        }
        figures: dict[str, dict[str, Any]] = {
            name: {"seconds": [], "exit_codes": set(), "lines": set()} for name in commands
        }
        for round_number in range(repeats + 1):  # round 0: the warm-up (files in the page cache)
            for name, arguments in commands.items():
                wall, code, lines = time_once(arguments)
                figures[name]["exit_codes"].add(code)
                figures[name]["lines"].add(lines)
                if round_number:
                    figures[name]["seconds"].append(wall)
    return {
        name: {**entry, "exit_codes": sorted(entry["exit_codes"]), "lines": sorted(entry["lines"])}
        for name, entry in figures.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="50 runs, one repeat, nothing written (CI)")
    args = parser.parse_args(argv)
    runs, repeats = (50, 1) if args.quick else (args.runs, args.repeats)
    figures = measure(runs, repeats)
    report: dict[str, Any] = {"runs": runs, "repeats": repeats, "commands": {}}
    rows = []
    for name, entry in figures.items():
        values = entry["seconds"]
        median = statistics.median(values)
        target = TARGETS[name]
        report["commands"][name] = {**entry, "median_s": median, "target_s": target}
        rows.append(
            [
                name,
                f"{median:.3f}",
                f"{min(values):.3f}-{max(values):.3f}",
                f"<= {target} s: " + ("met" if median <= target else "missed"),
                ", ".join(map(str, entry["exit_codes"])),
            ]
        )
    lines = [
        f"# `list` of {runs:,} saved runs and a refusal, whole-process seconds (median of {repeats} paired rounds)",
        "",
        *markdown_table(["command", "median (s)", "min-max (s)", "target", "exit code"], rows),
    ]
    if args.quick:
        print("\n".join(lines))
        return 0
    write_report("list_speed", report, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
