"""Verdict transfer (issues 43 and 48): does the simulator's verdict "scheduler B beats A by x%"
hold on the real engine, in sign and roughly in size? Measured so that drift cannot hide it.

1. The client (this process) and the CPU vLLM server are pinned to separate cores (``taskset``
   for the server and its OpenMP threads, ``sched_setaffinity`` for the client); the pinning is
   in every run's engine.json (``client_cpu_affinity``) and in the report. The server keeps its
   prefix cache off (the workloads share no prefixes a policy should exploit here) and answers
   vLLM's dev-mode ``/server_info``, so an attached run discovers its slots.
2. A profile in the same session (the step profiler, or ``--profile`` to reuse one), with the
   server's limits as the run discovers them (issue 48: the policy believes the same on both
   sides; every pair's real and simulated runs are checked for it and the report says so).
3. The engine's capacity in the same session: ``--capacity-requests`` sent at once with fcfs.
   The loads (fractions of it) are fixed before any pair runs.
4. For every pair A:B, load and seed: four real runs back to back on the one warm server, A B B A
   on even seeds and B A A B on odd ones, so drift within a seed cancels and across seeds
   alternates; then A and B on the simulator (the same requests and arrival times). Per seed the
   real value of a scheduler is the mean of its two runs, and its two runs' difference is the
   engine's own repeatability (the A-A' spread, beside every figure).
5. Per cell and metric (G, SLO attainment, mean TTFT, mean E2E): the real change of B against A
   and the simulator's, each with its 95% interval (runners.metrics.seed_statistics.relative_change:
   Fieller's below 10 seeds, BCa from there), the spread, and the verdict: "unresolvable" when the
   real interval holds 0 or the change is within the spread; else whether the sign agrees and the
   ratio sim/real (its interval from the real change's interval: the simulator runs the same seeds
   and is deterministic). Targets: the sign agrees in every resolvable cell; the ratio is within
   [0.67, 1.5] in at least 80% of them.

Writes bench/results/transfer.{json,md} (``--name`` for another file name) after every cell.

Usage: python -m bench.transfer [--pairs fcfs:slo-sa,...] [--loads 0.5,0.9,1.3] [--seeds 10]
       [--requests 60] [--profile PATH] [--url URL] [--quick]
``--quick`` (CI): one pair, one load, two seeds, 12 requests, the bundled tiny profile; it checks
the protocol runs, not its figures. ``--url`` attaches to a running vLLM instead of launching one
(then pinning is the server owner's; the report says it is unknown).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import RESULTS, markdown_table, measured
from bench.vllm_cpu_common import SERVER_ENV, TINY_ENGINE, TINY_PROFILE, launched_vllm, tiny_model, vllm_python
from runners.engines.beliefs import differences, run_beliefs
from runners.metrics.seed_statistics import relative_change
from runners.run.benchmark import execute_run
from runners.run.config import parse_config

#: Each judged metric: summary key, label, and whether a rise is better.
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("G", "G", True),
    ("slo_attainment", "SLO attainment", True),
    ("ttft_s.mean", "mean TTFT", False),
    ("e2e_s.mean", "mean E2E", False),
)
DEFAULT_PAIRS = "fcfs:slo-sa,fcfs:mcsf,fcfs:static,fcfs:dynamic-mem,fcfs:scls"
#: The ratio sim/real a transferred verdict keeps (issue 43's target), and the share of resolvable
#: cells that must keep it.
RATIO_RANGE = (0.67, 1.5)
RATIO_SHARE = 0.8
FIRST_SEED = 501  # workload seeds 501, 502, ...: none used by another benchmark
CAPACITY_SEED = 1000
#: The server's KV pool (blocks of 128 tokens) and slots: memory binds before the slots do, so
#: schedulers that plan memory have something to decide (the issue 48 pilot's 48 blocks).
KV_BLOCKS = 48
SLOTS = 64


def pin(core: int) -> list[int] | None:
    """Pin this process to ``core``; the CPUs it may run on afterwards (None where not possible)."""
    try:
        os.sched_setaffinity(0, {core})
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


@contextmanager
def pinned_server(model: Path, logs: Path, core: int) -> Iterator[Any]:
    """The CPU vLLM on the tiny model, its process (and the engine core it starts, which inherits
    the mask) on ``core`` only, one OpenMP thread bound there, prefix caching off."""
    command = ["taskset", "-c", str(core), vllm_python(), "-m", "vllm.entrypoints.openai.api_server"]
    env = {
        **SERVER_ENV,
        "VLLM_CPU_OMP_THREADS_BIND": str(core),
        "OMP_NUM_THREADS": "1",
        "VLLM_SERVER_DEV_MODE": "1",  # /server_info: the attached runs discover the slots
    }
    with launched_vllm(
        model,
        logs,
        command=command,
        env=env,
        max_num_seqs=SLOTS,
        num_gpu_blocks_override=KV_BLOCKS,
        extra_args=["--no-enable-prefix-caching"],
    ) as engine:
        yield engine


def run_summary(engine: dict, work: dict, scheduler: str, out: Path, limit_s: float) -> tuple[dict, Path]:
    """One run; (its summary as plain JSON with ``_status`` and ``_error``, its folder)."""
    outcome = execute_run(
        parse_config({"engine": engine, "workload": work, "scheduler": {"name": scheduler}, "max_duration_s": limit_s}),
        out,
    )
    summary = outcome.summary.model_dump(mode="json", exclude_unset=True)
    summary["_status"], summary["_error"] = outcome.status, outcome.error
    return summary, Path(outcome.folder)


def workload(model: Path, requests: int, seed: int, rate: float | None) -> dict:
    arrival = {"process": "all-at-once"} if rate is None else {"process": "poisson", "rate": rate}
    return {"requests": requests, "seed": seed, "tokenizer": str(model), "arrival": arrival}


def served(summary: dict, requests: int) -> str | None:
    """Why a real run does not count (None: every request completed)."""
    if summary["_status"] != "done":
        return f"run {summary['_status']}: {summary['_error'] or 'no reason given'}"
    if summary.get("completed") != requests:
        return f"{summary.get('completed')} of {requests} requests completed"
    return None


def value(summary: Mapping[str, Any], key: str) -> float:
    return float(measured(summary, key))


def judge_cell(real: Mapping[str, Mapping[int, list[float]]], sim: Mapping[str, Mapping[int, float]], a: str, b: str):
    """One metric of one cell: real per scheduler -> seed -> [run, repeat]; sim per scheduler ->
    seed -> value. Returns the cell's record (changes as fractions)."""
    seeds = sorted(set(real[a]) & set(real[b]) & set(sim[a]) & set(sim[b]))
    real_a = {seed: sum(real[a][seed]) / 2 for seed in seeds}
    real_b = {seed: sum(real[b][seed]) / 2 for seed in seeds}
    spreads = [
        abs(runs[0] - runs[1]) / abs(sum(runs) / 2)
        for name in (a, b)
        for seed in seeds
        if (runs := real[name][seed]) and sum(runs) != 0
    ]
    spread = sum(spreads) / len(spreads) if spreads else None
    real_change = relative_change(real_a, real_b)
    sim_change = relative_change({s: sim[a][s] for s in seeds}, {s: sim[b][s] for s in seeds})
    record: dict[str, Any] = {
        "seeds": len(seeds),
        "real": real_change.as_dict(),
        "sim": sim_change.as_dict(),
        "spread": spread,
        "spread_max": max(spreads) if spreads else None,
    }
    change, low, high = real_change.change, real_change.ci_low, real_change.ci_high
    if change is None or low is None or high is None or (low <= 0 <= high) or abs(change) <= (spread or 0.0):
        record["verdict"] = "unresolvable"
        return record
    record["verdict"] = "resolvable"
    record["sign_agrees"] = sim_change.change is not None and (sim_change.change > 0) == (change > 0)
    if sim_change.change is not None:
        ratio = sim_change.change / change
        bounds = sorted(sim_change.change / edge for edge in (low, high))
        record["ratio"] = ratio
        record["ratio_interval"] = bounds
        record["ratio_within"] = RATIO_RANGE[0] <= ratio <= RATIO_RANGE[1]
    return record


