"""Speed and memory of the simulator (issue 13 section 4 targets), printed and saved to bench/results/.

- simulate 10,000 mixed requests (Poisson 4 req/s) on the Qwen2.5-7B preset with FCFS: the wall
  time of ``execute_run`` (workload building, the discrete-event run, recording, parquet files
  and the summary; Python's start and imports excluded), median of ``--runs`` fresh processes
  (target <= 1 s), and peak resident memory;
- the same for 1,000,000 requests (the stand-ins oversampled, as the builder does), one fresh
  process (target <= 120 s and <= 2 GiB peak resident memory);
- load and mix 10,000 requests from the synthetic stand-in (workload building alone).

Usage: python -m bench.sim_speed [--requests 10000] [--big-requests 1000000] [--runs 5] [--rate 4]
       [--skip-big]
Each measurement runs in a fresh subprocess so peak memory is the run's own. Take timings on a
quiet machine (one measurement at a time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from bench.common import RESULTS, ROOT

TARGET_10K_S = 1.0
TARGET_BIG_S = 120.0
TARGET_BIG_MIB = 2048.0

CHILD = r"""
import json, resource, sys, time
from runners.run.config import parse_config
from runners.run.benchmark import execute_run, prepare_run
mode, requests, rate, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
# a million requests at 4 req/s take ~250,000 simulated seconds, past the default limit of a day
limit = min(max(86_400.0, 4 * requests / rate), 2_000_000.0)
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


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def markdown(report: dict) -> str:
    small, big = report["simulate_fcfs"], report.get("simulate_fcfs_big")
    lines = [
        "# Simulator speed (bench/sim_speed.py)",
        "",
        f"{report['date']}; FCFS, Qwen2.5-7B preset (qwen2.5-7b-2xv100-vllm), Poisson {report['rate_rps']:g} req/s, "
        "synthetic stand-ins. Wall = `execute_run` in a fresh process (Python start and imports excluded).",
        "",
        "| run | wall (s) | peak RSS (MiB) | target | pass |",
        "|---|---|---|---|---|",
        f"| {report['requests']:,} requests, median of {small['runs']} (min-max) | {small['wall_s']['median']} "
        f"({small['wall_s']['min']}-{small['wall_s']['max']}) | {small['peak_rss_mib']} | <= {TARGET_10K_S:g} s | "
        f"{'yes' if small['pass'] else 'NO'} |",
    ]
    if big is not None:
        lines.append(
            f"| {big['requests']:,} requests, 1 run | {big['wall_s']} | {big['peak_rss_mib']} | "
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
    args = parser.parse_args()
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
        run = measure("simulate", args.big_requests, args.rate)
        report["simulate_fcfs_big"] = {
            "requests": args.big_requests,
            "wall_s": round(run["wall_s"], 2),
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
