"""Wall time of a real-engine study run serially vs as Ray tasks that own their servers (issue 32).

The study: fcfs vs static (batch_size 4) x 3 seeds on the CPU vLLM serving the tiny model, each
member 32 requests (Poisson, 8 req/s) on a fresh server it launches (4 slots, 24 KV blocks of 128
tokens), as tests/e2e/test_cluster_study_vllm.py runs it. Two ways, taken in turn (A B, then B A,
``--pairs`` times):

- ``serial``: one member at a time in this process (the default for a real engine);
- ``ray``: a local Ray started here with two custom ``gpu`` slots (``ray.init(num_cpus=2,
  resources={"gpu": 2})``), each member a Ray task holding ``gpu=1`` and launching its own server,
  so two run at once. Ray's start and shutdown are inside the timed span: a user waits for them.

Each figure is the whole study's wall seconds (``run_study`` from its call to its return). The
report gives every pair, the median of each way, the ratio serial / ray pair by pair (median,
min, max), and whether the two studies' verdicts (fcfs vs static on G, SLO attainment, mean TTFT
and e2e) agree. On this 2-core machine the two servers share both cores, so the gain is what
overlapping server start-up and client waiting buys, not twice the compute; on a machine with a
GPU per slot the members do not share anything.

Results are printed and saved to bench/results/cluster_study.{json,md}.

Usage: python -m bench.cluster_study [--pairs 2] [--model DIR]
One way once (for an outside timer; writes nothing): python -m bench.cluster_study --once ray
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, markdown_table, write_report
from bench.vllm_cpu_common import SERVER_ENV, TINY_ENGINE, tiny_model, vllm_engine

NAME = "cluster_study"
SCHEDULERS = ["fcfs", "static"]
SEEDS = [0, 1, 2]
REQUESTS = 32
WAYS = ("serial", "ray")
#: The headline metrics whose verdicts (static vs the baseline, fcfs) the two ways must agree on.
COMPARED = ("G", "slo_attainment", "ttft_s.mean", "e2e_s.mean")


def study_config(model: Path, study_id: str, way: str, seeds: list[int] | None = None) -> dict[str, Any]:
    """The benchmark's study (module docstring); ``way`` ``ray`` has each member hold one ``gpu``;
    ``seeds`` replaces :data:`SEEDS` (the tests use fewer)."""
    engine = vllm_engine(
        model,
        max_model_len=2048,
        max_num_batched_tokens=None,
        num_gpu_blocks_override=24,
        max_num_seqs=4,
        env=dict(SERVER_ENV),
    )
    trials: dict[str, Any] = {"schedulers": SCHEDULERS, "seeds": list(SEEDS if seeds is None else seeds)}
    if way == "ray":
        trials["member_resources"] = {"gpu": 1, "CPU": 1}
    return {
        "run_id": study_id,
        "engine": engine,
        "workload": {
            "requests": REQUESTS,
            "seed": 1,
            "tokenizer": str(model),
            "arrival": {"process": "poisson", "rate": 8.0},
            "filters": {"max_total_tokens": 640},
        },
        "scheduler": {"name": "fcfs", "params": {"batch_size": 4}},
        "trials": trials,
    }


def run_way(model: Path, results: Path, way: str, study_id: str) -> dict[str, Any]:
    """One study run ``way``; its wall seconds, members at once and verdicts."""
    from runners.run.config import parse_config
    from runners.study.executors import choose_execution
    from runners.study.runner import plan_study, run_study

    start = time.perf_counter()
    if way == "ray":
        import ray

        ray.init(num_cpus=2, resources={"gpu": 2}, include_dashboard=False, log_to_driver=False)
    try:
        plan = plan_study(parse_config(study_config(model, study_id, way)))
        execution = choose_execution(plan, executor=way, environ={})
        result = run_study(plan, results, execution=execution)
    finally:
        if way == "ray":
            ray.shutdown()
    wall = time.perf_counter() - start
    record = result.record
    if record.status != "done":
        raise SystemExit(f"{way} study {study_id} ended {record.status}: {[(r.run_id, r.error) for r in record.runs]}")
    pairs = {key: record.statistics[key].vs_baseline["static"] for key in COMPARED}
    verdicts = {key: pair.verdict for key, pair in pairs.items()}
    differences = {key: [pair.diff_mean, pair.ci_low, pair.ci_high, pair.wins] for key, pair in pairs.items()}
    return {
        "way": way,
        "wall_s": round(wall, 2),
        "executor": record.execution.executor if record.execution else None,
        "members": len(record.runs),
        "most_at_once": most_at_once(results, [str(run.run_id) for run in record.runs]),
        "verdicts": verdicts,
        "static_minus_fcfs": differences,  # [mean, 95% CI low, high, wins of 3], stored units (s, fraction, 1/s)
    }


def most_at_once(results: Path, run_ids: list[str]) -> int:
    """Most members measuring at the same moment (their summaries' start and duration)."""
    import json

    edges = []
    for run_id in run_ids:
        summary = json.loads((results / run_id / "summary.json").read_text())
        edges += [(summary["started_at_unix_s"], 1), (summary["started_at_unix_s"] + summary["duration_s"], -1)]
    most = now = 0
    for _, step in sorted(edges):
        now += step
        most = max(most, now)
    return most


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2, help="A B pairs, the order swapped every pair")
    parser.add_argument("--model", type=Path, default=ROOT / "bench" / ".tiny-model", help="the tiny model's folder")
    parser.add_argument("--once", choices=WAYS, help="run one way once and print its wall seconds; write nothing")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = tiny_model(args.model)
    with tempfile.TemporaryDirectory(prefix="cluster-study-") as scratch:
        if args.once:
            print(run_way(model, Path(scratch), args.once, f"once-{args.once}"))
            return
        pairs = []
        for index in range(args.pairs):
            order = WAYS if index % 2 == 0 else WAYS[::-1]
            pair = {way: run_way(model, Path(scratch), way, f"p{index}-{way}") for way in order}
            pairs.append(pair)
            print(f"pair {index + 1}: serial {pair['serial']['wall_s']} s, ray {pair['ray']['wall_s']} s", flush=True)
    report(pairs)


