"""Simulator fidelity with the prefix cache on (issue 31 item 3): the real CPU vLLM (prefix caching
on, vLLM's default) against the simulator on shared-prefix traffic, with the step model's
prefill-context term (``per_prefill_context_token_s``) at 0 ("before": a cached prefix costs no
attention time) and as fitted ("after").

1. Launch the CPU vLLM (tiny random Llama, max_num_seqs 64, max_num_batched_tokens 2048, 128-token
   blocks, its dev endpoints on so the prefix cache can be reset between runs). With ``--measure``,
   run the step profiler's ``prefix`` phase (prompts that extend a cached prompt, each with fresh
   prompts of the same sizes measured beside it), add its samples to the bundled profile's samples
   (bench/results/tiny-cpu-vllm.profile-samples.csv, other phases as measured before), refit the
   profile and rewrite it (its fidelity report kept); else use ``--profile`` (default: the bundled one).
2. Cases, each on the real engine (prefix cache reset before every run) and on the simulator with
   the profile before and after: the bundled Mooncake sample's first ``--records`` records replayed
   at 4x and 8x speed-up (the trace's own timing and hash_ids sharing), and a system-prompt
   workload (``workload.system_prompt`` 512 tokens, share 1.0, 4 prompts; mixed chat + code, Poisson
   at ``--rate`` req/s) over ``--seeds`` seeds. Per case and quantity (mean and p90 TTFT, E2E, TPOT,
   output tok/s, prefix-cache hit rate): real and simulated values and the mean |error| over seeds
   against runners/engines/fidelity.py's targets (these loads are below the engine's capacity).
   Unless ``--no-cache-off``: every run also on a second server with prefix caching off (its runs
   taking turns with the first's) and on the simulator with ``prefix_caching: false``: the error the
   machine's state gives any run, and the on/off ratio of mean TTFT, which isolates the cache's part.
3. Write bench/results/sim_fidelity_prefix.{json,md}, with the prefix phase's pairs against the
   step model without and with the term (``--render``: rewrite the .md from the .json).

``--quick``: the whole pipeline on small cases with the simulator (the profile as given) standing
in for the real engine (no vLLM needed; checks the script still works, writes nothing).

Usage: python -m bench.sim_fidelity_prefix [--measure] [--seeds 3] [--requests 150] [--rate 6]
       [--records 40] [--profile PATH] [--no-cache-off] [--keep DIR] [--render] [--quick]
Run it under the CPU lock (2026-11-27: about 7 minutes with the cache-off runs; --measure adds 1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import RESULTS
from bench.vllm_cpu_common import (
    SERVER_ENV,
    TINY_ENGINE,
    TINY_PROFILE,
    launched_vllm,
    reset_prefix_cache,
    tiny_model,
)
from runners.engines.fidelity import (
    MEAN_TARGET_BELOW_SATURATION,
    P90_TARGET_BELOW_SATURATION,
    compare_level,
    judged_quantity,
    quantity_label,
)
from runners.engines.profile import EngineProfile, load_profile
from runners.metrics.catalog import summary_value
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.workload.traces import TRACES_DIR

SAMPLES = RESULTS / "tiny-cpu-vllm.profile-samples.csv"
REPORT_JSON = RESULTS / "sim_fidelity_prefix.json"
REPORT_MD = RESULTS / "sim_fidelity_prefix.md"
MOONCAKE = TRACES_DIR / "mooncake_synthetic.jsonl"
SPEEDUPS = (4.0, 8.0)
SYSTEM_PROMPT = {"tokens": 512, "share": 1.0, "prompts": 4}
FIRST_SEED = 401
HIT_RATE = "prefix_cache_hit_rate"
#: The quantities compared (summary keys; fidelity.py's, plus the hit rate).
KEYS = ("ttft_s.mean", "ttft_s.p90", "e2e_s.mean", "e2e_s.p90", "tpot_s.mean", "output_throughput_tps", HIT_RATE)
SOURCE_NOTE = (
    "; prefill after a cached prefix measured by runners.app.profiler.measure_steps' prefix phase "
    "(bench/sim_fidelity_prefix.py --measure)"
)


def run(engine: dict, work: dict, out: Path, limit_s: float = 900.0) -> dict:
    """One run's summary (plain JSON) with its status."""
    outcome = execute_run(
        parse_config({"engine": engine, "workload": work, "scheduler": {"name": "fcfs"}, "max_duration_s": limit_s}),
        out,
    )
    summary = outcome.summary.model_dump(mode="json", exclude_unset=True)
    summary["_status"], summary["_error"] = outcome.status, outcome.error
    return summary


