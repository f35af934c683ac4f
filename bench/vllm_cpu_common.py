"""Shared set-up for the benchmarks that need a real CPU vLLM: its Python, a tiny model, the
engine config that serves it and a launched server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import RESULTS, ROOT

if TYPE_CHECKING:
    from runners.app.profiler import StepSample
    from runners.engines.real_engine import RealEngine, RealInstance

#: The bundled tiny-CPU profile (fitted and written by bench/sim_fidelity.py, with its fidelity
#: report): what the model-based policies plan with on the CPU vLLM.
TINY_PROFILE = RESULTS / "tiny-cpu-vllm.profile.yaml"
#: The CPU vLLM server's environment: 1 GiB of KV cache, no hub.
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
#: What the benchmarks that profile the CPU vLLM ran on (a profile's ``source`` starts with the script's name, then this).
TINY_ENGINE = "vllm-cpu 0.32.0, tiny random Llama (2 layers, hidden 256), this machine's 2 cores"


def tiny_sla_target_s() -> float:
    """The tiny CPU engine's decode target, seconds: the bundled profile's decode step at a batch
    of 32 (half the servers' 64 slots) and a 320-token context (half of in_engine's 640-token
    filter); what D_SLA and the TPOT bound scale to on this engine (the papers' 50 ms is a GPU
    model's step)."""
    from runners.engines.profile import load_profile

    return round(load_profile(TINY_PROFILE).latency_model().decode_step_time(32, 320.0), 4)


def vllm_python() -> str:
    """SCHEDLAB_VLLM_PYTHON, else .venv-vllm/bin/python (created by .ci/install-vllm-cpu.sh)."""
    python = os.environ.get("SCHEDLAB_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(python).exists():
        sys.exit("no vLLM environment: run `bash .ci/install-vllm-cpu.sh` or set SCHEDLAB_VLLM_PYTHON")
    return python


def tiny_model(folder: Path) -> Path:
    """The tiny random Llama in ``folder``, built there by tools/tiny_model.py (with the vLLM
    environment's Python, at most 10 minutes) unless it is there."""
    if not (folder / "model.safetensors").exists():
        subprocess.run(
            [vllm_python(), str(ROOT / "tools" / "tiny_model.py"), str(folder)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=600,
        )
    return folder


#: Set to 1 (tests/conftest.py does) to start every server of :func:`vllm_engine` with
#: ``--enforce-eager``: no torch.compile warm-up, which took 30-60 s of each start on 2 cores
#: (bench/vllm_startup.py). The tests check schedlab's behaviour against the engine, not vLLM's
#: compiled speed; the benchmarks keep vLLM's default (compiled).
EAGER_ENV = "SCHEDLAB_VLLM_EAGER"


def eager_args() -> list[str]:
    """``["--enforce-eager"]`` when :data:`EAGER_ENV` is 1, else nothing."""
    return ["--enforce-eager"] if os.environ.get(EAGER_ENV) == "1" else []


def vllm_engine(model: Path, **overrides: Any) -> dict[str, Any]:
    """Engine config launching the CPU vLLM on the tiny model (1 GiB of KV cache); ``extra_args``
    in ``overrides`` come after :func:`eager_args`."""
    extra = [*eager_args(), *overrides.pop("extra_args", [])]
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
        "env": dict(SERVER_ENV),
        "extra_args": extra,
        **overrides,
    }


@contextmanager
def launched_vllm(model: Path, log_folder: Path, **overrides: Any) -> Iterator[RealEngine]:
    """The CPU vLLM launched on the tiny model with :func:`vllm_engine`'s config (``overrides`` on
    top), up for the body of the ``with``; yields the started RealEngine (``.config``,
    ``.instances``), its server logs in ``log_folder``."""
    from runners.engines.real_engine import RealEngine
    from runners.run.config import parse_config

    engine = RealEngine(config=parse_config({"engine": vllm_engine(model, **overrides)}).engine, log_folder=log_folder)
    try:
        engine.start()
        yield engine
    finally:
        engine.stop()


def measure_engine_steps(
    instance: RealInstance, max_num_batched_tokens: int, phases: Collection[str] | None = None
) -> list[StepSample]:
    """The launched instance's steps, measured by the step profiler
    (:func:`runners.app.profiler.measure_steps`, its default grid; ``phases``: those only, default
    all), its progress printed."""
    from runners.app.profiler import PHASES, StepGrid, measure_steps

    return asyncio.run(
        measure_steps(
            instance.endpoint,
            StepGrid(),
            max_num_batched_tokens,
            progress=lambda m: print(m, flush=True),
            phases=PHASES if phases is None else phases,
        )
    )


def reset_prefix_cache(base_url: str) -> None:
    """Empty the launched server's prefix cache (runners.engines.cache_reset: vLLM's
    ``POST /reset_prefix_cache``, served when the server runs with ``VLLM_SERVER_DEV_MODE=1``), so a
    run's hits are its own: runs that send the same text (a trace replayed twice) would otherwise
    hit the blocks an earlier run left. RuntimeError saying why when it could not be emptied."""
    from runners.engines.cache_reset import reset_prefix_cache as reset

    problem = reset(base_url)
    if problem is not None:
        raise RuntimeError(problem)