def percent(x: float | None, sign: bool = True) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:+.1f}%" if sign else f"{x * 100:.1f}%"


def markdown(report: dict) -> str:
    lines = [
        "# Verdict transfer: real CPU vLLM against the simulator (issues 43 and 48)",
        "",
        f"Made {report['date']} by `{report['command']}` ({report['minutes']:.0f} min). Engine: {report['engine']}. "
        f"Pinning: {report['pinning']}. Profile: {report['profile']}. Capacity {report['capacity_rps']:.2f} req/s "
        f"({report['capacity_note']}); loads fixed before the pairs ran: "
        + ", ".join(f"{load:.0%}" for load in report["loads"])
        + f". {report['requests']} requests per run, seeds {report['seeds'][0]}-{report['seeds'][-1]}.",
        "",
        "Each real figure is B's change against A over the seeds (each seed's value the mean of its two "
        "runs, A B B A or B A A B back to back), with its 95% interval; spread is the mean difference between "
        "a scheduler's two runs of a seed (the engine's own repeatability, this session). A cell is "
        "unresolvable when the real interval holds 0 or the change is within the spread.",
        "",
    ]
    rows = []
    for cell in report["cells"]:
        for key, label, _ in METRICS:
            judged = cell["metrics"].get(key)
            if judged is None:
                continue
            real, sim = judged["real"], judged["sim"]
            verdict = judged["verdict"]
            if verdict == "resolvable":
                verdict = ("sign agrees" if judged["sign_agrees"] else "SIGN DISAGREES") + (
                    f"; ratio {judged['ratio']:.2f} [{judged['ratio_interval'][0]:.2f}, {judged['ratio_interval'][1]:.2f}]"
                    if "ratio" in judged
                    else ""
                )
            rows.append(
                [
                    f"{cell['a']} vs {cell['b']}",
                    f"{cell['load']:.0%}",
                    label,
                    f"{percent(real['change'])} [{percent(real['ci_low'])}, {percent(real['ci_high'])}]",
                    f"{percent(sim['change'])} [{percent(sim['ci_low'])}, {percent(sim['ci_high'])}]",
                    f"{percent(judged['spread'], False)} (max {percent(judged['spread_max'], False)})",
                    verdict,
                ]
            )
    lines += markdown_table(["pair (A vs B)", "load", "metric", "real B vs A", "sim B vs A", "spread", "verdict"], rows)
    totals = report["totals"]
    lines += [
        "",
        f"Resolvable cells: {totals['resolvable']} of {totals['cells']}; sign agrees in {totals['sign_agrees']} of them; "
        f"ratio within [{RATIO_RANGE[0]}, {RATIO_RANGE[1]}] in {totals['ratio_within']} "
        f"(target: every sign, and the ratio in at least {RATIO_SHARE:.0%}).",
        f"Beliefs (issue 48): {report['beliefs']}.",
    ]
    if report.get("failed"):
        lines += ["", "Not measured: " + "; ".join(report["failed"])]
    return "\n".join(lines) + "\n"