def cases(args: argparse.Namespace, tokenizer: str | None) -> list[dict[str, Any]]:
    """The workloads compared: name, per-seed workload configs."""
    token = {"tokenizer": tokenizer} if tokenizer else {}
    found: list[dict[str, Any]] = [
        {
            "name": f"Mooncake sample, first {args.records} records, {speedup:g}x speed-up",
            "workloads": [{"requests": args.records, "trace": {"path": str(MOONCAKE), "speedup": speedup}, **token}],
            "seeds": [None],
        }
        for speedup in SPEEDUPS
    ]
    seeds = [FIRST_SEED + i for i in range(args.seeds)]
    found.append(
        {
            "name": f"system prompt 512 tokens x 4 prompts (share 1.0), mixed chat + code, Poisson {args.rate:g} req/s, "
            f"{args.requests} requests",
            "workloads": [
                {
                    "requests": args.requests,
                    "seed": seed,
                    "arrival": {"process": "poisson", "rate": args.rate},
                    "system_prompt": dict(SYSTEM_PROMPT),
                    **token,
                }
                for seed in seeds
            ],
            "seeds": seeds,
        }
    )
    return found


def compare(real: list[dict], sim: list[dict], seeds: list) -> dict[str, Any]:
    """Per quantity: real and simulated values per seed, errors, mean |error| and its target."""
    level = compare_level(0.5, float("nan"), [s if s is not None else 0 for s in seeds], real, sim)
    quantities = {key: judged_quantity(q) for key, q in level["quantities"].items() if key in KEYS}
    for key in (HIT_RATE,):
        real_values = [float(s.get(key) or 0.0) for s in real]
        sim_values = [float(s.get(key) or 0.0) for s in sim]
        errors = [(b - a) / a if a else float("nan") for a, b in zip(real_values, sim_values)]
        finite = [abs(e) for e in errors if math.isfinite(e)]
        quantities[key] = {
            "real": real_values,
            "sim": sim_values,
            "errors": errors,
            "mean_abs_error": sum(finite) / len(finite) if finite else float("nan"),
            "mean_error": sum(e for e in errors if math.isfinite(e)) / len(finite) if finite else float("nan"),
            "target": None,
            "met": None,
        }
    return quantities


