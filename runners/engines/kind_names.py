"""The engine kinds' names, for text that must not import the engines (the command line's
``--help``). :data:`runners.engines.kinds.ENGINES` is the registry; a test
(``tests/unit/test_registries.py``) holds these names to it, in its order."""

from __future__ import annotations

#: Every engine kind a run config's ``engine.kind`` can name, in the registry's order.
ENGINE_KINDS: tuple[str, ...] = ("sim", "vllm", "lmdeploy", "sglang", "openai")
#: The kinds whose servers schedlab launches itself (the simulator runs in-process; openai attaches).
LAUNCHED_KINDS: tuple[str, ...] = tuple(kind for kind in ENGINE_KINDS if kind not in ("sim", "openai"))
