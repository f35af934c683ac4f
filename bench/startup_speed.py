"""What a user waits for at the command line (issue 28): whole-process wall seconds of
``python -m runners --help``, a command's own ``--help``, refusals of bad input, and simulator runs
of 100 and 10,000 requests, each the median (min-max) of ``--repeats`` runs after one warm-up run,
the commands taken in turn (A B C ... A B C ...) so a drift of the machine's speed spreads over all.

Targets: ``--help`` and any refusal of bad input <= 0.3 s; a 100-request run <= 1.0 s; 10,000
requests <= 0.5 s beyond the 100-request run.

    python -m bench.startup_speed [--repeats 7] [--quick]

Writes bench/results/startup_speed.json and .md (``--quick``: one repeat, nothing written: the CI
check that the benchmark still runs).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, markdown_table, write_report

#: (name, arguments after ``python -m runners``, target seconds or None, what the target is)
COMMANDS: tuple[tuple[str, tuple[str, ...], float | None], ...] = (
    ("--help", ("--help",), 0.3),
    ("run --help", ("run", "--help"), 0.3),
    ("import --help", ("import", "--help"), 0.3),
    ("refusal: run --requests abc", ("run", "--requests", "abc"), 0.3),
    ("refusal: run --engine nope", ("run", "--engine", "nope", "--requests", "10"), 0.3),
    ("refusal: run --rate -1", ("run", "--rate", "-1", "--requests", "10"), 0.3),
    ("refusal: run --scheduler nope", ("run", "--scheduler", "nope", "--requests", "10"), 0.3),
    ("refusal: show no-such-run", ("show", "no-such-run"), 0.3),
    ("sim run, 100 requests", ("run", "--requests", "100", "--rate", "4", "--quiet"), 1.0),
    ("sim run, 10,000 requests", ("run", "--requests", "10000", "--rate", "40", "--quiet"), None),
)
#: The 10,000-request run's target: at most this many seconds beyond the 100-request run.
BEYOND_100_S = 0.5


def time_once(arguments: tuple[str, ...], out: Path) -> tuple[float, int]:
    """Wall seconds and exit code of one ``python -m runners ARGUMENTS`` (results into ``out``)."""
    command = [sys.executable, "-m", "runners", *arguments]
    if arguments and arguments[0] in ("run", "show") and "--help" not in arguments:
        command += ["--out", str(out)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start, done.returncode


def measure(repeats: int) -> dict[str, dict[str, Any]]:
    """Per command: every counted run's seconds and the exit codes seen."""
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in COMMANDS}
    codes: dict[str, set[int]] = {name: set() for name, _, _ in COMMANDS}
    with tempfile.TemporaryDirectory() as folder:
        for round_number in range(repeats + 1):  # round 0: the warm-up (imports cached, numba kernels compiled)
            for name, arguments, _ in COMMANDS:
                wall, code = time_once(arguments, Path(folder) / "results")
                codes[name].add(code)
                if round_number:
                    seconds[name].append(wall)
    return {name: {"seconds": seconds[name], "exit_codes": sorted(codes[name])} for name in seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="one repeat, nothing written (CI)")
    args = parser.parse_args(argv)
    figures = measure(1 if args.quick else args.repeats)
    rows: list[list[str]] = []
    commands: dict[str, dict[str, Any]] = {}
    report: dict[str, Any] = {"repeats": 1 if args.quick else args.repeats, "commands": commands}
    medians = {name: statistics.median(entry["seconds"]) for name, entry in figures.items()}
    beyond = medians["sim run, 10,000 requests"] - medians["sim run, 100 requests"]
    for name, _, target in COMMANDS:
        values = figures[name]["seconds"]
        if target is None:
            verdict = f"{beyond:.2f} s beyond 100 requests (target <= {BEYOND_100_S} s): " + (
                "met" if beyond <= BEYOND_100_S else "missed"
            )
        else:
            verdict = f"target <= {target} s: " + ("met" if medians[name] <= target else "missed")
        rows.append([name, f"{medians[name]:.3f}", f"{min(values):.3f}-{max(values):.3f}", verdict])
        commands[name] = {**figures[name], "median_s": medians[name], "target_s": target}
    report["beyond_100_s"] = beyond
    lines = [
        "# Whole-process seconds of the command line (median of paired rounds)",
        "",
        *markdown_table(["command", "median (s)", "min-max (s)", "target"], rows),
    ]
    if args.quick:
        print("\n".join(lines))
        return 0
    write_report("startup_speed", report, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