def markdown(report: dict) -> str:
    lines = [
        "# Simulator fidelity with the prefix cache on (bench/sim_fidelity_prefix.py)",
        "",
        f"{report['date']}; real engine: {report['engine']} (prefix caching on, cache reset before each run); "
        f"profile `{report['profile']}`: per_prefill_context_token_s = {report['context_term_s']:.3g} s per (prefill "
        "token x KV token) after, 0 before. Error = (simulated - real) / real per seed; each cell: real / simulated "
        f"(mean over seeds), then the mean |error| over seeds and its bias. Targets (runners/engines/fidelity.py, "
        f"below saturation): means <= {MEAN_TARGET_BELOW_SATURATION:.0%}, p90 <= {P90_TARGET_BELOW_SATURATION:.0%}.",
        "",
    ]
    if any("cache_off" in case for case in report["cases"]):
        lines += [
            "## Summary: mean TTFT",
            "",
            "Bias = signed mean error of the simulator (negative: it is fast). With the cache off the same runs "
            "show the error this machine's state gives every run (the real engine ran slower than when its steps "
            "were profiled: TPOT is off by as much); what the prefix cache adds to the error is the difference, and "
            "the on/off ratio shows it without the machine's state.",
            "",
            "| case | bias, cache on, term 0 | bias, cache on, term fitted | bias, cache off | on/off real | "
            "on/off sim, term 0 | on/off sim, term fitted |",
            "|---|---|---|---|---|---|---|",
        ]
        for case in report["cases"]:
            if "cache_off" not in case:
                continue
            key, ratios = "ttft_s.mean", case["on_over_off"]
            lines.append(
                f"| {case['name']} | {case['before'][key]['mean_error']:+.1%} | {case['after'][key]['mean_error']:+.1%} "
                f"| {case['cache_off'][key]['mean_error']:+.1%} | {_mean(ratios['real']):.3f} | "
                f"{_mean(ratios['before']):.3f} | {_mean(ratios['after']):.3f} |"
            )
        lines.append("")
    if report.get("prefix_phase"):
        lines += [
            "## What the profiler measured (its prefix phase, on an idle engine)",
            "",
            "One prompt alone after the same prompt's first part was sent alone (so that part is in the prefix "
            "cache): the engine's own prefill time (vllm:request_prefill_time_seconds), mean of the pairs, against "
            "the step model without the term (a cached prefix free) and with it. The difference grows with "
            "computed x cached tokens: the new tokens attend over the cached ones.",
            "",
            "| cached tokens | computed tokens | pairs | measured (ms) | model, term 0 (ms) | model, term fitted (ms) |",
            "|---|---|---|---|---|---|",
        ]
        for row in report["prefix_phase"]:
            lines.append(
                f"| {row['hit_tokens']} | {row['computed_tokens']:.0f} | {row['n']} | {row['measured_s'] * 1000:.2f} | "
                f"{row['model_before_s'] * 1000:.2f} | {row['model_after_s'] * 1000:.2f} |"
            )
        lines.append("")
    for case in report["cases"]:
        lines += [f"## {case['name']}", "", f"seeds: {case['seeds']}", ""]
        lines += ["| quantity | real | sim before | error before | sim after | error after | target |"]
        lines += ["|---|---|---|---|---|---|---|"]
        for key in KEYS:
            before, after = case["before"][key], case["after"][key]
            unit, fmt = (1000, ".3g") if key.endswith(("mean", "p90")) else (1, ".4g")
            label = "prefix-cache hit rate" if key == HIT_RATE else quantity_label(key)
            label += " (ms)" if unit == 1000 else ""

            def mean(values: list[float]) -> float:
                return sum(values) / len(values)

            def error(q: dict) -> str:
                mark = {True: " ok", False: " **MISS**", None: ""}[q.get("met")]
                return f"{q['mean_abs_error']:.1%} (bias {q['mean_error']:+.1%}){mark}"

            target = before.get("target")
            lines.append(
                f"| {label} | {mean(before['real']) * unit:{fmt}} | {mean(before['sim']) * unit:{fmt}} | "
                f"{error(before)} | {mean(after['sim']) * unit:{fmt}} | {error(after)} | "
                f"{'-' if target is None else f'{target:.0%}'} |"
            )
        if "cache_off" in case:
            lines += [
                "",
                "The same runs with prefix caching off (the real engine: a second server, its runs taking turns "
                "with the first; the simulator: `prefix_caching: false`, the profile after). The machine's speed "
                "is common to both, so the on/off ratio of mean TTFT isolates what the cache changes:",
                "",
                "| quantity | real, cache off | sim, cache off | error |",
                "|---|---|---|---|",
            ]
            for key in ("ttft_s.mean", "ttft_s.p90", "e2e_s.mean", "tpot_s.mean"):
                q = case["cache_off"][key]
                lines.append(
                    f"| {quantity_label(key)} (ms) | {_mean(q['real']) * 1000:.3g} | {_mean(q['sim']) * 1000:.3g} | "
                    f"{q['mean_abs_error']:.1%} (bias {q['mean_error']:+.1%}) |"
                )
            ratios = case["on_over_off"]
            lines += [
                "",
                f"Mean TTFT, cache on / cache off: real {_mean(ratios['real']):.3f}, sim before "
                f"{_mean(ratios['before']):.3f}, sim after {_mean(ratios['after']):.3f}.",
            ]
        lines.append("")
    return "\n".join(lines) + "\n"


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def prefix_phase_rows(profile: EngineProfile) -> list[dict[str, float]]:
    """The bundled samples' prefills after a cached prefix, grouped by (hit tokens, computed
    tokens rounded to 16): measured mean seconds against the step model without and with the
    prefill-context term (both with the idle start, as the profiler sends them to an idle engine)."""
    from runners.app.profiler import read_step_samples

    assert profile.step_model is not None
    step = profile.step_model
    without = step.model_copy(update={"per_prefill_context_token_s": 0.0})
    groups: dict[tuple[int, int], list[Any]] = {}
    for sample in read_step_samples(SAMPLES):
        if sample.prefill_context and sample.prefill_tokens:
            hits = sample.prefill_context // sample.prefill_tokens
            groups.setdefault((hits, 16 * round(sample.prefill_tokens / 16)), []).append(sample)
    rows = []
    for (hits, _), group in sorted(groups.items()):
        measured = sum(s.seconds for s in group) / len(group)
        tokens = sum(s.prefill_tokens for s in group) / len(group)
        context = sum(s.prefill_context for s in group) / len(group)
        rows.append(
            {
                "hit_tokens": hits,
                "computed_tokens": tokens,
                "n": len(group),
                "measured_s": measured,
                "model_before_s": without.step_time(1, round(tokens), 0, 0, idle_start=True),
                "model_after_s": step.step_time(
                    1, round(tokens), 0, 0, idle_start=True, prefill_context=round(context)
                ),
            }
        )
    return rows


