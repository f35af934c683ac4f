"""Wall time of studies on the simulator (issues 10 and 28): one at a time vs all cores vs a local
Ray, and the executor a study gets when it names none.

The big study: 5 schedulers (fcfs, static, slo-sa, dynamic-mem, dynamic-sla) x 10 seeds x 4
arrival rates x 1,000 requests (200 runs), project defaults otherwise. It runs once per executor:

- ``serial``: 1 worker, the runs one after the other in this process;
- ``process``: a pool of ``os.cpu_count()`` spawned worker processes (target: speed-up >= 1.9x
  over serial on 2 cores);
- ``ray``: Ray tasks on a local Ray started here (``ray.init(num_cpus=os.cpu_count())``; its
  start-up, a few seconds, is timed apart and not counted in the study's wall time).

Each executor writes the study into its own temporary results folder; the runs' summaries must
agree across executors (the script checks SLO attainment and G of every run and says so).

The small study (``--small-repeats``, issue 28: "never slower than serial"): fcfs and slo-sa x 2
seeds x 20 requests as the whole command ``python -m runners run ...`` with ``--executor serial``,
``--executor process`` and no executor named (the size rule of
:func:`runners.study.executors.choose_execution`), taken in turn, median of the repeats.

``--calibrate`` measures the cost model's constants (``runners.study.executors``): seconds per
request and per run from serial runs of 100 and 1,000 requests of each of the study's schedulers
in this process, and a worker's start from a 2-worker pool of 2 tiny runs against the same runs
serially; it prints them beside the constants in use.

Results are printed and saved to bench/results/study_speed.json (``--out`` elsewhere).

Usage: python -m bench.study_speed [--seeds 10] [--requests 1000] [--rates 2,4,6,8]
       [--schedulers fcfs,static,slo-sa,dynamic-mem,dynamic-sla] [--executors serial,process,ray]
       [--small-repeats 5] [--calibrate]
Quick check (CI; writes nothing): python -m bench.study_speed --quick
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
from typing import Any

from bench.common import RESULTS, ROOT

OUT = RESULTS / "study_speed.json"
TARGET_SPEEDUP = 1.9
#: The small study's command (after ``python -m runners``) and the executors compared on it.
SMALL_STUDY = ("run", "--engine", "sim", "--scheduler", "fcfs,slo-sa", "--seeds", "2", "--requests", "20", "--quiet")
SMALL_EXECUTORS: dict[str, tuple[str, ...]] = {
    "serial": ("--executor", "serial"),
    "process": ("--executor", "process"),
    "chosen by size": (),
}


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


def time_small_study(repeats: int) -> dict[str, Any]:
    """Whole-process seconds of :data:`SMALL_STUDY` per executor (median, min, max of ``repeats``
    after one warm-up round, the executors in turn), the executor the size rule chose, and whether
    it was no slower than serial (median within 5%)."""
    seconds: dict[str, list[float]] = {name: [] for name in SMALL_EXECUTORS}
    chosen = ""
    with tempfile.TemporaryDirectory() as folder:
        for round_number in range(repeats + 1):
            for name, flags in SMALL_EXECUTORS.items():
                command = [
                    sys.executable,
                    "-m",
                    "runners",
                    *SMALL_STUDY,
                    *flags,
                    "--out",
                    f"{folder}/{round_number}-{len(flags)}",
                ]
                start = time.perf_counter()
                done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
                wall = time.perf_counter() - start
                if done.returncode != 0:
                    raise SystemExit(f"{' '.join(command)} failed: {done.stderr[-1000:]}")
                if not flags:
                    chosen = done.stdout.splitlines()[0]
                if round_number:
                    seconds[name].append(wall)
    figures = {
        name: {
            "median_s": round(statistics.median(values), 3),
            "min_s": round(min(values), 3),
            "max_s": round(max(values), 3),
        }
        for name, values in seconds.items()
    }
    return {
        "command": "python -m runners " + " ".join(SMALL_STUDY),
        "repeats": repeats,
        "seconds": figures,
        "chosen": chosen,
        "no_slower_than_serial": figures["chosen by size"]["median_s"] <= 1.05 * figures["serial"]["median_s"],
    }


def calibrate(schedulers: list[str]) -> dict[str, float]:
    """The cost model's constants as measured here (seconds; see the module docstring): per
    request and per run from serial runs of 100 and 1,000 requests at 4 req/s, averaged over
    ``schedulers``; a worker's start from a 2-worker pool of 2 tiny runs against the same serially."""
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config
    from runners.study.executors import Execution
    from runners.study.runner import plan_study, run_study

    def serial_run(scheduler: str, requests: int) -> float:
        config = parse_config(
            {
                "engine": {"kind": "sim"},
                "scheduler": {"name": scheduler},
                "workload": {"requests": requests, "arrival": {"rate": 4}},
            }
        )
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            execute_run(config, folder)
            return time.perf_counter() - start

    small, large = [], []
    for scheduler in schedulers:
        serial_run(scheduler, 100)  # warm-up: imports, numba kernels from their cache
        small.append(statistics.median(serial_run(scheduler, 100) for _ in range(3)))
        large.append(statistics.median(serial_run(scheduler, 1000) for _ in range(3)))
    per_request = (statistics.mean(large) - statistics.mean(small)) / 900
    tiny = study_config(["fcfs", "slo-sa"], 1, [4.0], 20)
    walls = {}
    for kind, execution in (("serial", Execution("serial", 1, "")), ("process", Execution("process", 2, ""))):
        plan = plan_study(parse_config(tiny))
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            run_study(plan, folder, execution=execution)
            walls[kind] = time.perf_counter() - start
    return {
        "per_request_s": per_request,
        "run_fixed_s": max(statistics.mean(small) - 100 * per_request, 0.0),
        "worker_start_s": walls["process"] - walls["serial"] / 2,
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
    parser.add_argument("--small-repeats", type=int, default=5, help="repeats of the small study (0: skip it)")
    parser.add_argument("--calibrate", action="store_true", help="measure the executor cost model's constants")
    parser.add_argument("--quick", action="store_true", help="a tiny study on serial and process, once; writes nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.rates, args.requests, args.schedulers = 1, "4", 20, "fcfs,slo-sa"
        args.executors, args.small_repeats = "serial,process", 1
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
    if args.small_repeats:
        report["small_study"] = time_small_study(args.small_repeats)
    if args.calibrate:
        from runners.study.executors import PER_REQUEST_S, RUN_FIXED_S, WORKER_START_S

        report["calibration"] = {
            "measured": calibrate(schedulers),
            "in_use": {"per_request_s": PER_REQUEST_S, "run_fixed_s": RUN_FIXED_S, "worker_start_s": WORKER_START_S},
        }
    for key, value in report.items():
        print(f"{key:24s} {value}")
    if not args.quick:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"written to {out}")
    return 0 if report["identical_results"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
