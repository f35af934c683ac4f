"""Which engines this machine can drive now, for the home page: cheap checks, no process started."""

from __future__ import annotations

from runners.engines.adapters import ADAPTERS, Availability


def find_engines() -> list[Availability]:
    """The simulator always; each engine adapter's own check (its package importable, its CLI on
    PATH, or for vLLM a known environment: SCHEDLAB_VLLM_PYTHON or .venv-vllm); attaching to
    running servers by URL always."""
    found = [Availability("sim", True, "built-in simulator, always available")]
    found += [adapter.availability() for adapter in ADAPTERS.values() if adapter.config is not None]
    names = " / ".join(adapter.name for adapter in ADAPTERS.values())
    found.append(Availability("openai", True, f"attach to running {names} / OpenAI-compatible servers"))
    return found
