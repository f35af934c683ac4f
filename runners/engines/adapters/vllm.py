"""vLLM: ``python -m vllm.entrypoints.openai.api_server``, its /metrics names and /tokenize.

Facts from vLLM's source (0.11-0.32): the request fields ``min_tokens``, ``ignore_eos`` and,
with ``--scheduling-policy priority``, ``priority`` (vllm/entrypoints/openai/protocol.py);
``POST /tokenize`` ``{"model", "prompt", "add_special_tokens"}`` or ``{"model", "messages",
"add_generation_prompt"}`` answered by ``{"count", "max_model_len", "tokens"}``
(vllm/entrypoints/serve/tokenize/protocol.py); metric names in vllm/v1/metrics/loggers.py (V1)
and the older ``gpu_cache_usage_perc`` / ``time_per_output_token_seconds`` names. vLLM V1
observes the inter-token latency once per output token of each running request.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from runners.engines.adapters.base import (
    Availability,
    Capabilities,
    FormField,
    LaunchConfig,
    MetricNames,
    PythonModuleAdapter,
    positive_int,
    prompt_tokenize_api,
    python_form_field,
)
from runners.engines.real_config import optional_flags
from runners.paths import ROOT


class VLLMConfig(LaunchConfig):
    """Launch ``instances`` vLLM OpenAI-compatible servers."""

    kind: Literal["vllm"] = "vllm"
    model: str = Field(description="model folder or hub id (hubs are unreachable here: use a folder)")
    served_model_name: str = "model"
    python: str = Field(default=sys.executable, description="Python of the environment vLLM is installed in")
    command: list[str] | None = Field(
        default=None, description="server command prefix; default [python, -m, vllm.entrypoints.openai.api_server]"
    )
    max_num_seqs: int | None = Field(default=None, gt=0, le=65_536)
    max_num_batched_tokens: int | None = Field(default=None, gt=0, le=10_000_000)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    num_gpu_blocks_override: int | None = Field(default=None, gt=0, le=100_000_000)
    max_model_len: int | None = Field(default=None, gt=0, le=10_000_000)
    dtype: str | None = None
    block_size: int | None = Field(default=None, gt=0, le=4096)
    scheduler_cls: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$",
        description="vLLM --scheduler-cls: the engine's scheduler class as a qualified name (mod.Class); "
        "schedlab's own in-engine schedulers (runners.schedulers.vllm...) are put on the "
        "server's PYTHONPATH, nothing is installed into the vLLM environment",
    )


class VLLMAdapter(PythonModuleAdapter):
    name = "vllm"
    order = 10
    summary = "launch vLLM OpenAI-compatible servers (one per GPU)"
    config = VLLMConfig
    owned_by = ("vllm",)
    module = "vllm.entrypoints.openai.api_server"
    install_hint = (
        "not installed here: install it in its own environment (docs/engines.md) or attach to a running server"
    )
    model_flag = "--model"
    context_flag = "--max-model-len"
    kv_log_pattern = re.compile(r"(?:GPU|CPU) KV cache size:\s*([\d,]+)\s*tokens")
    # this engine's own metric names, tokenize path and Launch-page flags: alike in shape to sglang.py's,
    # kept apart as each is that engine's wire format
    metrics = MetricNames(
        prefix="vllm:",
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        running=("vllm:num_requests_running",),
        waiting=("vllm:num_requests_waiting",),
        preemptions=("vllm:num_preemptions_total", "vllm:num_preemptions"),
        ttft=("vllm:time_to_first_token_seconds",),
        itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        cache_info=("vllm:cache_config_info",),
        prefix_queries=("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"),
        prefix_hits=("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"),
    )
    tokenize_api = prompt_tokenize_api("/tokenize", reply_limit_is_context=True)
    form_fields = (
        python_form_field("vLLM"),
        FormField("engine.max_num_seqs", "--max-num-seqs", "int", step=1),
        FormField("engine.max_model_len", "--max-model-len", "int", step=256),
        FormField("engine.gpu_memory_utilization", "--gpu-memory-utilization", "float", step=0.05),
        FormField(
            "engine.scheduling_policy",
            "--scheduling-policy priority",
            "flag",
            "the engine orders its queue by the scheduler's priority",
            flag_value="priority",
        ),
        FormField(
            "engine.use_gpus", "Set CUDA_VISIBLE_DEVICES per instance (off for the CPU build)", "flag", flag_value=True
        ),
    )

    @classmethod
    def capabilities(cls, scheduling_policy: str = "fcfs") -> Capabilities:
        return Capabilities(min_tokens=True, priority=scheduling_policy == "priority", engine_args=True)

    @classmethod
    def server_command(cls, config: VLLMConfig, port: int) -> list[str]:
        command = cls.module_command(config, port)
        command += optional_flags(
            {
                "--max-num-seqs": config.max_num_seqs,
                "--max-num-batched-tokens": config.max_num_batched_tokens,
                "--gpu-memory-utilization": config.gpu_memory_utilization,
                "--num-gpu-blocks-override": config.num_gpu_blocks_override,
                "--max-model-len": config.max_model_len,
                "--dtype": config.dtype,
                "--block-size": config.block_size,
            }
        )
        command += ["--scheduling-policy", config.scheduling_policy]
        # each reply's usage then says how many prompt tokens the prefix cache held (cached_tokens)
        command += ["--enable-prompt-tokens-details"]
        if config.scheduler_cls:
            command += ["--scheduler-cls", config.scheduler_cls]
        return command + list(config.extra_args)

    @classmethod
    def server_env(cls, config: VLLMConfig) -> dict[str, str]:
        """With one of schedlab's in-engine schedulers (a ``runners.`` class), the repository root
        goes first on the server's PYTHONPATH so its Python imports the class from here."""
        if not config.scheduler_cls or not config.scheduler_cls.startswith("runners."):
            return {}
        inherited = config.env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        if str(ROOT) in inherited.split(os.pathsep):  # launch_settings put it there already
            return {}
        return {"PYTHONPATH": os.pathsep.join(part for part in (str(ROOT), inherited) if part)}

    display_name = "vLLM"
    #: answered only with VLLM_SERVER_DEV_MODE=1 (vllm/entrypoints/serve/dev/server_info): the
    #: whole VllmConfig, whose scheduler_config and cache_config hold the limits
    limits_path = "/server_info?config_format=json"

    @classmethod
    def launch_limits(cls, config: VLLMConfig) -> dict[str, tuple[Any, str]]:
        stated = {
            "max_num_seqs": (config.max_num_seqs, "--max-num-seqs"),
            "max_num_batched_tokens": (config.max_num_batched_tokens, "--max-num-batched-tokens"),
        }
        return {name: pair for name, pair in stated.items() if pair[0] is not None}

    @classmethod
    def discovered_limits(cls, info: Mapping[str, Any] | None) -> dict[str, tuple[Any, str]]:
        config = (info or {}).get("vllm_config")
        if not isinstance(config, Mapping):
            return {}
        scheduler: Mapping[str, Any] = config.get("scheduler_config") or {}
        cache: Mapping[str, Any] = config.get("cache_config") or {}
        if not isinstance(scheduler, Mapping) or not isinstance(cache, Mapping):
            return {}
        found: dict[str, tuple[Any, str]] = {}
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            value = positive_int(scheduler.get(name))
            if value is not None:
                found[name] = (value, f"discovered (/server_info scheduler_config.{name})")
        if isinstance(cache.get("enable_prefix_caching"), bool):
            found["prefix_caching"] = (cache["enable_prefix_caching"], "discovered (/server_info cache_config)")
        return found

    @classmethod
    def documented_limits(cls, launch: Any | None) -> dict[str, tuple[Any, str]]:
        """vLLM's OpenAI-server defaults (vllm/engine/arg_utils.py, by hardware): on a CPU build
        128 slots and 2,048 batched tokens; on GPUs under 70 GiB 256 and 2,048; on H100/H200 1,024
        and 8,192. A launch with ``use_gpus`` off is the CPU build; an attached server's hardware
        is not known, so it is taken as a GPU under 70 GiB and said so."""
        if launch is not None and not getattr(launch, "use_gpus", True):
            return {
                "max_num_seqs": (128, "vLLM's CPU-build default"),
                "max_num_batched_tokens": (2048, "vLLM's CPU-build default"),
                "prefix_caching": (True, "vLLM V1's default"),
            }
        other = "on GPUs under 70 GiB (128 on a CPU build, 1,024 on H100/H200): set engine.max_num_seqs"
        return {
            "max_num_seqs": (256, f"vLLM's default {other}"),
            "max_num_batched_tokens": (2048, "vLLM's default on GPUs under 70 GiB (8,192 on H100/H200)"),
            "prefix_caching": (True, "vLLM V1's default"),
        }

    @classmethod
    def context_limit(cls, config: VLLMConfig) -> int | None:
        return config.max_model_len

    @classmethod
    def known_pythons(cls) -> list[str]:
        """The Pythons of vLLM environments named by ``SCHEDLAB_VLLM_PYTHON`` or at ``.venv-vllm``, where they exist."""
        candidates = (os.environ.get("SCHEDLAB_VLLM_PYTHON"), str(ROOT / ".venv-vllm" / "bin" / "python"))
        return [candidate for candidate in candidates if candidate and Path(candidate).exists()]

    @classmethod
    def availability(cls) -> Availability:
        """Importable here, or a vLLM environment known by SCHEDLAB_VLLM_PYTHON or .venv-vllm
        (:meth:`known_pythons`: the Launch form points at it when its Python field lacks vLLM)."""
        found = super().availability()
        if found.available:
            return found
        for candidate in cls.known_pythons():
            return Availability(
                cls.name,
                True,
                f"vLLM environment at {candidate}: launchable with it as the Launch form's Python of the vLLM environment",
            )
        return Availability(cls.name, False, cls.install_hint)
