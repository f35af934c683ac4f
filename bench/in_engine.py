"""In-engine schedulers against their client-side twins on the real CPU vLLM (issue 14 item 4).

000 Table I's setting: all requests at once, output throughput. Arms, each run on its own freshly
launched server (schedlab launches it, as a user's run does):
- ``static-16``: FCFS on vLLM with max_num_seqs 16 (the paper's "static batch size as configured");
- ``fcfs-64``: FCFS on max_num_seqs 64;
- ``dynamic-mem``: 000 Alg. 1 as a client-side policy (b_max 64 on max_num_seqs 64);
- ``engine-dynamic-mem``: the same algorithm inside vLLM (--scheduler-cls), max_num_seqs 64.
Two KV settings: forced small (--num-gpu-blocks-override 24, 128-token blocks: 23 usable, 2,944
tokens) and the default (1 GiB of KV: memory never binds, so dynamic-mem should equal fcfs-64).
Per arm: output tok/s, mean E2E and preemptions, mean over seeds with a 95% interval; each arm
against static-16 and engine-dynamic-mem against dynamic-mem: the relative change of the mean
(paired bootstrap 95% interval) and seeds won.

Usage: python bench/in_engine.py [--seeds 3] [--requests 80]
Writes bench/results/in_engine.{json,md}. Run it under the CPU lock (about 13 minutes).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from vllm_cpu_common import RESULTS, tiny_model, vllm_engine

from runners.benchmark import execute_run
from runners.config import parse_config
from runners.metrics.catalog import summary_value
from runners.metrics.seed_statistics import relative_change, summarize

ARMS: dict[str, tuple[str, dict, dict]] = {  # name: (scheduler, params, engine overrides)
    "static-16": ("fcfs", {}, {"max_num_seqs": 16}),
    "fcfs-64": ("fcfs", {}, {"max_num_seqs": 64}),
    "dynamic-mem": ("dynamic-mem", {"b_max": 64}, {"max_num_seqs": 64}),
    "engine-dynamic-mem": ("engine-dynamic-mem", {}, {"max_num_seqs": 64}),
}
KV_SETTINGS: dict[str, dict] = {"small KV (24 blocks)": {"num_gpu_blocks_override": 24, "max_model_len": 1024},
                                "default KV (1 GiB)": {}}
METRICS: tuple[tuple[str, str, bool], ...] = (("output_throughput_tps", "output tok/s", True),
                                              ("e2e_s.mean", "mean E2E (s)", False),
                                              ("preemptions", "preemptions", False))
COMPARISONS: tuple[tuple[str, str], ...] = (("static-16", "fcfs-64"), ("static-16", "dynamic-mem"),
                                            ("static-16", "engine-dynamic-mem"), ("dynamic-mem", "engine-dynamic-mem"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=80)
    args = parser.parse_args()
    seeds = list(range(args.seeds))
    started = time.perf_counter()
    results: dict[str, dict[str, dict[int, dict]]] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        model = tiny_model(Path(scratch) / "tiny")
        for kv_name, kv in KV_SETTINGS.items():
            results[kv_name] = {arm: {} for arm in ARMS}
            for seed in seeds:  # the arms take turns at each seed (A B C D A B C D ...): drift hits all alike
                for arm, (scheduler, params, engine) in ARMS.items():
                    config = {"engine": vllm_engine(model, **kv, **engine),
                              "workload": {"requests": args.requests, "seed": seed, "tokenizer": str(model),
                                           "arrival": {"process": "all-at-once"},
                                           "filters": {"max_total_tokens": 640}},
                              "scheduler": {"name": scheduler, "params": params}}
                    outcome = execute_run(parse_config(config), Path(scratch) / "results")
                    summary = outcome.summary
                    if outcome.status != "done" or summary.get("failed"):
                        problems.append(f"{kv_name} {arm} seed {seed}: {outcome.status} {outcome.error or ''} "
                                        f"failed {summary.get('failed')}")
                    results[kv_name][arm][seed] = {key: summary_value(summary, key) for key, _, _ in METRICS}
                    print(f"{kv_name} {arm} seed {seed}: {outcome.status}, "
                          f"{results[kv_name][arm][seed]['output_throughput_tps']:.0f} tok/s, "
                          f"{results[kv_name][arm][seed]['preemptions']} preemptions", flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "seeds": seeds, "requests": args.requests,
              "seconds": round(time.perf_counter() - started, 1), "problems": problems, "results": results,
              "summaries": {}, "comparisons": {}}
    lines = ["# In-engine vs client-side schedulers on the CPU vLLM (bench/in_engine.py)", "",
             f"{report['date']}; {args.requests} requests at once per run (prompt + reply <= 640 tokens), seeds "
             f"{seeds}, every run on a freshly launched server; mean over seeds [95% t-interval]; changes: ratio of "
             "means - 1 [paired bootstrap 95%], seeds won.", ""]
    for kv_name, arms in results.items():
        lines += [f"## {kv_name}", "", "| arm | " + " | ".join(label for _, label, _ in METRICS) + " |",
                  "|---" * (len(METRICS) + 1) + "|"]
        report["summaries"][kv_name] = {}
        for arm, per_seed in arms.items():
            cells = []
            report["summaries"][kv_name][arm] = {}
            for key, _, _ in METRICS:
                s = summarize([per_seed[seed][key] for seed in seeds])
                report["summaries"][kv_name][arm][key] = s.as_dict()
                ci = f" [{s.ci_low:.3g}, {s.ci_high:.3g}]" if s.ci_low is not None else ""
                cells.append("n/a" if s.mean is None else f"{s.mean:.3g}{ci}")
            lines.append(f"| {arm} | " + " | ".join(cells) + " |")
        lines += ["", "| comparison | " + " | ".join(label for _, label, _ in METRICS) + " |",
                  "|---" * (len(METRICS) + 1) + "|"]
        report["comparisons"][kv_name] = {}
        for base, other in COMPARISONS:
            cells = []
            for key, _, higher in METRICS:
                b = {seed: arms[base][seed][key] for seed in seeds}
                o = {seed: arms[other][seed][key] for seed in seeds}
                change = relative_change(b, o)
                wins = sum(1 for seed in seeds if b[seed] is not None and o[seed] is not None
                           and (o[seed] > b[seed] if higher else o[seed] < b[seed]))
                report["comparisons"][kv_name][f"{other} vs {base}: {key}"] = {**change.as_dict(), "wins": wins}
                ci = (f" [{change.ci_low:+.1%}, {change.ci_high:+.1%}]" if change.ci_low is not None else "")
                cells.append("n/a" if change.change is None else f"{change.change:+.1%}{ci}, {wins}/{len(seeds)}")
            lines.append(f"| {other} vs {base} | " + " | ".join(cells) + " |")
        lines.append("")
    if problems:
        lines += ["## Problems", ""] + [f"- {p}" for p in problems]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "in_engine.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "in_engine.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
