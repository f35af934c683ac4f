"""Which engines this machine can drive now, for the home page: cheap checks, no process started."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class EngineAvailability:
    name: str
    available: bool
    detail: str


def _vllm_python() -> str | None:
    for candidate in (os.environ.get("SCHEDLAB_VLLM_PYTHON"), str(ROOT / ".venv-vllm" / "bin" / "python")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def find_engines() -> list[EngineAvailability]:
    """The simulator always; vLLM when it is importable here or a vLLM environment is known
    (SCHEDLAB_VLLM_PYTHON or .venv-vllm); LMDeploy when its CLI or package is present; attaching
    to running servers by URL always."""
    found = [EngineAvailability("sim", True, "built-in simulator, always available")]
    vllm_python = _vllm_python()
    if importlib.util.find_spec("vllm") is not None:
        found.append(EngineAvailability("vllm", True, "vLLM importable in this Python: launchable"))
    elif vllm_python:
        found.append(EngineAvailability("vllm", True, f"vLLM environment at {vllm_python}: launchable"))
    else:
        found.append(EngineAvailability("vllm", False, "not installed here: install it in its own environment "
                                                       "(README) or attach to a running server"))
    lmdeploy_cli = shutil.which("lmdeploy")
    if lmdeploy_cli or importlib.util.find_spec("lmdeploy") is not None:
        found.append(EngineAvailability("lmdeploy", True, f"LMDeploy found ({lmdeploy_cli or 'package'}): launchable"))
    else:
        found.append(EngineAvailability("lmdeploy", False, "not installed here (GPU only): attach to a running "
                                                           "api_server by URL"))
    found.append(EngineAvailability("openai", True, "attach to running vLLM / LMDeploy / OpenAI-compatible servers"))
    return found
