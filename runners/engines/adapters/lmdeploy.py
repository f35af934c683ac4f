"""LMDeploy: ``lmdeploy serve api_server`` (GPU only: it has no CPU backend), its metric names and
``POST /v1/encode``.

Facts from InternLM/lmdeploy's source (lmdeploy/serve/openai/api_server.py, protocol.py,
lmdeploy/metrics/loggers.py of v0.10-v0.11): no ``min_tokens`` or ``priority`` request field;
``POST /v1/encode`` ``{"input", "do_preprocess", "add_bos"}`` answered by
``{"input_ids", "length"}`` (``do_preprocess`` applies the chat template); metrics
``lmdeploy:gpu_cache_usage_perc``, ``lmdeploy:num_requests_running``,
``lmdeploy:num_requests_waiting``, ``lmdeploy:time_to_first_token_seconds``, the inter-token
latency histogram ``lmdeploy:iter_token_latency`` (seconds; no ``_seconds`` suffix). It reports no
context limit (no ``max_model_len`` on its ``/v1/models`` cards).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from runners.engines.adapters.base import EngineAdapter, FormField, LaunchConfig, MetricNames, reply_count
from runners.engines.real_config import optional_flags
from runners.engines.tokenize_api import TokenizeAPI


class LMDeployConfig(LaunchConfig):
    """Launch ``instances`` LMDeploy ``api_server`` processes (GPU only: LMDeploy has no CPU backend)."""

    kind: Literal["lmdeploy"] = "lmdeploy"
    model: str
    model_name: str = "model"
    command: list[str] = Field(default_factory=lambda: ["lmdeploy", "serve", "api_server"])
    backend: Literal["turbomind", "pytorch"] = "turbomind"
    max_batch_size: int | None = Field(default=None, gt=0, le=65_536)
    cache_max_entry_count: float | None = Field(default=None, gt=0, le=1)
    session_len: int | None = Field(default=None, gt=0, le=10_000_000)
    tp: int | None = Field(default=None, gt=0, le=64)


def _encode_text(model: str, text: str) -> dict[str, Any]:
    return {"input": text, "do_preprocess": False, "add_bos": False}


def _encode_overhead(model: str, api: str) -> dict[str, Any]:
    return {"input": "", "do_preprocess": api == "chat", "add_bos": True}


class LMDeployAdapter(EngineAdapter):
    name = "lmdeploy"
    order = 20
    summary = "launch LMDeploy api_server processes (GPU only)"
    config = LMDeployConfig
    owned_by = ("lmdeploy",)
    cli = "lmdeploy"
    module = "lmdeploy"
    context_flag = "--session-len"
    install_hint = "not installed here (GPU only): attach to a running api_server by URL"
    metrics = MetricNames(
        prefix="lmdeploy:",
        kv_usage=("lmdeploy:gpu_cache_usage_perc",),
        running=("lmdeploy:num_requests_running",),
        waiting=("lmdeploy:num_requests_waiting",),
        ttft=("lmdeploy:time_to_first_token_seconds",),
        itl=("lmdeploy:iter_token_latency",),
    )
    tokenize_api = TokenizeAPI(
        "/v1/encode",
        _encode_text,
        _encode_overhead,
        reply_count("length", "input_ids"),
        lambda reply: None,
        '{"input_ids": [...], "length": <tokens>}',
    )
    form_fields = (
        FormField("engine.backend", "--backend", "choice", choices=("turbomind", "pytorch")),
        FormField("engine.max_batch_size", "--max-batch-size", "int", step=1),
        FormField("engine.cache_max_entry_count", "--cache-max-entry-count", "float", step=0.05),
        FormField("engine.tp", "--tp", "int", step=1),
    )

    @classmethod
    def server_command(cls, config: LMDeployConfig, port: int) -> list[str]:
        command = list(config.command) + [
            config.model,
            "--server-name",
            config.host,
            "--server-port",
            str(port),
            "--backend",
            config.backend,
            "--model-name",
            config.model_name,
        ]
        command += optional_flags(
            {
                "--max-batch-size": config.max_batch_size,
                "--cache-max-entry-count": config.cache_max_entry_count,
                "--session-len": config.session_len,
                "--tp": config.tp,
            }
        )
        return command + list(config.extra_args)

    @classmethod
    def served_model(cls, config: LMDeployConfig) -> str:
        return config.model_name

    @classmethod
    def max_num_seqs(cls, config: LMDeployConfig) -> int | None:
        return config.max_batch_size

    @classmethod
    def context_limit(cls, config: LMDeployConfig) -> int | None:
        return config.session_len
