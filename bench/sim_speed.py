"""Speed and memory of the simulator (issue 13 section 4, issue 28 targets), printed and saved to bench/results/.

- simulate 10,000 mixed requests (Poisson 4 req/s) on the Qwen2.5-7B preset with FCFS: the wall
  time of ``execute_run`` (workload building, the discrete-event run, recording, parquet files
  and the summary; Python's start and imports excluded), median of ``--runs`` fresh processes
  (target <= 1 s; 0.79 s before issue 28), and peak resident memory;
- 1,000,000 requests (the stand-ins oversampled, as the builder does) as the whole process a user
  waits for, ``python -m runners run --engine sim --requests 1000000 ...`` (start, imports,
  the run, its files; issue 28: <= 30 s and <= 1 GiB peak resident memory), one fresh process,
  with ``execute_run``'s own part (summary.json ``wall_time_s``);
- load and mix 10,000 requests from the synthetic stand-in (workload building alone).

Usage: python -m bench.sim_speed [--requests 10000] [--big-requests 1000000] [--runs 5] [--rate 4]
       [--skip-big] [--quick]
``--quick``: the 10,000-request run once and the whole-process command on 10,000 requests,
nothing written (checks the script works, not its timings). Each measurement runs in a fresh
subprocess so peak memory is the run's own. Take timings on a quiet machine (one measurement at
a time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS, ROOT

TARGET_10K_S = 1.0
TARGET_BIG_S = 30.0  # whole process (issue 28; issue 13's was 120 s of execute_run)
TARGET_BIG_MIB = 1024.0  # peak resident memory of the whole process (issue 13's was 2 GiB)

CHILD = r"""
import json, resource, sys, time
from runners.run.config import parse_config
from runners.run.benchmark import execute_run, prepare_run
mode, requests, rate, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
# a million requests at 4 req/s take ~250,000 simulated seconds, past the default limit of a day
limit = min(max(86_400.0, 4 * requests / rate), 2_000_000.0)  # time_limit()
config = parse_config({{"workload": {{"requests": requests, "arrival": {{"process": "poisson", "rate": rate}}}},
                        "scheduler": {{"name": "fcfs"}}, "run_id": "bench", "max_duration_s": limit}})
start = time.perf_counter()
if mode == "load":
    prepared = prepare_run(config)
    result = {{"requests": len(prepared.workload.requests)}}
else:
    outcome = execute_run(config, out)
    result = {{"status": outcome.status, "completed": outcome.summary.completed,
              "simulated_s": outcome.summary.duration_s, "slo_attainment": outcome.summary.slo_attainment}}
