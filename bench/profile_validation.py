"""Does the simulator reproduce a real engine once calibrated? Measure the CPU vLLM's steps, fit
the step model, then run one workload on the real engine and on the simulator and compare.

Steps: launch the CPU vLLM (tiny random Llama, max_num_seqs 64, max_num_batched_tokens 2048);
measure pure prefill, pure decode and mixed steps with the step profiler
(:func:`runners.app.profiler.measure_steps`); fit on the same samples both the linear step model (the
default for profiles) and the SLO-aware paper's eq. 14-15 phase model, each 5-fold
cross-validated; for each arrival rate run the same workload (same seed, same tokenizer so token
counts match) with FCFS on the real engine and on the simulator with each profile (and the older
request-grid phase profile, tiny-cpu-vllm.profile-grid.yaml); report the relative error of mean
TTFT, mean TPOT and output-token throughput.

Usage: python -m bench.profile_validation [--rates 2,6] [--requests 120]
       python -m bench.profile_validation --refit   # refit the profiles from the samples CSV only
Writes bench/results/profile_validation.{json,md}, tiny-cpu-vllm.profile-cv.yaml (linear step model),
tiny-cpu-vllm.profile-phase.yaml (eq. 14-15 on the same steps) and tiny-cpu-vllm.profile-cv-samples.csv.
(The bundled tiny-CPU profile, tiny-cpu-vllm.profile.yaml, comes from bench/sim_fidelity.py with its
fidelity report.)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, measured, write_report
from bench.vllm_cpu_common import TINY_ENGINE, launched_vllm, measure_engine_steps, tiny_model
from runners.app.profiler import fit_step_profile, read_step_samples, write_step_samples
from runners.engines.profile import load_profile
from runners.run.benchmark import execute_run
from runners.run.config import parse_config

# the bundled profile (tiny-cpu-vllm.profile.yaml) and its samples are bench/sim_fidelity.py's, with its report
PROFILE = RESULTS / "tiny-cpu-vllm.profile-cv.yaml"
PHASE_PROFILE = RESULTS / "tiny-cpu-vllm.profile-phase.yaml"
GRID_PROFILE = RESULTS / "tiny-cpu-vllm.profile-grid.yaml"
SAMPLES = RESULTS / "tiny-cpu-vllm.profile-cv-samples.csv"
SOURCE = f"bench/profile_validation.py: {TINY_ENGINE}; steps measured by runners.app.profiler.measure_steps"
ENGINE = {"kv_capacity_tokens": 524288, "block_size": 128, "max_num_seqs": 64, "max_num_batched_tokens": 2048}


def relative(sim: float, real: float) -> float:
    return (sim - real) / real if real else float("nan")


def fit_both(samples, limits: dict) -> dict:
    """Fit and write both profiles; their fit reports."""
    step = fit_step_profile(samples, "tiny-cpu-vllm", SOURCE, model="linear-step", **limits)
    phase = fit_step_profile(samples, "tiny-cpu-vllm-phase", SOURCE, model="phase", **limits)
    step.to_file(PROFILE)
    phase.to_file(PHASE_PROFILE)
    return {
        "linear-step": step.fit,
        "phase": phase.fit,
        "step_model": step.step_model.model_dump() if step.step_model is not None else None,
        "phase_model": {
            "prefill": phase.prefill.model_dump() if phase.prefill is not None else None,
            "decode": phase.decode.model_dump() if phase.decode is not None else None,
        },
    }


def cv_lines(fits: dict) -> list[str]:
    lines = [
        "| step kind | n | out-of-fold MAPE, linear step | out-of-fold MAPE, phase (eq. 14-15) |",
        "|---|---|---|---|",
    ]
    for kind in ["prefill", "decode", "mixed", "all"]:
        step = fits["linear-step"]["cross_validation"].get(kind)
        phase = fits["phase"]["cross_validation"].get(kind)
        if step:
            lines.append(f"| {kind} | {step['n']} | {step['mape']:.1%} | {phase['mape']:.1%} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2,6")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--refit", action="store_true", help="refit from the samples CSV; no engine, no runs")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.refit:
        fits = fit_both(read_step_samples(SAMPLES), ENGINE)
        print("\n".join(cv_lines(fits)))
        return
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_model(Path(scratch) / "tiny")
        with launched_vllm(model, Path(scratch) / "logs") as server:
            engine_config, instance = server.config, server.instances[0]
            started = time.perf_counter()
            samples = measure_engine_steps(instance, engine_config.max_num_batched_tokens)
            profile_seconds = time.perf_counter() - started
            write_step_samples(samples, SAMPLES)
            limits = {
                "kv_capacity_tokens": instance.kv_capacity_tokens,
                "block_size": instance.block_size,
                "max_num_seqs": engine_config.max_num_seqs,
                "max_num_batched_tokens": engine_config.max_num_batched_tokens,
            }
            fits = fit_both(samples, limits)
            print("\n".join(cv_lines(fits)), flush=True)
            profiles = {
                "linear-step": PROFILE,
                "phase (same steps)": PHASE_PROFILE,
                "phase (request grid)": GRID_PROFILE,
            }
            for rate in [float(r) for r in args.rates.split(",")]:
                workload = {
                    "requests": args.requests,
                    "seed": 11,
                    "tokenizer": str(model),
                    "arrival": {"process": "poisson", "rate": rate},
                }
                real = execute_run(
                    parse_config(
                        {
                            "engine": {"kind": "openai", "urls": instance.endpoint.base_url},
                            "workload": workload,
                            "scheduler": {"name": "fcfs"},
                        }
                    ),
                    Path(scratch) / "results",
                ).summary
                for label, path in profiles.items():
                    load_profile(path)
                    sim = execute_run(
                        parse_config(
                            {
                                "engine": {"kind": "sim", "profile": str(path)},
                                "workload": workload,
                                "scheduler": {"name": "fcfs"},
                            }
                        ),
                        Path(scratch) / "results",
                    ).summary
                    row: dict[str, Any] = {"rate_rps": rate, "profile": label}
                    for key, name in [("ttft_s.mean", "mean_ttft_s"), ("tpot_s.mean", "mean_tpot_s")]:
                        row[f"real_{name}"] = measured(real, key)
                        row[f"sim_{name}"] = measured(sim, key)
                        row[f"error_{name}"] = relative(measured(sim, key), measured(real, key))
                    row["real_output_tps"] = measured(real, "output_throughput_tps")
                    row["sim_output_tps"] = measured(sim, "output_throughput_tps")
                    row["error_output_tps"] = relative(
                        measured(sim, "output_throughput_tps"), measured(real, "output_throughput_tps")
                    )
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "profile": str(PROFILE.relative_to(RESULTS.parent.parent)),
        "profile_seconds": round(profile_seconds, 1),
        **fits,
        "rows": rows,
    }
    counts = fits["linear-step"]["points"]
    lines = [
        f"Steps measured in {profile_seconds:.0f} s: {counts['prefill']} pure prefill, {counts['decode']} pure decode, "
        f"{counts['mixed']} mixed (samples: tiny-cpu-vllm.profile-cv-samples.csv). 5-fold cross-validation, same samples:",
        "",
        *cv_lines(fits),
        "",
        "| rate req/s | simulator profile | mean TTFT real / sim (error) | mean TPOT real / sim (error) | "
        "output tok/s real / sim (error) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['rate_rps']:g} | {row['profile']} | {row['real_mean_ttft_s'] * 1000:.1f} / "
            f"{row['sim_mean_ttft_s'] * 1000:.1f} ms ({row['error_mean_ttft_s']:+.1%}) | "
            f"{row['real_mean_tpot_s'] * 1000:.2f} / {row['sim_mean_tpot_s'] * 1000:.2f} ms "
            f"({row['error_mean_tpot_s']:+.1%}) | {row['real_output_tps']:.0f} / {row['sim_output_tps']:.0f} "
            f"({row['error_output_tps']:+.1%}) |"
        )
    write_report("profile_validation", report, lines)


if __name__ == "__main__":
    main()