def totals(cells: Sequence[dict]) -> dict[str, int]:
    judged = [m for cell in cells for m in cell["metrics"].values()]
    resolvable = [m for m in judged if m["verdict"] == "resolvable"]
    return {
        "cells": len(judged),
        "resolvable": len(resolvable),
        "sign_agrees": sum(bool(m.get("sign_agrees")) for m in resolvable),
        "ratio_within": sum(bool(m.get("ratio_within")) for m in resolvable),
    }


def parse_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        names = [name.strip() for name in part.split(":")]
        if len(names) != 2 or not all(names):
            sys.exit(f"--pairs: {part!r} is not A:B (for example fcfs:slo-sa)")
        pairs.append((names[0], names[1]))
    return pairs


def measure_profile(instance: Any, beliefs: Any, path: Path) -> str:
    """Fit a step profile on the attached instance (runners.app.profiler, default grid) with the
    server's limits; write it to ``path``; the profile's description."""
    from bench.vllm_cpu_common import measure_engine_steps
    from runners.app.profiler import fit_step_profile

    samples = measure_engine_steps(instance, int(beliefs.value("max_num_batched_tokens")))
    profile = fit_step_profile(
        samples,
        "transfer-session",
        f"bench/transfer.py: {TINY_ENGINE}, measured in this session",
        beliefs.value("kv_capacity_tokens"),
        beliefs.value("block_size"),
        beliefs.value("max_num_seqs"),
        beliefs.value("max_num_batched_tokens"),
    )
    profile.to_file(path)
    return f"measured in this session ({len(samples)} steps)"


