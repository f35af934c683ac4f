"""Multi-turn sessions, the real CPU vLLM (prefix caching on, its default) against the simulator
with the bundled tiny-CPU profile (issue 31 item 3): per seed, the same sessions (chat stand-in,
Poisson session arrivals, a constant think time, the tiny model's own tokenizer on both sides)
served by each; per turn index, the mean TTFT and E2E of each, and the run's prefix-cache hit rate
(vLLM's /metrics counters against the simulator's). Per quantity: each seed's relative error
(sim / real - 1; the hit rate's difference in points), their mean with a 95% t-interval
(scipy.stats) over the seeds, against the simulator's fidelity target for a mean
(runners/engines/fidelity.py, below saturation). One server for every seed (attached, its prefix
cache reset between runs with POST /reset_prefix_cache, which vLLM serves with
VLLM_SERVER_DEV_MODE=1), so a run finds nothing of the one before.

Usage: python -m bench.session_fidelity [--seeds 3] [--sessions 12] [--rate 1.0] [--refit] [--quick]
Writes bench/results/session_fidelity.{json,md}, with --refit session_fidelity_refit.{json,md} (not with
--quick: one seed, 3 sessions).
Run it under the CPU lock (a few minutes).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from bench.vllm_cpu_common import (
    SERVER_ENV,
    TINY_PROFILE,
    launched_vllm,
    measure_engine_steps,
    reset_prefix_cache,
    tiny_model,
)
from runners.engines.fidelity import MEAN_TARGET_BELOW_SATURATION
from runners.metrics.seed_statistics import mean_interval
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run

REPORT_JSON = RESULTS / "session_fidelity.json"
REPORT_MD = RESULTS / "session_fidelity.md"
MAX_TURNS = 4
THINK_S = 0.5


def workload(model: Path, sessions: int, seed: int, rate: float) -> dict[str, Any]:
    return {
        "requests": sessions,
        "seed": seed,
        "ratio": {"chat": 1, "code": 0},
        "arrival": {"process": "poisson", "rate": rate},
        "tokenizer": str(model),
        "multi_turn": {"max_turns": MAX_TURNS, "think_time": {"distribution": "constant", "mean_s": THINK_S}},
    }


def measure(engine: dict[str, Any], work: dict[str, Any], out: Path, run_id: str) -> dict[str, Any]:
    """One run's per-turn means (seconds) and hit rate."""
    outcome = execute_run(parse_config({"run_id": run_id, "engine": engine, "workload": work}), out)
    if outcome.status != "done":
        raise SystemExit(f"{run_id}: {outcome.status}: {outcome.error}")
    run = load_run(out, run_id)
    rows = run.requests[run.requests["error"].isna()]
    by_turn = rows.groupby("turn")
    return {
        "hit_rate": run.summary.prefix_cache_hit_rate,
        "ttft_s": {int(turn): float(value) for turn, value in by_turn["ttft_s"].mean().items()},
        "e2e_s": {int(turn): float(value) for turn, value in by_turn["e2e_s"].mean().items()},
        "requests": {int(turn): int(value) for turn, value in by_turn.size().items()},
    }


def interval(values: list[float]) -> dict[str, Any]:
    """Mean and 95% Student t interval of ``values`` (runners.metrics.seed_statistics.mean_interval;
    None bounds for one value)."""
    bounds = mean_interval(values)
    low, high = bounds if bounds is not None else (None, None)
    return {"mean": sum(values) / len(values), "low": low, "high": high, "n": len(values), "values": values}


