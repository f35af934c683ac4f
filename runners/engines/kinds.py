"""The engine kinds a run config can name: the simulator, every engine adapter with a launch
config (``runners/engines/adapters/``) and attaching to running servers by URL. Holds no
scheduler, so a config loads without importing the policies (``runners.registry`` adds those)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from runners.engines.adapters import ADAPTERS
from runners.engines.real_config import AttachConfig
from runners.engines.sim_config import SimulatorConfig
from runners.errors import UNION_TAGS, UnknownNameError


@dataclass(frozen=True)
class EngineEntry:
    """An engine kind: its config model and a one-line description."""

    name: str
    config: type[BaseModel]
    summary: str


#: Engine kinds by the name a config's ``engine.kind`` gives.
ENGINES: dict[str, EngineEntry] = {
    "sim": EngineEntry("sim", SimulatorConfig, "built-in discrete-event simulator of a vLLM-like engine"),
    **{
        name: EngineEntry(name, adapter.config, adapter.summary)
        for name, adapter in ADAPTERS.items()
        if adapter.config is not None
    },
    "openai": EngineEntry("openai", AttachConfig, "attach to running OpenAI-compatible servers by URL"),
}
UNION_TAGS["engine"] = frozenset(ENGINES)  # a config error names engine.model, not engine.vllm.model


def engine_entry(name: str) -> EngineEntry:
    """The engine kind ``name``; UnknownNameError naming ``engine.kind`` and the known kinds."""
    if name not in ENGINES:
        raise UnknownNameError("engine.kind", name, list(ENGINES))
    return ENGINES[name]
