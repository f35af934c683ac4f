"""The client side of schedlab's in-engine schedulers (``engine-<name>``): the policy runs inside
vLLM as its scheduler class (runners/engines/vllm_scheduler/), so the client sends every request
on arrival, as FCFS does, and the engine decides what runs. Its parameters are the in-engine
class's; the run writes them into its folder for the server (see ``launch_settings``)."""

from __future__ import annotations

from typing import ClassVar

from runners.engines.vllm_scheduler import EngineDynamicMemoryParams
from runners.schedulers.base import PolicyParams
from runners.schedulers.fcfs import FCFSPolicy


class InEnginePolicy(FCFSPolicy):
    """Dispatch on arrival (FCFS, no cap); the engine's scheduler class decides. ``twin``: the
    client-side policy with the same decision logic."""

    twin: ClassVar[str] = ""
    in_engine: ClassVar[bool] = True


class EngineDynamicMemoryPolicyParams(EngineDynamicMemoryParams, PolicyParams):
    """engine-dynamic-mem's parameters, as a policy's (the in-engine class reads the same model)."""

    #: FCFS dispatch without a cap (the engine holds requests back, not the client)
    max_in_flight: ClassVar[None] = None


class EngineDynamicMemoryPolicy(InEnginePolicy):
    name = "engine-dynamic-mem"
    summary = ("000 Alg. 1 inside vLLM: each step the engine's running limit comes from its free KV blocks "
               "(block-exact); the client sends on arrival. Needs a vLLM launched by schedlab")
    paper = "000 (dynamic batching), Alg. 1, as a vLLM scheduler class"
    twin = "dynamic-mem"
    Params = EngineDynamicMemoryPolicyParams