def report(pairs: list[dict[str, dict[str, Any]]]) -> None:
    ratios = [pair["serial"]["wall_s"] / pair["ray"]["wall_s"] for pair in pairs]
    medians = {way: statistics.median(pair[way]["wall_s"] for pair in pairs) for way in WAYS}
    agree = all(pair["serial"]["verdicts"] == pair["ray"]["verdicts"] for pair in pairs)
    speedup = {
        "median": round(statistics.median(ratios), 3),
        "min": round(min(ratios), 3),
        "max": round(max(ratios), 3),
    }
    data: dict[str, Any] = {
        "engine": TINY_ENGINE,
        "study": f"{' vs '.join(SCHEDULERS)} x seeds {SEEDS}, {REQUESTS} requests each, a fresh server per member",
        "pairs": pairs,
        "median_wall_s": medians,
        "speedup_serial_over_ray": speedup,
        "verdicts_agree": agree,
    }
    rows = [
        (index + 1, pair["serial"]["wall_s"], pair["ray"]["wall_s"], pair["ray"]["most_at_once"], f"{ratio:.2f}x")
        for index, (pair, ratio) in enumerate(zip(pairs, ratios))
    ]
    lines = [
        f"# Real-engine study: serial vs Ray tasks owning their servers ({TINY_ENGINE})",
        "",
        f"Study: {data['study']}; {len(pairs)} pairs, order swapped each pair.",
        "",
        *markdown_table(["pair", "serial (s)", "ray, 2 gpu slots (s)", "ray members at once", "serial / ray"], rows),
        "",
        f"Median: serial {medians['serial']:.1f} s, ray {medians['ray']:.1f} s; speed-up serial / ray median "
        f"{speedup['median']:.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f}).",
        f"Verdicts (fcfs vs static on {', '.join(COMPARED)}) the same both ways in every pair: {agree}.",
    ]
    write_report(NAME, data, lines)


if __name__ == "__main__":
    main()
