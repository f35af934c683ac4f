"""Where the test suite's time goes, and how much of the product it covers (issue 42).

Runs the README's test command with ``--durations=0`` (and, with ``--coverage``, pytest-cov over
runners/ and pages/ with pyproject.toml's ``[tool.coverage.run]``: the processes the tests start
are measured too), then writes what it printed, summed:

- the wall time of the whole run, and how many tests passed, failed and were skipped;
- seconds per tier (unit, integration, fuzzing, e2e by folder; the ``e2e`` marker also covers
  real-vLLM tests in other folders, counted under their folder here), per module and per test
  (setup + call + teardown, as pytest reports them; under xdist each worker's tests are timed in
  that worker, so the sums exceed the wall time);
- line coverage of runners/ and pages/ (covered / statements) from coverage's JSON report.

    python -m bench.test_suite --label after --coverage [-- extra pytest arguments]
    python -m bench.test_suite --label before --parse pytest-output.txt --coverage-json cov.json --wall 3600

Writes bench/results/test_suite_<label>.json and .md. Needs SCHEDLAB_VLLM_PYTHON (and Chromium)
for the end-to-end tests to run rather than skip, as in .ci/run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.common import ROOT, markdown_table, write_report

#: A line of pytest's ``--durations`` report: "12.34s call     tests/unit/test_x.py::test_y[a]".
DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S.*?)\s*$")
#: pytest's closing line: "1685 passed, 2 failed, 3 skipped in 3301.22s (0:55:01)".
OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")
#: How many slowest tests and modules the Markdown report lists.
TOP = 40


def per_test(output: str) -> dict[str, float]:
    """Seconds per test id (setup + call + teardown) from pytest's ``--durations=0`` lines."""
    seconds: dict[str, float] = defaultdict(float)
    for line in output.splitlines():
        match = DURATION.match(line)
        if match:
            test_id = match.group(3).split("@")[0]  # xdist's loadgroup appends "@group"
            seconds[test_id] += float(match.group(1))
    return dict(seconds)


def outcomes(output: str) -> dict[str, int]:
    """Counts from pytest's last summary line (passed, failed, skipped, errors ...)."""
    last = [line for line in output.splitlines() if re.search(r"\b(passed|failed)\b.* in [\d.]+s", line)]
    if not last:
        return {}
    return {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in OUTCOME.findall(last[-1])}


def failed_tests(output: str) -> list[str]:
    """The ids pytest's short summary lists as FAILED or ERROR."""
    return [
        line.split(" ", 1)[1].split(" - ")[0] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))
    ]


def tier(test_id: str) -> str:
    """The folder under tests/ a test lives in (unit, integration, fuzzing, e2e)."""
    parts = test_id.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


