"""SGLang: ``python -m sglang.launch_server``, its ``sglang:*`` metrics and ``/v1/tokenize``.

Facts from SGLang's source (the 0.5.23 release, checked against 0.5.6.post2 and 0.4.10.post2;
paths under python/sglang/): flags ``--model-path``, ``--served-model-name`` (no ``:``: that is
the LoRA syntax), ``--max-running-requests``, ``--context-length``, ``--mem-fraction-static``,
``--max-total-tokens``, ``--chunked-prefill-size``, ``--schedule-policy``, ``--page-size``,
``--dtype``; ``/metrics`` only with ``--enable-metrics`` (srt/entrypoints/http_server.py), so a
launch always sets it. Priority: ``--enable-priority-scheduling`` (0.5.x), a per-request
``priority`` integer, higher first unless ``--schedule-low-priority-values-first``; schedlab's
schedulers give vLLM's meaning (lower runs first), so a launch sets that flag too and an
attached server must have been started with both. ``min_tokens`` and ``ignore_eos`` are request
fields. ``GET /health`` answers 503 until the warm-up request has run, then 200 after a 1-token
generation. ``/v1/models`` cards are ``owned_by: "sglang"`` with ``max_model_len`` = the
effective context length. ``POST /v1/tokenize`` (0.5.4+) ``{"model", "prompt",
"add_special_tokens"}`` answers ``{"tokens", "count", "max_model_len"}``, where
``max_model_len`` is the tokenizer's own limit, not the server's, so it is not read. No
``/version``: the version is ``/server_info``'s ``version``. Streams are ``data: <json>\\n\\n``
lines ending ``data: [DONE]``, with a ``choices: []`` usage chunk when ``include_usage`` is set.
Metrics (srt/observability/metrics_collector.py): ``sglang:num_running_reqs``,
``sglang:num_queue_reqs``, ``sglang:token_usage`` (0-1), ``sglang:max_total_num_tokens`` (the KV
pool, tokens), ``sglang:time_to_first_token_seconds``, ``sglang:inter_token_latency_seconds``,
``sglang:num_retracted_requests_total`` (retractions, SGLang's preemptions).

Gauge schedule (srt/managers/scheduler_metrics_mixin.py ``log_prefill_stats`` and
``log_decode_stats``, called by srt/managers/scheduler.py on attention-TP rank 0): running,
queued and token usage are published only at each prefill batch and every
``--decode-log-interval`` decode steps (default 40), never while idle, so they lag and keep their
last non-zero values after the queue drains. A launch passes ``--decode-log-interval 1``
(:data:`DECODE_LOG_INTERVAL`, unless ``extra_args`` sets it), which shows in the recorded command;
even then the last decode batch's count stays up once the server is idle.

Tokenize (srt/entrypoints/openai/serving_tokenize.py): the 0.5.4-era file takes ``prompt`` only
and honours ``add_special_tokens``; the current one drops ``add_special_tokens`` and tokenizes a
``prompt`` as a completion request (special tokens always added) and ``messages`` as a chat
request (generation prompt always added). :class:`runners.engines.server_tokens.ServerTokenCounter`
tokenizes a known text once and counts what the endpoint adds to every text, so either version
counts exactly.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from runners.engines.adapters.base import (
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

#: ``--decode-log-interval`` a launch passes: the gauges are published every decode step.
DECODE_LOG_INTERVAL = 1


class SGLangConfig(LaunchConfig):
    """Launch ``instances`` SGLang servers (``python -m sglang.launch_server``)."""

    kind: Literal["sglang"] = "sglang"
    model: str = Field(description="model folder (--model-path)")
    served_model_name: str = "model"
    python: str = Field(default=sys.executable, description="Python of the environment SGLang is installed in")
    command: list[str] | None = Field(
        default=None, description="server command prefix; default [python, -m, sglang.launch_server]"
    )
    max_running_requests: int | None = Field(default=None, gt=0, le=65_536, description="batch cap")
    context_length: int | None = Field(default=None, gt=0, le=10_000_000, description="tokens")
    mem_fraction_static: float | None = Field(default=None, gt=0, le=1)
    max_total_tokens: int | None = Field(default=None, gt=0, le=100_000_000, description="KV pool size, tokens")
    chunked_prefill_size: int | None = Field(default=None, ge=-1, le=10_000_000, description="-1 disables")
    schedule_policy: Literal["fcfs", "lpm", "random", "dfs-weight", "lof"] = "fcfs"
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        default="fcfs", description="'priority': --enable-priority-scheduling (lower values first, as vLLM)"
    )
    page_size: int | None = Field(default=None, gt=0, le=4096)
    dtype: str | None = None

    @field_validator("served_model_name")
    @classmethod
    def _no_colon(cls, value: str) -> str:
        if ":" in value:
            raise ValueError("must not contain ':' (SGLang reads model:adapter as a LoRA adapter)")
        return value


class SGLangAdapter(PythonModuleAdapter):
    name = "sglang"
    order = 30
    summary = "launch SGLang servers (python -m sglang.launch_server)"
    config = SGLangConfig
    owned_by = ("sglang",)
    module = "sglang.launch_server"
    model_flag = "--model-path"
    context_flag = "--context-length"
    version_path = "/server_info"
    kv_log_pattern = re.compile(r"max_total_num_tokens=(\d+)")
    install_hint = "not installed here: install SGLang in its own environment, or attach to a running server"
    # this engine's own metric names, tokenize path and Launch-page flags: alike in shape to vllm.py's,
    # kept apart as each is that engine's wire format
    metrics = MetricNames(
        prefix="sglang:",
        kv_usage=("sglang:token_usage",),
        running=("sglang:num_running_reqs",),
        waiting=("sglang:num_queue_reqs",),
        preemptions=("sglang:num_retracted_requests_total",),
        ttft=("sglang:time_to_first_token_seconds",),
        itl=("sglang:inter_token_latency_seconds",),
        kv_capacity_tokens=("sglang:max_total_num_tokens",),
    )
    tokenize_api = prompt_tokenize_api("/v1/tokenize", reply_limit_is_context=False)
    form_fields = (
        python_form_field("SGLang"),
        FormField("engine.max_running_requests", "--max-running-requests", "int", step=1),
        FormField("engine.context_length", "--context-length", "int", step=256),
        FormField("engine.mem_fraction_static", "--mem-fraction-static", "float", step=0.05),
        FormField(
            "engine.schedule_policy",
            "--schedule-policy",
            "choice",
            choices=("fcfs", "lpm", "random", "dfs-weight", "lof"),
        ),
        FormField(
            "engine.scheduling_policy",
            "--enable-priority-scheduling",
            "flag",
            "the engine orders its queue by the scheduler's priority (lower values first)",
            flag_value="priority",
        ),
        FormField("engine.use_gpus", "Set CUDA_VISIBLE_DEVICES per instance", "flag", flag_value=True),
    )

    @classmethod
    def capabilities(cls, scheduling_policy: str = "fcfs") -> Capabilities:
        return Capabilities(min_tokens=True, priority=scheduling_policy == "priority")

    @classmethod
    def server_command(cls, config: SGLangConfig, port: int) -> list[str]:
        # --enable-cache-report: each reply's usage says how many prompt tokens its radix cache held
        command = cls.module_command(config, port) + ["--enable-metrics", "--enable-cache-report"]
        if not any(arg.split("=", 1)[0] == "--decode-log-interval" for arg in config.extra_args):
            command += ["--decode-log-interval", str(DECODE_LOG_INTERVAL)]
        command += optional_flags(
            {
                "--max-running-requests": config.max_running_requests,
                "--context-length": config.context_length,
                "--mem-fraction-static": config.mem_fraction_static,
                "--max-total-tokens": config.max_total_tokens,
                "--chunked-prefill-size": config.chunked_prefill_size,
                "--page-size": config.page_size,
                "--dtype": config.dtype,
            }
        )
        command += ["--schedule-policy", config.schedule_policy]
        if config.scheduling_policy == "priority":
            command += ["--enable-priority-scheduling", "--schedule-low-priority-values-first"]
        return command + list(config.extra_args)

    display_name = "SGLang"

    @classmethod
    def launch_limits(cls, config: SGLangConfig) -> dict[str, tuple[Any, str]]:
        if config.max_running_requests is None:
            return {}
        return {"max_num_seqs": (config.max_running_requests, "--max-running-requests")}

    @classmethod
    def discovered_limits(cls, info: Mapping[str, Any] | None) -> dict[str, tuple[Any, str]]:
        """From /server_info (its server arguments, flat): ``max_running_requests`` (SGLang
        sizes it from its KV pool when unset, and then reports null) and ``disable_radix_cache``."""
        info = info or {}
        found: dict[str, tuple[Any, str]] = {}
        slots = positive_int(info.get("max_running_requests"))
        if slots is not None:
            found["max_num_seqs"] = (slots, "discovered (/server_info max_running_requests)")
        if isinstance(info.get("disable_radix_cache"), bool):
            found["prefix_caching"] = (not info["disable_radix_cache"], "discovered (/server_info disable_radix_cache)")
        return found

    @classmethod
    def context_limit(cls, config: SGLangConfig) -> int | None:
        return config.context_length
