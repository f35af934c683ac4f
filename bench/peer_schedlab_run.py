"""The schedlab run that sits beside the peer tools' files in tests/data/peer_results/.

The peer files (vLLM bench serve, GuideLLM, AIPerf; their README) were written against one CPU
vLLM serving the tiny model with prompts of 96 tokens and replies of 48 at about 3 req/s. This
script writes the schedlab run of that workload: the same server flags, 50 prompts of exactly 96
tokens (the tiny model's own tokenizer, texts drawn from the bundled chat stand-in, as
bench/client_vs_vllm_bench.py makes them), 48-token replies, a constant 3 req/s, fcfs, and
copies the run folder to tests/data/peer_results/schedlab-fcfs-openai-tiny/.

Usage: flock /tmp/schedlab-cpu.lock python -m bench.peer_schedlab_run
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.client_vs_vllm_bench import make_workload
from bench.common import ROOT, measured
from bench.vllm_cpu_common import launched_vllm, tiny_model
from runners.run.benchmark import execute_run
from runners.run.config import parse_config

TARGET = ROOT / "tests" / "data" / "peer_results" / "schedlab-fcfs-openai-tiny"
REQUESTS, INPUT_LEN, OUTPUT_LEN, RATE = 50, 96, 48, 3.0


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="schedlab-peer-"))
    model = tiny_model(ROOT / "bench" / ".tiny-model")
    dataset, _ = make_workload(model, work, REQUESTS, INPUT_LEN, OUTPUT_LEN)
    run: dict[str, Any] = {
        "run_id": "schedlab-fcfs-openai-tiny",
        "engine": {"kind": "openai", "urls": None},
        "workload": {
            "requests": REQUESTS,
            "seed": 0,
            "tokenizer": str(model),
            "ratio": {"chat": 1, "code": 0},
            "chat": {"kind": "file", "path": str(dataset)},
            "arrival": {"process": "constant", "rate": RATE},
        },
        "scheduler": {"name": "fcfs"},
    }
    with launched_vllm(model, work) as server:
        run["engine"]["urls"] = server.instances[0].endpoint.base_url
        outcome = execute_run(parse_config(run), work / "runs")
    if outcome.status != "done":
        raise SystemExit(f"the run ended {outcome.status}: {outcome.error}")
    shutil.rmtree(TARGET, ignore_errors=True)
    shutil.copytree(outcome.folder, TARGET)
    summary = outcome.summary
    print(
        f"{TARGET}: {summary.completed} requests, mean TTFT {measured(summary, 'ttft_s.mean') * 1000:.1f} ms, "
        f"mean TPOT {measured(summary, 'tpot_s.mean') * 1000:.2f} ms"
    )


if __name__ == "__main__":
    main()