def with_server_limits(source: Path, beliefs: Any, path: Path) -> None:
    """``source``'s latency model with the server's limits and their sources (what the profiler
    writes for that server), so the simulated policy believes what the real one does."""
    from runners.engines.profile import load_profile

    names = ("kv_capacity_tokens", "block_size", "max_num_seqs", "max_num_batched_tokens")
    load_profile(source).model_copy(
        update={name: beliefs.value(name) for name in names}
        | {"model": None, "gpu": None, "limit_sources": {name: getattr(beliefs, name).source for name in names}}
    ).to_file(path)


class Session:
    """The pairs' runs of one session: the real engine (attached), the simulator with the
    session's profile, and the beliefs each pair's runs held that differed (none expected)."""

    def __init__(self, model: Path, out: Path, real: dict, sim: dict, requests: int, started: float) -> None:
        self.model, self.out, self.real, self.sim = model, out, real, sim
        self.requests, self.started = requests, started
        self.belief_problems: list[str] = []

    def cell(self, a: str, b: str, load: float, rate: float, seeds: Sequence[int]) -> tuple[dict, str | None]:
        """Every seed of pair ``a``:``b`` at ``rate`` (req/s): A B B A on even seeds, B A A B on
        odd ones, then both on the simulator; (the cell's record, why it stopped early or None)."""
        limit = 4 * self.requests / rate + 120
        per_metric: dict[str, tuple[dict, dict]] = {key: ({a: {}, b: {}}, {a: {}, b: {}}) for key, _, _ in METRICS}
        failure = None
        for index, seed in enumerate(seeds):
            failure = self._seed(a, b, seed, rate, limit, [a, b, b, a] if index % 2 == 0 else [b, a, a, b], per_metric)
            if failure:
                failure = f"{a} vs {b} at {load:.0%}, seed {seed}: {failure}"
                break
            print(f"{a} vs {b} at {load:.0%}: seed {seed} done ({time.monotonic() - self.started:.0f} s)", flush=True)
        metrics = {}
        for key, _, _ in METRICS:
            real, sim = per_metric[key]
            if all(real[name] for name in (a, b)):
                metrics[key] = judge_cell(real, sim, a, b)
        return {"a": a, "b": b, "load": load, "rate_rps": rate, "metrics": metrics}, failure

    def _seed(
        self, a: str, b: str, seed: int, rate: float, limit: float, order: list[str], per_metric: dict
    ) -> str | None:
        work = workload(self.model, self.requests, seed, rate)
        summaries: dict[str, list[dict]] = {a: [], b: []}
        folders: dict[str, Path] = {}
        for name in order:
            summary, folder = run_summary(self.real, work, name, self.out, limit)
            failure = served(summary, self.requests)
            if failure:
                return failure
            summaries[name].append(summary)
            folders[name] = folder
        for name in (a, b):
            sim_summary, sim_folder = run_summary(self.sim, work, name, self.out, limit)
            if sim_summary["_status"] != "done":
                return f"simulated {name}: {sim_summary['_error']}"
            found = differences(run_beliefs(folders[name]), run_beliefs(sim_folder))
            if found:
                self.belief_problems.append(f"{name} seed {seed}: " + "; ".join(found))
            for key, _, _ in METRICS:
                real_runs, sim_runs = per_metric[key]
                real_runs[name][seed] = [value(s, key) for s in summaries[name]]
                sim_runs[name][seed] = value(sim_summary, key)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=DEFAULT_PAIRS, help="A:B scheduler pairs, comma-separated")
    parser.add_argument("--loads", default="0.5,0.9,1.3", help="fractions of the capacity measured in the session")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--requests", type=int, default=60, help="requests per run")
    parser.add_argument("--capacity-requests", type=int, default=120)
    parser.add_argument("--profile", help="reuse this profile's latency model instead of measuring one")
    parser.add_argument("--url", help="attach to this running vLLM instead of launching a pinned one")
    parser.add_argument("--model", help="the tiny model's folder (default: built in a scratch folder)")
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--client-core", type=int, default=0)
    parser.add_argument("--name", default="transfer", help="report file name under bench/results/")
    parser.add_argument("--out", help="write the report here instead of bench/results/")
    parser.add_argument("--quick", action="store_true", help="CI: one pair, one load, 2 seeds, 12 requests")
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.loads, args.seeds, args.requests, args.capacity_requests = "fcfs:slo-sa", "0.9", 2, 12, 16
        args.profile = args.profile or str(TINY_PROFILE)
    pairs = parse_pairs(args.pairs)
    loads = [float(part) for part in args.loads.split(",")]
    seeds = [FIRST_SEED + i for i in range(args.seeds)]
    started = time.monotonic()
    results_folder = Path(args.out) if args.out else RESULTS
    results_folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        model = Path(args.model) if args.model else tiny_model(scratch / "tiny")
        out = scratch / "results"
        server_context = _attached(args.url) if args.url else pinned_server(model, scratch / "logs", args.server_core)
        with server_context as server:
            client = pin(args.client_core) if not args.url else None
            if args.url:
                pinning = "unknown (attached with --url: the server's owner pins it)"
            else:
                assert server is not None
                server_cpus = sorted(os.sched_getaffinity(server.servers[0].process.pid))
                pinning = f"server on CPUs {server_cpus} (one OpenMP thread), client on CPUs {client}"
            url = args.url or (server.instances[0].endpoint.base_url if server is not None else "")
            real_engine = {"kind": "openai", "urls": url, "model": "tiny"}
            from runners.engines.real_engine import RealEngine

            probe = RealEngine(config=parse_config({"engine": real_engine}).engine, log_folder=scratch)
            instance = probe.start()[0]
            beliefs = instance.beliefs
            assert beliefs is not None  # RealEngine.start sets it
            profile_path = scratch / "session.profile.yaml"
            if args.profile:
                with_server_limits(Path(args.profile), beliefs, profile_path)
                profile_note = f"{args.profile}'s latency model with the server's limits"
            else:
                profile_note = measure_profile(instance, beliefs, profile_path)
            real_engine["profile"] = str(profile_path)
            # the simulated engine caches prefixes exactly when the server does (it said so on /metrics)
            sim_engine = {
                "kind": "sim",
                "profile": str(profile_path),
                "prefix_caching": beliefs.prefix_caching.value is not False,
            }
            capacity, _ = run_summary(
                real_engine, workload(model, args.capacity_requests, CAPACITY_SEED, None), "fcfs", out, 3600
            )
            problem = served(capacity, args.capacity_requests)
            if problem:
                sys.exit(f"capacity run: {problem}")
            capacity_rps = float(capacity["request_throughput_rps"])
            print(f"capacity {capacity_rps:.2f} req/s; loads {loads}", flush=True)
            report: dict[str, Any] = {
                "schema": "schedlab.transfer/1",
                "command": "python -m bench.transfer " + " ".join(argv if argv is not None else sys.argv[1:]),
                "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                "engine": f"vllm-cpu {instance.version or '?'}, tiny random Llama, {SLOTS} slots, {KV_BLOCKS} KV "
                "blocks of 128 tokens, prefix caching off",
                "pinning": pinning,
                "profile": profile_note,
                "capacity_rps": capacity_rps,
                "capacity_note": f"{args.capacity_requests} requests at once, fcfs, seed {CAPACITY_SEED}",
                "loads": loads,
                "seeds": seeds,
                "requests": args.requests,
                "cells": [],
                "failed": [],
                "beliefs": "not checked",
            }
            session = Session(model, out, real_engine, sim_engine, args.requests, started)
            for a, b in pairs:
                for load in loads:
                    cell, failure = session.cell(a, b, load, load * capacity_rps, seeds)
                    if failure:
                        report["failed"].append(failure)
                        print(failure, flush=True)
                    report["cells"].append(cell)
                    report["beliefs"] = (
                        "every real and simulated run of a pair believed the same (engine.json)"
                        if not session.belief_problems
                        else "DIFFERED: " + " | ".join(session.belief_problems[:5])
                    )
                    report["totals"] = totals(report["cells"])
                    report["minutes"] = (time.monotonic() - started) / 60
                    (results_folder / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
                    (results_folder / f"{args.name}.md").write_text(markdown(report))
    print((results_folder / f"{args.name}.md").read_text())
    return 0


@contextmanager
def _attached(url: str) -> Iterator[None]:
    yield None


if __name__ == "__main__":
    sys.exit(main())