def refit(instance: Any, engine_config: Any, old: EngineProfile) -> EngineProfile:
    """The bundled samples (their own prefix samples dropped) plus a new prefix phase, fitted."""
    from runners.app.profiler import StepGrid, fit_step_profile, measure_steps, read_step_samples, write_step_samples

    kept = [s for s in read_step_samples(SAMPLES) if not s.prefill_context and "prefix phase" not in s.signal]
    new = asyncio.run(
        measure_steps(
            instance.endpoint,
            StepGrid(),
            engine_config.max_num_batched_tokens,
            progress=lambda m: print(m, flush=True),
            phases=("prefix",),
        )
    )
    new = [s if s.prefill_context else _marked(s) for s in new]
    write_step_samples(kept + new, SAMPLES)
    source = old.source if SOURCE_NOTE in old.source else old.source + SOURCE_NOTE
    profile = fit_step_profile(
        kept + new,
        old.name,
        source,
        instance.kv_capacity_tokens,
        instance.block_size,
        engine_config.max_num_seqs,
        engine_config.max_num_batched_tokens,
    )
    return profile.model_copy(update={"fidelity": old.fidelity})


def _marked(sample: Any) -> Any:
    """A pure prefill or overhead sample of the prefix phase, its signal saying so (so a later
    --measure replaces it rather than adding to it)."""
    from dataclasses import replace

    return replace(sample, signal=sample.signal + " (prefix phase)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="measure the prefix phase and refit the profile")
    parser.add_argument("--profile", help="the profile to validate (default: the bundled tiny-CPU one)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=150, help="requests per system-prompt run")
    parser.add_argument("--rate", type=float, default=6.0, help="system-prompt arrivals, req/s")
    parser.add_argument("--records", type=int, default=40, help="Mooncake records per run")
    parser.add_argument(
        "--render", action="store_true", help="rewrite the .md from the .json (the prefix-phase table refreshed)"
    )
    parser.add_argument("--keep", help="keep every run's folder under this folder (default: thrown away)")
    parser.add_argument(
        "--no-cache-off",
        dest="cache_off",
        action="store_false",
        help="skip the same runs with prefix caching off (a second server, runs taking turns with the first)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small cases, the simulator as the real engine; writes nothing"
    )
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.requests, args.records = 2, 30, 10
    profile_path = Path(args.profile) if args.profile else TINY_PROFILE
    if args.render:
        report = json.loads(REPORT_JSON.read_text())
        report["prefix_phase"] = prefix_phase_rows(load_profile(profile_path))
        REPORT_JSON.write_text(json.dumps(report, indent=2) + "\n")
        REPORT_MD.write_text(markdown(report))
        print(REPORT_MD.read_text())
        return
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(args.keep) if args.keep else Path(scratch) / "results"
        if args.quick:
            profile = load_profile(profile_path)
            stand_in = {"kind": "sim", "profile": str(profile_path)}  # the profile as given: "before" should match it
            report = measure_cases(args, profile, stand_in, None, out, scratch, None, stand_in)
            print(markdown(report))
            print("quick mode: nothing written")
            return
        model = tiny_model(Path(scratch) / "tiny")
        env = {**SERVER_ENV, "VLLM_SERVER_DEV_MODE": "1"}
        with ExitStack() as servers:
            server = servers.enter_context(launched_vllm(model, Path(scratch) / "logs", env=env))
            instance = server.instances[0]
            profile = load_profile(profile_path)
            if args.measure:
                profile = refit(instance, server.config, profile)
                profile_path = TINY_PROFILE
                profile.to_file(profile_path)
                assert profile.step_model is not None
                print(f"per_prefill_context_token_s = {profile.step_model.per_prefill_context_token_s:.4g}", flush=True)
            off_engine = None
            if args.cache_off:
                off = servers.enter_context(
                    launched_vllm(model, Path(scratch) / "logs-off", extra_args=["--no-enable-prefix-caching"])
                )
                off_engine = {"kind": "openai", "urls": off.instances[0].endpoint.base_url}
            real_engine = {"kind": "openai", "urls": instance.endpoint.base_url}
            report = measure_cases(
                args, profile, real_engine, str(model), out, scratch, instance.endpoint.base_url, off_engine
            )
    report["prefix_phase"] = prefix_phase_rows(profile)
    REPORT_JSON.write_text(json.dumps(report, indent=2) + "\n")
    REPORT_MD.write_text(markdown(report))
    print(markdown(report))


def measure_cases(
    args: argparse.Namespace,
    profile: EngineProfile,
    real_engine: dict,
    tokenizer: str | None,
    out: Path,
    scratch: str,
    reset_url: str | None = None,
    off_engine: dict | None = None,
) -> dict[str, Any]:
    """Every case on the real engine (its prefix cache reset first) and on the simulator before and
    after; with ``off_engine`` (the real engine with prefix caching off) each run also there, right
    after, and on the simulator with ``prefix_caching: false``."""
    assert profile.step_model is not None
    after_path = Path(scratch) / "after.profile.yaml"
    before_path = Path(scratch) / "before.profile.yaml"
    profile.to_file(after_path)
    step = profile.step_model.model_copy(update={"per_prefill_context_token_s": 0.0})
    profile.model_copy(update={"step_model": step}).to_file(before_path)
    report: dict[str, Any] = {
        "profile": profile.name,
        "context_term_s": profile.step_model.per_prefill_context_token_s,
        "engine": TINY_ENGINE if reset_url else "the simulator (quick mode)",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cases": [],
    }
    for case in cases(args, tokenizer):
        runs: dict[str, list[dict]] = {name: [] for name in RUNS}
        for work in case["workloads"]:
            sim_work = work if tokenizer else {k: v for k, v in work.items() if k != "tokenizer"}
            if reset_url:
                reset_prefix_cache(reset_url)
            runs["real"].append(_served(run(real_engine, work, out), case["name"]))
            runs["before"].append(run({"kind": "sim", "profile": str(before_path)}, sim_work, out))
            runs["after"].append(run({"kind": "sim", "profile": str(after_path)}, sim_work, out))
            if off_engine is not None:
                off_real = {**off_engine, "prefix_caching": False} if off_engine["kind"] == "sim" else off_engine
                runs["real_off"].append(_served(run(off_real, work, out), case["name"]))
                off_sim = {"kind": "sim", "profile": str(after_path), "prefix_caching": False}
                runs["sim_off"].append(run(off_sim, sim_work, out))
            print(
                f"{case['name']} seed {work.get('seed')}: mean TTFT ms "
                + ", ".join(f"{name} {r[-1]['ttft_s']['mean'] * 1000:.2f}" for name, r in runs.items() if r)
                + f"; hit rate real {runs['real'][-1].get(HIT_RATE)}, sim {runs['after'][-1].get(HIT_RATE)}",
                flush=True,
            )
        entry: dict[str, Any] = {
            "name": case["name"],
            "seeds": case["seeds"],
            "before": compare(runs["real"], runs["before"], case["seeds"]),
            "after": compare(runs["real"], runs["after"], case["seeds"]),
        }
        if runs["real_off"]:
            entry["cache_off"] = compare(runs["real_off"], runs["sim_off"], case["seeds"])
            entry["on_over_off"] = {
                name: _ratios(runs[name], runs["real_off" if name == "real" else "sim_off"], "ttft_s.mean")
                for name in ("real", "before", "after")
            }
        report["cases"].append(entry)
    return report


#: The runs of each case: the real engine, the simulator before and after (cache on), and with
#: prefix caching off the real engine and the simulator (after).
RUNS = ("real", "before", "after", "real_off", "sim_off")


def _served(summary: dict, name: str) -> dict:
    if summary["_status"] != "done":
        raise SystemExit(f"{name}: real run {summary['_status']}: {summary['_error']}")
    return summary


def _ratios(on: list[dict], off: list[dict], key: str) -> list[float]:
    """Per seed, ``key`` with the prefix cache on over the same run's with it off."""
    values = []
    for a, b in zip(on, off):
        top, bottom = summary_value(a, key), summary_value(b, key)
        values.append(top / bottom if top is not None and bottom else float("nan"))
    return values


if __name__ == "__main__":
    main()