def compare(real: list[dict[str, Any]], sim: list[dict[str, Any]]) -> dict[str, Any]:
    """Per quantity, the seeds' errors and their interval."""
    rows: dict[str, Any] = {
        "hit_rate_points": interval([100 * (s["hit_rate"] - r["hit_rate"]) for r, s in zip(real, sim)])
    }
    for metric in ("ttft_s", "e2e_s"):
        for turn in range(1, MAX_TURNS + 1):
            errors = [
                s[metric][turn] / r[metric][turn] - 1
                for r, s in zip(real, sim)
                if turn in r[metric] and turn in s[metric] and r[metric][turn] > 0
            ]
            if errors:
                rows[f"{metric} turn {turn}"] = interval(errors)
    return rows


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Multi-turn sessions: simulator vs real CPU vLLM (prefix caching on)",
        "",
        f"{report['date']}; {report['engine']}; profile `{report['profile']}`; {report['workload']}.",
        f"Seeds {report['seeds']}; target for a mean: within {100 * MEAN_TARGET_BELOW_SATURATION:.0f}%.",
        "",
        "| quantity | real (mean over seeds) | sim | error mean | 95% interval | within target |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in report["errors"].items():
        low = "" if row["low"] is None else f"[{row['low']:+.3f}, {row['high']:+.3f}]"
        if name == "hit_rate_points":
            real = sum(r["hit_rate"] for r in report["real"]) / len(report["real"])
            sim = sum(s["hit_rate"] for s in report["sim"]) / len(report["sim"])
            lines.append(f"| hit rate | {100 * real:.1f}% | {100 * sim:.1f}% | {row['mean']:+.2f} pts | {low} | |")
            continue
        metric, _, turn = name.partition(" turn ")
        real = [r[metric][int(turn)] for r in report["real"] if int(turn) in r[metric]]
        sim = [s[metric][int(turn)] for s in report["sim"] if int(turn) in s[metric]]
        ok = "yes" if abs(row["mean"]) <= MEAN_TARGET_BELOW_SATURATION else "no"
        lines.append(
            f"| {metric[:-2].upper()} mean, turn {turn} | {1000 * sum(real) / len(real):.1f} ms | "
            f"{1000 * sum(sim) / len(sim):.1f} ms | {100 * row['mean']:+.1f}% | "
            + (f"[{100 * row['low']:+.1f}, {100 * row['high']:+.1f}]%" if row["low"] is not None else "")
            + f" | {ok} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--rate", type=float, default=1.0, help="session arrivals per second")
    parser.add_argument("--quick", action="store_true", help="one seed, 3 sessions, nothing written")
    parser.add_argument(
        "--refit",
        action="store_true",
        help="measure the server's steps first (runners.app.profiler, every phase) and simulate with that profile, "
        "fitted on the machine as it runs today, instead of the bundled one",
    )
    args = parser.parse_args()
    seeds, sessions = ([601], 3) if args.quick else (list(range(601, 601 + args.seeds)), args.sessions)
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder)
        model = tiny_model(out / "model")
        real, sim = [], []
        # /reset_prefix_cache is served only in vLLM's development mode
        with launched_vllm(model, out / "logs", env={**SERVER_ENV, "VLLM_SERVER_DEV_MODE": "1"}) as engine:
            instance = engine.instances[0]
            attached = {"kind": "openai", "urls": instance.endpoint.base_url}
            profile_path = TINY_PROFILE
            if args.refit:
                from runners.app.profiler import fit_step_profile

                config = engine.config
                samples = measure_engine_steps(instance, config.max_num_batched_tokens)
                profile_path = out / "today.profile.yaml"
                fit_step_profile(
                    samples,
                    "tiny-cpu-vllm-today",
                    "bench/session_fidelity.py --refit: measured before the sessions on the same server",
                    instance.kv_capacity_tokens,
                    instance.block_size,
                    config.max_num_seqs,
                    config.max_num_batched_tokens,
                ).to_file(profile_path)
            for seed in seeds:
                reset_prefix_cache(instance.endpoint.base_url)
                work = workload(model, sessions, seed, args.rate)
                real.append(measure(attached, work, out, f"real-{seed}"))
                sim.append(measure({"kind": "sim", "profile": str(profile_path)}, work, out, f"sim-{seed}"))
                print(
                    f"seed {seed}: hit rate real {real[-1]['hit_rate']:.3f} sim {sim[-1]['hit_rate']:.3f}; TTFT by turn "
                    f"real {real[-1]['ttft_s']} sim {sim[-1]['ttft_s']}",
                    flush=True,
                )
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "engine": "vllm-cpu 0.32.0, tiny random Llama, max_num_seqs 64, max_num_batched_tokens 2048, 128-token blocks",
        "profile": "fitted on the same server before the sessions (--refit)"
        if args.refit
        else str(TINY_PROFILE.relative_to(RESULTS.parents[1])),
        "workload": f"{sessions} chat sessions per seed (synthetic stand-in), Poisson {args.rate:g} sessions/s, "
        f"at most {MAX_TURNS} turns, think {THINK_S:g} s constant",
        "seeds": seeds,
        "real": real,
        "sim": sim,
        "errors": compare(real, sim),
    }
    text = markdown(report)
    print(text)
    if not args.quick:
        report_json, report_md = (
            (REPORT_JSON.with_name("session_fidelity_refit.json"), REPORT_MD.with_name("session_fidelity_refit.md"))
            if args.refit
            else (REPORT_JSON, REPORT_MD)
        )
        report_json.write_text(json.dumps(report, indent=2, default=lambda v: None if math.isnan(v) else v) + "\n")
        report_md.write_text(text)


if __name__ == "__main__":
    main()
