"""The simulated engine's config (``engine.kind: sim``): a profile (preset or file) plus
overrides, resolved into the numbers :class:`~runners.engines.simulator.SimulatedInstance` takes.
The real engines' configs live with their adapters (``runners/engines/adapters/``) and in
:mod:`runners.engines.real_config` (shared options, attach)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field

from runners.engines.kv_cache import GPUBudget, ModelShape, kv_capacity_tokens
from runners.engines.latency_model import LatencyModel
from runners.engines.profile import EngineProfile, resolve_profile
from runners.errors import ConfigError
from runners.input_model import InputModel

#: Largest KV capacity a config may give, tokens: a thousand times a 141 GB GPU's cache for a 7B
#: model (about a million tokens); beyond it a number is a typo, not an engine.
MAX_KV_CAPACITY_TOKENS = 1_000_000_000


class SimulatorConfig(InputModel):
    """The simulated engine: a profile (preset or file) plus optional overrides."""

    kind: Literal["sim"] = "sim"
    preset: str = "qwen2.5-7b-2xv100-vllm"
    profile: str | None = Field(default=None, description="profile file (JSON/YAML); overrides preset")
    instances: int = Field(default=1, gt=0, le=64)
    kv_capacity_tokens: int | None = Field(
        default=None, gt=0, le=MAX_KV_CAPACITY_TOKENS, description="override KV capacity, tokens"
    )
    model: ModelShape | None = Field(default=None, description="compute KV capacity from this shape")
    gpu: GPUBudget | None = None
    block_size: int | None = Field(default=None, gt=0, le=4096, description="tokens per KV block")
    max_num_seqs: int | None = Field(default=None, gt=0, le=65_536, description="most requests running at once")
    max_num_batched_tokens: int | None = Field(default=None, gt=0, le=10_000_000, description="tokens per step")
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    run_to_completion: bool = Field(default=False, description="hold KV until the batch ends (static server)")
    prefix_caching: bool = Field(
        default=True,
        description="model vLLM's automatic prefix caching (on by default in vLLM V1): full KV blocks stay cached "
        "after their request leaves, until evicted least recently freed first, and a later prompt that "
        "starts with the same blocks skips computing them (shared system prompts, a session's earlier "
        "turns, a trace's hash_ids; a preempted or re-sent request reuses its own)",
    )
    serving_overhead: bool = Field(
        default=True,
        description="add the profile's serving front-end delay (HTTP, tokenisation, streaming) before the engine "
        "sees a request, as a client of a real server waits; false: the engine alone",
    )
    planning_model: Literal["fitted", "engine-truth"] = Field(
        title="policy's latency model",
        default="fitted",
        description="the latency model a policy plans with - fitted: eq. 14/15 fitted to a simulated profile "
        "of this engine with a real profile's measurement noise (runners/engines/planning_model.py; its "
        "error is recorded with the run); engine-truth: the simulated engine's own model, an oracle no "
        "deployment has (labelled as one)",
    )
    planning_error: float = Field(
        title="injected latency-model error (relative std)",
        default=0.0,
        ge=0,
        le=1,
        description="a known error on the policy's latency model: each coefficient times max(0, 1 + e z), "
        "z standard normal from the workload seed (the sensitivity study of Fig. 10 in Huang et al.'s "
        "SLO-aware scheduling paper); 0 to 1",
    )
    pace: float | None = Field(
        default=None,
        ge=0.001,
        le=1_000_000.0,
        description="simulated seconds per wall-clock second (1 = real time), so a run can be watched live; "
        "unset = as fast as possible. Only delays the driver: every measured value is the same. "
        "0.001 (a simulated second every 17 minutes) to 1,000,000",
    )

    def resolve(self) -> "ResolvedSimulator":
        """Merge the profile and the overrides; ConfigError on an impossible combination."""
        profile = resolve_profile(self.preset, self.profile)
        block_size = self.block_size or profile.block_size
        if self.kv_capacity_tokens is not None:
            capacity = self.kv_capacity_tokens
        elif self.model is not None or self.gpu is not None:
            model = self.model or profile.model
            gpu = self.gpu or profile.gpu
            if model is None or gpu is None:
                raise ConfigError("engine.model", "give both engine.model and engine.gpu to compute KV capacity")
            capacity = kv_capacity_tokens(model, gpu, block_size)
            if capacity <= 0:
                raise ConfigError(
                    "engine.gpu", f"model weights ({model.weight_bytes / 1e9:.1f} GB) leave no room for KV cache"
                )
        else:
            capacity = profile.capacity_tokens()
        if capacity < block_size:
            if self.kv_capacity_tokens is not None:
                source = "engine.kv_capacity_tokens"
            elif self.model is not None or self.gpu is not None:
                source = "engine.gpu"
            else:
                source = f"engine.profile: {self.profile}: kv_capacity_tokens" if self.profile else "engine.preset"
            raise ConfigError(source, f"a KV cache of {capacity} tokens is less than one block ({block_size} tokens)")
        if capacity > MAX_KV_CAPACITY_TOKENS:
            source = "engine.gpu" if self.model is not None or self.gpu is not None else "engine.profile"
            raise ConfigError(
                source,
                f"the model and GPU give a KV cache of {capacity:,} tokens; expected at most "
                f"{MAX_KV_CAPACITY_TOKENS:,}",
            )
        latency = profile.latency_model()
        return ResolvedSimulator(
            profile=profile,
            latency=latency if self.serving_overhead else replace(latency, overhead=None),
            kv_capacity_tokens=(capacity // block_size) * block_size,
            block_size=block_size,
            max_num_seqs=self.max_num_seqs or profile.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens or profile.max_num_batched_tokens,
        )


@dataclass(frozen=True)
class ResolvedSimulator:
    """A :class:`SimulatorConfig` with its profile and overrides merged: the profile, the step-time
    model (without the serving overhead when ``serving_overhead`` is off), the KV capacity
    (tokens, a whole number of blocks), the block size (tokens) and the scheduler's limits."""

    profile: EngineProfile
    latency: LatencyModel
    kv_capacity_tokens: int
    block_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
