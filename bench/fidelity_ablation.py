"""What the arrival-interference term does to the simulator's fidelity (issue 25): the real runs
of the latest bench/sim_fidelity.py report re-simulated with the bundled profile as fitted and
with its ``serving_overhead.busy_request_engine_s`` set to 0, everything else (requests, arrival
times, seeds, step model) the same. Only the simulator runs: no engine is needed beyond the tiny
model's tokenizer (built by tools/tiny_model.py when missing).

Writes bench/results/fidelity_ablation.{json,md}: per load level and quantity, the mean |error|
and the bias (signed mean error) over the seeds, with and without the term.

Usage: python -m bench.fidelity_ablation [--model /tmp/tiny]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import yaml

from bench.common import write_report
from bench.sim_fidelity import PROFILE, REPORT_JSON, run, workload
from bench.vllm_cpu_common import tiny_model

QUANTITIES = ("ttft_s.mean", "tpot_s.mean", "e2e_s.mean")


def errors(simulated: list[float], real: list[float]) -> dict[str, float]:
    """Mean |error| and bias of ``simulated`` against ``real`` (relative, per seed)."""
    relative = [(s - r) / r for s, r in zip(simulated, real)]
    return {"mean_abs_error": float(np.mean(np.abs(relative))), "bias": float(np.mean(relative))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="the tiny model's folder (built there if missing)")
    args = parser.parse_args()
    report = json.loads(REPORT_JSON.read_text())
    profile = yaml.safe_load(PROFILE.read_text())
    term = profile["serving_overhead"].get("busy_request_engine_s", 0.0)
    without = {**profile, "serving_overhead": {**profile["serving_overhead"], "busy_request_engine_s": 0.0}}
    without.pop("fidelity", None)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        model = tiny_model(Path(args.model) if args.model else folder / "tiny")
        path = folder / "without-term.yaml"
        path.write_text(yaml.safe_dump(without))
        for level in report["levels"]:
            summaries = [
                run(
                    {"kind": "sim", "profile": str(path)},
                    workload(model, report["requests_per_run"], seed, level["rate_rps"]),
                    folder / "runs",
                    3600,
                )
                for seed in level["seeds"]
            ]
            for quantity in QUANTITIES:
                key, statistic = quantity.split(".")
                measured = level["quantities"][quantity]
                zero = [summary[key][statistic] for summary in summaries]
                rows.append(
                    {
                        "level": level["level"],
                        "rate_rps": level["rate_rps"],
                        "quantity": quantity,
                        "with_term": errors(measured["sim"], measured["real"]),
                        "without_term": errors(zero, measured["real"]),
                    }
                )
    lines = [
        "# The arrival-interference term's share of the simulator's error (bench/fidelity_ablation.py)",
        "",
        f"Real runs: bench/results/sim_fidelity.md of {report['date']} (seeds {report['seeds']}); profile "
        f"`{report['profile']}` with busy_request_engine_s = {term * 1000:.2f} ms and with 0. Mean |error| over "
        "the seeds, then the bias (signed mean: negative = the simulator is fast).",
        "",
        "| load | quantity | with the term | without it |",
        "|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            f"{row[side]['mean_abs_error']:.1%} (bias {row[side]['bias']:+.1%})"
            for side in ("with_term", "without_term")
        ]
        lines.append(
            f"| {row['level']:.0%} ({row['rate_rps']:.2f} req/s) | {row['quantity']} | " + " | ".join(cells) + " |"
        )
    write_report(
        "fidelity_ablation",
        {"fidelity_date": report["date"], "busy_request_engine_s": term, "rows": rows},
        lines,
    )


if __name__ == "__main__":
    main()