result["wall_s"] = time.perf_counter() - start
result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def measure(mode: str, requests: int, rate: float) -> dict:
    """One fresh process: ``execute_run`` (mode simulate) or ``prepare_run`` (mode load)."""
    with tempfile.TemporaryDirectory() as out:
        completed = subprocess.run(
            [sys.executable, "-c", CHILD.format(), mode, str(requests), str(rate), out],
            cwd=ROOT,  # python -c puts the working folder first on sys.path: runners imports from there
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def time_limit(requests: int, rate: float) -> float:
    """The run's max_duration_s: a million requests at 4 req/s take ~250,000 simulated seconds,
    past the default limit of a day (the same rule as the child of :func:`measure`)."""
    return min(max(86_400.0, 4 * requests / rate), 2_000_000.0)


def measure_command(requests: int, rate: float) -> dict:
    """The whole process ``python -m runners run --engine sim ...`` on ``requests`` requests (FCFS,
    Poisson ``rate``): its wall time (seconds, start to exit), its own peak resident memory (MiB,
    from ``wait4``) and ``execute_run``'s part (summary.json ``wall_time_s``)."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable, "-m", "runners", "run", "--engine", "sim", "--scheduler", "fcfs",
            "--requests", str(requests), "--rate", f"{rate:g}", "--run-id", "bench", "--out", out, "--quiet",
            "--set", f"max_duration_s={time_limit(requests, rate):.0f}",
        ]  # fmt: skip
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {child.returncode}: {stderr[-2000:]}")
        summary = json.loads((Path(out) / "bench" / "summary.json").read_text())
    return {
        "wall_s": wall,
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "execute_run_s": summary["wall_time_s"],
        "status": summary["status"],
        "completed": summary["completed"],
        "simulated_s": summary["duration_s"],
        "slo_attainment": summary["slo_attainment"],
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def markdown(report: dict) -> str:
    small, big = report["simulate_fcfs"], report.get("simulate_fcfs_big")
    lines = [
        "# Simulator speed (bench/sim_speed.py)",
        "",
        f"{report['date']}; FCFS, Qwen2.5-7B preset (qwen2.5-7b-2xv100-vllm), Poisson {report['rate_rps']:g} req/s, "
        "synthetic stand-ins. Wall = `execute_run` in a fresh process (Python start and imports excluded), "
        "except the big run: the whole `python -m runners run` process, start to exit.",
        "",
        "| run | wall (s) | peak RSS (MiB) | target | pass |",
        "|---|---|---|---|---|",
        f"| {report['requests']:,} requests, median of {small['runs']} (min-max) | {small['wall_s']['median']} "
        f"({small['wall_s']['min']}-{small['wall_s']['max']}) | {small['peak_rss_mib']} | <= {TARGET_10K_S:g} s | "
        f"{'yes' if small['pass'] else 'NO'} |",
    ]
    if big is not None:
        lines.append(
            f"| {big['requests']:,} requests, 1 run, whole process `python -m runners run` "
            f"(execute_run {big['execute_run_s']} s) | {big['wall_s']} | {big['peak_rss_mib']} | "
            f"<= {TARGET_BIG_S:g} s, <= {TARGET_BIG_MIB:g} MiB | {'yes' if big['pass'] else 'NO'} |"
        )
    lines.append(
        f"| load and mix {report['requests']:,} requests (workload only) | {report['load_and_mix_wall_s']} | | | |"
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--big-requests", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5, help="fresh processes for the small run (median)")
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--skip-big", action="store_true", help="leave out the big run")
    parser.add_argument(
        "--quick", action="store_true", help="the small run once and the command on it; nothing written"
    )
    args = parser.parse_args()
    if args.quick:
        run = measure("simulate", args.requests, args.rate)
        command = measure_command(args.requests, args.rate)
        print(f"execute_run, {args.requests:,} requests: {run['wall_s']:.3f} s, {run['status']}, "
              f"{run['completed']:,} completed")  # fmt: skip
        print(f"whole process, {args.requests:,} requests: {command['wall_s']:.3f} s, "
              f"peak {command['peak_rss_mib']:.0f} MiB, {command['status']}, {command['completed']:,} completed")  # fmt: skip
        print("quick mode: nothing written")
        return
    load = measure("load", args.requests, args.rate)
    runs = [measure("simulate", args.requests, args.rate) for _ in range(args.runs)]
    small_wall = spread([run["wall_s"] for run in runs])
    small = {
        "runs": args.runs,
        "wall_s": small_wall,
        "peak_rss_mib": round(max(run["peak_rss_mib"] for run in runs), 1),
        "simulated_duration_s": round(runs[0]["simulated_s"], 1),
        "completed": runs[0]["completed"],
        "slo_attainment": runs[0]["slo_attainment"],
        "target_s": TARGET_10K_S,
        "pass": small_wall["median"] <= TARGET_10K_S and all(run["status"] == "done" for run in runs),
    }
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "requests": args.requests,
        "rate_rps": args.rate,
        "load_and_mix_wall_s": round(load["wall_s"], 3),
        "simulate_fcfs": small,
    }
    if not args.skip_big:
        run = measure_command(args.big_requests, args.rate)
        report["simulate_fcfs_big"] = {
            "requests": args.big_requests,
            "measured": "whole process: python -m runners run --engine sim (start to exit, its peak RSS)",
            "wall_s": round(run["wall_s"], 2),
            "execute_run_s": round(run["execute_run_s"], 2),
            "peak_rss_mib": round(run["peak_rss_mib"], 1),
            "simulated_duration_s": round(run["simulated_s"], 1),
            "completed": run["completed"],
            "slo_attainment": run["slo_attainment"],
            "target_s": TARGET_BIG_S,
            "target_peak_rss_mib": TARGET_BIG_MIB,
            "pass": run["status"] == "done" and run["wall_s"] <= TARGET_BIG_S and run["peak_rss_mib"] <= TARGET_BIG_MIB,
        }
    report["pass"] = small["pass"] and report.get("simulate_fcfs_big", {"pass": True})["pass"]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sim_speed.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "sim_speed.md").write_text(markdown(report))
    print(markdown(report))
    print(f"written to {RESULTS / 'sim_speed.json'} and {RESULTS / 'sim_speed.md'}")


if __name__ == "__main__":
    main()
