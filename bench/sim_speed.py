"""Speed and memory of the foundation (issue 2 targets), printed and saved to bench/results/.

- simulate 10,000 mixed requests on the Qwen2.5-7B preset with FCFS: wall time (target < 10 s)
  and peak resident memory (target < 1 GiB);
- load and mix 10,000 requests from the synthetic stand-in (target < 2 s).

Usage: python bench/sim_speed.py [--requests 10000] [--rate 4]
Each measurement runs in a fresh subprocess so peak memory is the run's own.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from runners.config import parse_config
mode, requests, rate, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
config = parse_config({{"workload": {{"requests": requests, "arrival": {{"process": "poisson", "rate": rate}}}},
                        "scheduler": {{"name": "fcfs"}}, "run_id": "bench"}})
start = time.perf_counter()
if mode == "load":
    from runners.benchmark import prepare_run
    prepared = prepare_run(config)
    result = {{"requests": len(prepared.workload.requests)}}
else:
    from runners.benchmark import execute_run
    outcome = execute_run(config, out)
    result = {{"status": outcome.status, "completed": outcome.summary["completed"],
              "simulated_s": outcome.summary["duration_s"], "slo_attainment": outcome.summary["slo_attainment"]}}
result["wall_s"] = time.perf_counter() - start
result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(result))
"""


def measure(mode: str, requests: int, rate: float) -> dict:
    with tempfile.TemporaryDirectory() as out:
        completed = subprocess.run(
            [sys.executable, "-c", CHILD.format(root=str(ROOT)), mode, str(requests), str(rate), out],
            capture_output=True, text=True, check=True,
        )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=4.0)
    args = parser.parse_args()
    load = measure("load", args.requests, args.rate)
    sim = measure("simulate", args.requests, args.rate)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "requests": args.requests,
        "rate_rps": args.rate,
        "load_and_mix_wall_s": round(load["wall_s"], 3),
        "load_and_mix_target_s": 2.0,
        "simulate_fcfs_wall_s": round(sim["wall_s"], 3),
        "simulate_fcfs_target_s": 10.0,
        "simulate_peak_rss_mib": round(sim["peak_rss_mib"], 1),
        "simulate_peak_rss_target_mib": 1024,
        "simulated_duration_s": round(sim["simulated_s"], 1),
        "completed": sim["completed"],
        "slo_attainment": sim["slo_attainment"],
    }
    report["pass"] = (
        report["load_and_mix_wall_s"] < 2.0 and report["simulate_fcfs_wall_s"] < 10.0
        and report["simulate_peak_rss_mib"] < 1024
    )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sim_speed.json").write_text(json.dumps(report, indent=2) + "\n")
    for key, value in report.items():
        print(f"{key:32s} {value}")
    print(f"written to {OUT / 'sim_speed.json'}")


if __name__ == "__main__":
    main()
