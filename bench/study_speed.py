"""Wall time of one study on the simulator, one run at a time vs all cores vs a local Ray (issue 10).

The study: 5 schedulers (fcfs, static, slo-sa, dynamic-mem, dynamic-sla) x 10 seeds x 4 arrival
rates x 1,000 requests (200 runs), project defaults otherwise. It runs once per executor:

- ``serial``: 1 worker, the runs one after the other in this process;
- ``process``: a pool of ``os.cpu_count()`` spawned worker processes (target: speed-up >= 1.8x
  over serial on 2 cores);
- ``ray``: Ray tasks on a local Ray started here (``ray.init(num_cpus=os.cpu_count())``; its
  start-up, a few seconds, is timed apart and not counted in the study's wall time).

Each executor writes the study into its own temporary results folder; the runs' summaries must
agree across executors (the script checks SLO attainment and G of every run and says so).
Results are printed and saved to bench/results/study_speed.json (``--out`` elsewhere).

Usage: python -m bench.study_speed [--seeds 10] [--requests 1000] [--rates 2,4,6,8]
       [--schedulers fcfs,static,slo-sa,dynamic-mem,dynamic-sla] [--executors serial,process,ray]
Smoke run: python -m bench.study_speed --seeds 1 --requests 20 --rates 4 --schedulers fcfs,slo-sa
           --executors serial,process --out /tmp/study_speed.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS

OUT = RESULTS / "study_speed.json"
TARGET_SPEEDUP = 1.8


def study_config(schedulers: list[str], seeds: int, rates: list[float], requests: int) -> dict:
    """The benchmarked study as a config mapping (project defaults otherwise)."""
    return {
        "engine": {"kind": "sim"},
        "run_id": "speed",
        "workload": {"requests": requests, "arrival": {"process": "poisson"}},
        "trials": {"schedulers": schedulers, "seeds": list(range(seeds)), "rates": rates},
    }


def time_study(config: dict, executor: str) -> dict:
    """Run the study with ``executor`` in a fresh results folder: wall time (s) and the runs'
    (status, SLO attainment, G) by run id."""
    from runners.run.config import parse_config
    from runners.store.models import RunSummary
    from runners.study.executors import Execution, choose_execution
    from runners.study.runner import plan_study, run_study

    plan = plan_study(parse_config(config))
    extra: dict = {}
    if executor == "serial":
        execution = Execution("serial", 1, "one at a time")
    elif executor == "ray":
        import ray

        start = time.perf_counter()
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
        extra["ray_start_s"] = round(time.perf_counter() - start, 3)
        execution = choose_execution(plan, executor="ray")
    else:
        execution = choose_execution(plan, executor="process")
    try:
        with tempfile.TemporaryDirectory() as results:
            start = time.perf_counter()
            result = run_study(plan, results, execution=execution)
            wall = time.perf_counter() - start
            runs = {}
            for run in result.record.runs:
                summary = RunSummary.model_validate_json((Path(results) / str(run.run_id) / "summary.json").read_text())
                runs[run.run_id] = [run.status, summary.slo_attainment, summary.G]
    finally:
        if executor == "ray":
            ray.shutdown()
    return {
        "executor": executor,
        "workers": execution.workers or os.cpu_count(),
        "wall_s": round(wall, 3),
        "status": result.record.status,
        **extra,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedulers", default="fcfs,static,slo-sa,dynamic-mem,dynamic-sla")
    parser.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1")
    parser.add_argument("--rates", default="2,4,6,8", help="arrival rates, req/s")
    parser.add_argument("--requests", type=int, default=1000, help="requests per run")
    parser.add_argument(
        "--executors",
        default="serial,process,ray",
        help="which to time, of serial, process, ray (ray needs 'pip install ray')",
    )
    parser.add_argument("--out", default=str(OUT), help="JSON file to write")
    args = parser.parse_args(argv)
    schedulers = [name.strip() for name in args.schedulers.split(",")]
    rates = [float(rate) for rate in args.rates.split(",")]
    executors = [name.strip() for name in args.executors.split(",")]
    config = study_config(schedulers, args.seeds, rates, args.requests)
    timings = [time_study(config, executor) for executor in executors]
    reference = timings[0]["runs"]
    walls = {timing["executor"]: timing["wall_s"] for timing in timings}
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cores": os.cpu_count(),
        "schedulers": schedulers,
        "seeds": args.seeds,
        "rates_rps": rates,
        "requests_per_run": args.requests,
        "runs": len(reference),
        **{f"{timing['executor']}_wall_s": timing["wall_s"] for timing in timings},
        **{f"{timing['executor']}_workers": timing["workers"] for timing in timings},
        **{key: value for timing in timings for key, value in timing.items() if key == "ray_start_s"},
        "statuses": sorted({status for timing in timings for status, *_ in timing["runs"].values()}),
        "identical_results": all(timing["runs"] == reference for timing in timings),
    }
    for executor in ("process", "ray"):
        if "serial" in walls and executor in walls:
            report[f"{executor}_speedup"] = round(walls["serial"] / walls[executor], 2)
    report["speedup_target"] = TARGET_SPEEDUP
    if "process_speedup" in report:
        report["pass"] = report["process_speedup"] >= TARGET_SPEEDUP and report["identical_results"]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for key, value in report.items():
        print(f"{key:24s} {value}")
    print(f"written to {out}")
    return 0 if report["identical_results"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
