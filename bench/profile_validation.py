"""Does the simulator reproduce a real engine once calibrated? Profile the CPU vLLM, then run one
workload on the real engine and on the simulator with the fitted profile, and compare.

Steps: launch the CPU vLLM (tiny random Llama, max_num_seqs 64, max_num_batched_tokens 2048);
fit the latency model with the profiler; for each arrival rate run the same workload (same seed,
same tokenizer so token counts match) with FCFS on the real engine and on the simulator; report
the relative error of mean TTFT, mean TPOT and output-token throughput.

Usage: python bench/profile_validation.py [--rates 2,6] [--requests 120]
Writes bench/results/profile_validation.{json,md} and the profile tiny-cpu-vllm.profile.yaml.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from vllm_cpu_common import RESULTS, tiny_model, vllm_engine

from runners.benchmark import execute_run
from runners.config import parse_config
from runners.engines.real_engine import RealEngine
from runners.profiler import ProfileGrid, fit_profile, measure, write_samples


def relative(sim: float, real: float) -> float:
    return (sim - real) / real if real else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="2,6")
    parser.add_argument("--requests", type=int, default=120)
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    profile_path = RESULTS / "tiny-cpu-vllm.profile.yaml"
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_model(Path(scratch) / "tiny")
        engine_config = parse_config({"engine": vllm_engine(model)}).engine
        server = RealEngine(engine_config, Path(scratch) / "logs")
        instance = server.start()[0]
        try:
            grid = ProfileGrid(batch_sizes=[1, 2, 4, 8, 16, 32], input_tokens=[32, 128, 512],
                               output_tokens=[32, 128], repeats=2)
            started = time.perf_counter()
            samples = asyncio.run(measure(instance.endpoint, grid))
            profile = fit_profile(samples, "tiny-cpu-vllm", "bench/profile_validation.py: vllm-cpu 0.32.0, tiny "
                                  "random Llama (2 layers, hidden 256), this machine's 2 cores",
                                  instance.kv_capacity_tokens, instance.block_size, engine_config.max_num_seqs,
                                  engine_config.max_num_batched_tokens)
            profile_seconds = time.perf_counter() - started
            profile.to_file(profile_path)
            write_samples(samples, RESULTS / "tiny-cpu-vllm.profile-samples.csv")
            for rate in [float(r) for r in args.rates.split(",")]:
                workload = {"requests": args.requests, "seed": 11, "tokenizer": str(model),
                            "arrival": {"process": "poisson", "rate": rate}}
                real = execute_run(parse_config({
                    "engine": {"kind": "openai", "urls": instance.endpoint.base_url},
                    "workload": workload, "scheduler": {"name": "fcfs"},
                }), Path(scratch) / "results").summary
                sim = execute_run(parse_config({
                    "engine": {"kind": "sim", "profile": str(profile_path)},
                    "workload": workload, "scheduler": {"name": "fcfs"},
                }), Path(scratch) / "results").summary
                row = {"rate_rps": rate}
                for key, label in [("ttft_s", "mean_ttft_s"), ("tpot_s", "mean_tpot_s")]:
                    row[f"real_{label}"] = real[key]["mean"]
                    row[f"sim_{label}"] = sim[key]["mean"]
                    row[f"error_{label}"] = relative(sim[key]["mean"], real[key]["mean"])
                row["real_output_tps"] = real["output_throughput_tps"]
                row["sim_output_tps"] = sim["output_throughput_tps"]
                row["error_output_tps"] = relative(sim["output_throughput_tps"], real["output_throughput_tps"])
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            server.stop()
    fit = profile.fit or {}
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "profile": str(profile_path.relative_to(RESULTS.parent.parent)),
              "profile_seconds": round(profile_seconds, 1), "fit": fit,
              "prefill": profile.prefill.model_dump(), "decode": profile.decode.model_dump(), "rows": rows}
    (RESULTS / "profile_validation.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"Fit: prefill RMSE {fit['rmse_prefill_s'] * 1000:.2f} ms (MAPE {fit['mape_prefill']:.1%}), "
        f"decode RMSE {fit['rmse_decode_s'] * 1000:.3f} ms (MAPE {fit['mape_decode']:.1%}); "
        f"{fit['prefill_points']} grid measurements in {profile_seconds:.0f} s.",
        "",
        "| rate req/s | mean TTFT real / sim (error) | mean TPOT real / sim (error) | output tok/s real / sim (error) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['rate_rps']:g} | {row['real_mean_ttft_s'] * 1000:.1f} / {row['sim_mean_ttft_s'] * 1000:.1f} ms "
            f"({row['error_mean_ttft_s']:+.1%}) | {row['real_mean_tpot_s'] * 1000:.2f} / {row['sim_mean_tpot_s'] * 1000:.2f} ms "
            f"({row['error_mean_tpot_s']:+.1%}) | {row['real_output_tps']:.0f} / {row['sim_output_tps']:.0f} "
            f"({row['error_output_tps']:+.1%}) |"
        )
    (RESULTS / "profile_validation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