def coverage_of(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Covered and total statements, and their ratio, of runners/, pages/ and both, from coverage's
    JSON report."""
    sums: dict[str, list[int]] = {"runners": [0, 0], "pages": [0, 0]}
    for path, data in report["files"].items():
        top = Path(path).parts[0]
        if top in sums:
            sums[top][0] += data["summary"]["covered_lines"]
            sums[top][1] += data["summary"]["num_statements"]
    sums["runners + pages"] = [sums["runners"][0] + sums["pages"][0], sums["runners"][1] + sums["pages"][1]]
    return {
        name: {"covered_lines": covered, "statements": total, "percent": round(100 * covered / total, 2)}
        for name, (covered, total) in sums.items()
        if total
    }


def summarise(output: str, wall_s: float, coverage: dict[str, Any] | None, command: list[str]) -> dict[str, Any]:
    tests = per_test(output)
    modules: dict[str, float] = defaultdict(float)
    tiers: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for test_id, seconds in tests.items():
        modules[test_id.split("::")[0]] += seconds
        tiers[tier(test_id)] += seconds
        counts[tier(test_id)] += 1
    return {
        "command": " ".join(command),
        "wall_s": round(wall_s, 1),
        "outcomes": outcomes(output),
        "failed": failed_tests(output),
        "timed_tests": len(tests),
        "summed_test_s": round(sum(tests.values()), 1),
        "tiers": {name: {"tests": counts[name], "seconds": round(s, 1)} for name, s in sorted(tiers.items())},
        "modules": {name: round(s, 2) for name, s in sorted(modules.items(), key=lambda kv: -kv[1])},
        "tests": {name: round(s, 2) for name, s in sorted(tests.items(), key=lambda kv: -kv[1])},
        "coverage": coverage_of(coverage) if coverage else None,
    }


def report_lines(label: str, summary: dict[str, Any]) -> list[str]:
    total = summary["summed_test_s"] or 1.0
    lines = [
        f"# The test suite, {label}",
        "",
        f"`{summary['command']}`: wall {summary['wall_s'] / 60:.1f} min; {summary['outcomes']}; "
        f"summed test time {total / 60:.1f} min over {summary['timed_tests']} tests.",
    ]
    if summary["failed"]:
        lines += ["", "Failed: " + ", ".join(f"`{name}`" for name in summary["failed"])]
    if summary["coverage"]:
        lines += ["", "## Line coverage", ""]
        lines += markdown_table(
            ["code", "covered lines", "statements", "coverage"],
            [
                (name, c["covered_lines"], c["statements"], f"{c['percent']:.2f}%")
                for name, c in summary["coverage"].items()
            ],
        )
    lines += ["", "## Time by tier (tests/ folder)", ""]
    lines += markdown_table(
        ["tier", "tests", "seconds", "share"],
        [
            (n, t["tests"], f"{t['seconds']:.0f}", f"{100 * t['seconds'] / total:.0f}%")
            for n, t in summary["tiers"].items()
        ],
    )
    lines += ["", f"## The {TOP} slowest modules", ""]
    lines += markdown_table(
        ["module", "seconds", "share"],
        [(n, f"{s:.1f}", f"{100 * s / total:.1f}%") for n, s in list(summary["modules"].items())[:TOP]],
    )
    lines += ["", f"## The {TOP} slowest tests", ""]
    lines += markdown_table(["test", "seconds"], [(n, f"{s:.1f}") for n, s in list(summary["tests"].items())[:TOP]])
    return lines


def run_suite(coverage: bool, extra: list[str]) -> tuple[str, float, dict[str, Any] | None, list[str]]:
    """Run the suite as README.md's test command does, with durations (and coverage)."""
    with tempfile.TemporaryDirectory(prefix="suite-") as scratch:
        cov_json = Path(scratch) / "coverage.json"
        command = [sys.executable, "-m", "pytest", "-q", "--durations=0", "-p", "no:cacheprovider", *extra]
        if coverage:
            command += ["--cov", "--cov-report=term", f"--cov-report=json:{cov_json}"]
        start = time.perf_counter()
        # coverage's data files (the tests' own processes each write one) stay in the scratch folder,
        # not in the repository
        env = {**os.environ, "COVERAGE_FILE": str(Path(scratch) / ".coverage")}
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        report = json.loads(cov_json.read_text()) if coverage and cov_json.exists() else None
    shown = ["python", *command[1:]]
    return done.stdout + done.stderr, wall, report, [c.replace(str(cov_json), "coverage.json") for c in shown]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="names the report: bench/results/test_suite_<label>")
    parser.add_argument("--coverage", action="store_true", help="line coverage of runners/ and pages/")
    parser.add_argument("--parse", type=Path, help="summarise this saved pytest output instead of running")
    parser.add_argument("--coverage-json", type=Path, help="with --parse: coverage's JSON report of that run")
    parser.add_argument("--wall", type=float, help="with --parse: the run's wall seconds")
    parser.add_argument("--command", default="", help="with --parse: the command that ran")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    if args.parse:
        output = args.parse.read_text(errors="replace")
        coverage = json.loads(args.coverage_json.read_text()) if args.coverage_json else None
        wall, command = args.wall or 0.0, args.command.split()
    else:
        output, wall, coverage, command = run_suite(args.coverage, args.pytest_args)
    summary = summarise(output, wall, coverage, command)
    write_report(f"test_suite_{args.label}", summary, report_lines(args.label, summary))


if __name__ == "__main__":
    main()
