"""LMDeploy: ``lmdeploy serve api_server`` (GPU only: it has no CPU backend), its metric names and
``POST /v1/encode``.

Facts from InternLM/lmdeploy's source (lmdeploy/serve/openai/api_server.py, protocol.py,
lmdeploy/metrics/loggers.py and stats.py of v0.10.2, v0.11.0 and 0.16.0): no ``min_tokens`` or
``priority`` request field; ``POST /v1/encode`` ``{"input", "do_preprocess", "add_bos"}`` answered
by ``{"input_ids", "length"}`` (``do_preprocess`` applies the chat template); metrics
``lmdeploy:gpu_cache_usage_perc``, ``lmdeploy:num_requests_running``,
``lmdeploy:num_requests_waiting``, ``lmdeploy:time_to_first_token_seconds``. It reports no
context limit (no ``max_model_len`` on its ``/v1/models`` cards).

Metrics switch (lmdeploy/cli/utils.py, api_server.py ``mount_metrics``): v0.10.x serves no
``/metrics`` unless started with ``--enable-metrics`` (store_true, default False); from v0.11.0
metrics are on unless ``--disable-metrics``. A launch asks the command's ``--help`` once which of
the two it offers (:func:`metrics_flags`) and passes ``--enable-metrics`` where that is the switch,
so the flag shows in the recorded command.

Inter-token latency (lmdeploy/metrics/stats.py ``IterationStats.update_from_output``, v0.10.2 to
0.16.0): both histograms are observed once per engine output, not per token;
``lmdeploy:iter_token_latency`` observes the whole gap since the request's previous output
(several tokens' worth when an output carries several), ``lmdeploy:time_per_output_token_seconds``
that gap divided by the output's new tokens. Only the latter is a per-token latency, so it is the
one read.

Waiting (lmdeploy/serve/core/async_engine.py, metrics/loggers.py and stats.py, v0.13.0 to 0.16.0):
the API layer holds a pool of max-batch-size request handles; a request beyond it waits for a
handle and is counted only in ``lmdeploy:num_api_requests_waiting`` (requests not completed minus
those routed to a handle), never in ``lmdeploy:num_requests_waiting`` (the engine's own queue).
Telemetry adds the two (``waiting_extra``), so overload shows as waiting requests.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
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


#: Longest wait for ``<command> --help`` to list the server's flags, seconds (LMDeploy imports torch first).
HELP_TIMEOUT_S = 120.0
#: ``--help`` output per (command, environment), so each command is asked once per process.
_HELP_TEXT: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], str | None] = {}


def _help_text(command: list[str], env: dict[str, str]) -> str | None:
    """What ``command --help`` prints (stdout and stderr), asked once per command and
    environment; None when it cannot be run or does not finish within :data:`HELP_TIMEOUT_S`."""
    key = (tuple(command), tuple(sorted(env.items())))
    if key not in _HELP_TEXT:
        try:
            done = subprocess.run(
                [*command, "--help"],
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=HELP_TIMEOUT_S,
            )
            _HELP_TEXT[key] = done.stdout + done.stderr
        except (OSError, subprocess.SubprocessError):
            _HELP_TEXT[key] = None
    return _HELP_TEXT[key]


def _names_lmdeploy(command: list[str]) -> bool:
    """Whether ``command`` runs LMDeploy's own CLI (an element named ``lmdeploy...``: the
    ``lmdeploy`` program, a script of that name): only then is its ``--help`` asked. A wrapper
    (``python -c ...``, a shell script) might do anything with ``--help``, even start the server;
    for such a command of a v0.10.x server add ``--enable-metrics`` to ``extra_args``."""
    return any(Path(part).name.startswith("lmdeploy") for part in command)


def metrics_flags(
    command: list[str], env: dict[str, str] | None = None, extra_args: list[str] | None = None
) -> list[str]:
    """The flags that turn ``/metrics`` on for the api_server ``command`` starts:
    ``["--enable-metrics"]`` where its ``--help`` offers that flag (v0.10.x: metrics off by
    default), else none (v0.11+: on unless ``--disable-metrics``; or a command whose help cannot
    be read, which then cannot start either); nothing when ``extra_args`` already has it or the
    command is not LMDeploy's (:func:`_names_lmdeploy`)."""
    if "--enable-metrics" in (extra_args or []) or not _names_lmdeploy(command):
        return []
    text = _help_text(command, env or {})
    return ["--enable-metrics"] if text is not None and "--enable-metrics" in text else []


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
        waiting_extra=("lmdeploy:num_api_requests_waiting",),  # from v0.13.0: waiting for a request handle
        ttft=("lmdeploy:time_to_first_token_seconds",),
        itl=("lmdeploy:time_per_output_token_seconds",),  # per token; iter_token_latency is per output
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
    def attach_warnings(cls, info: Mapping[str, Any] | None, metrics_status: int | None) -> list[str]:
        """The base's warnings, and one for a server whose ``/metrics`` answers 404: LMDeploy
        v0.10.x mounts it only with ``--enable-metrics`` (v0.11+ unless ``--disable-metrics``)."""
        found = super().attach_warnings(info, metrics_status)
        if metrics_status == 404:
            found.append(
                "lmdeploy server has no /metrics (HTTP 404): no telemetry this run; start LMDeploy "
                "v0.10.x with --enable-metrics (v0.11+: without --disable-metrics)"
            )
        return found

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
        command += metrics_flags(list(config.command), dict(config.env), list(config.extra_args))
        return command + list(config.extra_args)

    @classmethod
    def served_model(cls, config: LMDeployConfig) -> str:
        return config.model_name

    display_name = "LMDeploy"

    @classmethod
    def launch_limits(cls, config: LMDeployConfig) -> dict[str, tuple[Any, str]]:
        if config.max_batch_size is None:
            return {}
        return {"max_num_seqs": (config.max_batch_size, "--max-batch-size")}

    @classmethod
    def documented_limits(cls, launch: Any | None) -> dict[str, tuple[Any, str]]:
        """LMDeploy's ``max_batch_size`` default (lmdeploy/utils.py get_max_batch_size): 128 on
        CUDA GPUs it does not list; more on A100/H100-class GPUs (384-1,280, by version)."""
        return {
            "max_num_seqs": (128, "LMDeploy's default on most CUDA GPUs (384-1,280 on A100/H100-class, by version)")
        }

    @classmethod
    def context_limit(cls, config: LMDeployConfig) -> int | None:
        return config.session_len
