"""Configs for real engines: launch vLLM or LMDeploy servers, or attach to running ones.

Everything launched is an argument list (never a shell). The API key of an attached server is
read from the environment variable named in ``api_key_env`` and never written to results.
"""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator


def optional_flags(options: dict[str, object]) -> list[str]:
    """``[flag, value, ...]`` for every option that is set, in order."""
    return [part for flag, value in options.items() if value is not None for part in (flag, str(value))]


class ClientOptions(BaseModel):
    """How the streaming client talks to an engine, and when a run gives up."""

    model_config = ConfigDict(extra="forbid")

    api: Literal["completions", "chat"] = Field(
        default="completions", description="/v1/completions, or /v1/chat/completions for chat-templated models"
    )
    request_timeout_s: float = Field(default=600.0, gt=0, description="per-request limit, seconds")
    send_min_tokens: bool = Field(default=True, description="also send min_tokens = max_tokens (vLLM accepts it)")
    on_failure: Literal["continue", "stop"] = Field(default="continue", description="what a failed request does to the run")
    max_failures: int | None = Field(default=None, ge=1, description="stop the run after this many failures")
    profile: str | None = Field(
        default=None, description="latency profile of this engine (from 'python -m runners profile'), for SLO 'auto'"
    )
    warmup_concurrency: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32],
        description="before measuring, send waves of this many concurrent short requests to each instance "
        "(not recorded): engines compile kernels for new batch shapes on first use; [] to skip",
    )


class LaunchOptions(BaseModel):
    """Shared launch settings: where servers listen and how long they may take to come up."""

    model_config = ConfigDict(extra="forbid")

    instances: int = Field(default=1, gt=0, le=16)
    host: str = "127.0.0.1"
    ports: list[int] | None = Field(default=None, description="one port per instance; free ports when unset")
    gpus: list[str] | None = Field(
        default=None, description="CUDA_VISIBLE_DEVICES per instance (e.g. ['0', '1']); default: instance i gets GPU i"
    )
    use_gpus: bool = Field(default=True, description="set CUDA_VISIBLE_DEVICES per instance (off for CPU builds)")
    startup_timeout_s: float = Field(default=900.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for the servers")
    extra_args: list[str] = Field(default_factory=list, description="appended to the server's argument list")

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value):
        if isinstance(value, dict):
            return {str(key): str(item) for key, item in value.items()}
        return value

    @model_validator(mode="after")
    def _per_instance(self) -> "LaunchOptions":
        if self.ports is not None and len(self.ports) != self.instances:
            raise ValueError(f"ports has {len(self.ports)} entries; expected one per instance ({self.instances})")
        if self.gpus is not None and len(self.gpus) != self.instances:
            raise ValueError(f"gpus has {len(self.gpus)} entries; expected one per instance ({self.instances})")
        return self


class VLLMConfig(ClientOptions, LaunchOptions):
    """Launch ``instances`` vLLM OpenAI-compatible servers."""

    kind: Literal["vllm"] = "vllm"
    model: str = Field(description="model folder or hub id (hubs are unreachable here: use a folder)")
    served_model_name: str = "model"
    python: str = Field(default=sys.executable, description="Python of the environment vLLM is installed in")
    command: list[str] | None = Field(
        default=None, description="server command prefix; default [python, -m, vllm.entrypoints.openai.api_server]"
    )
    max_num_seqs: int | None = Field(default=None, gt=0)
    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    num_gpu_blocks_override: int | None = Field(default=None, gt=0)
    max_model_len: int | None = Field(default=None, gt=0)
    dtype: str | None = None
    block_size: int | None = Field(default=None, gt=0)

    def server_command(self, port: int) -> list[str]:
        """The argument list that starts one server on ``port``."""
        command = list(self.command) if self.command else [self.python, "-m", "vllm.entrypoints.openai.api_server"]
        command += ["--model", self.model, "--served-model-name", self.served_model_name,
                    "--host", self.host, "--port", str(port)]
        optional = {
            "--max-num-seqs": self.max_num_seqs,
            "--max-num-batched-tokens": self.max_num_batched_tokens,
            "--gpu-memory-utilization": self.gpu_memory_utilization,
            "--num-gpu-blocks-override": self.num_gpu_blocks_override,
            "--max-model-len": self.max_model_len,
            "--dtype": self.dtype,
            "--block-size": self.block_size,
        }
        command += optional_flags(optional)
        command += ["--scheduling-policy", self.scheduling_policy]
        return command + list(self.extra_args)


class LMDeployConfig(ClientOptions, LaunchOptions):
    """Launch ``instances`` LMDeploy ``api_server`` processes (GPU only: LMDeploy has no CPU backend)."""

    kind: Literal["lmdeploy"] = "lmdeploy"
    model: str
    model_name: str = "model"
    command: list[str] = Field(default_factory=lambda: ["lmdeploy", "serve", "api_server"])
    backend: Literal["turbomind", "pytorch"] = "turbomind"
    max_batch_size: int | None = Field(default=None, gt=0)
    cache_max_entry_count: float | None = Field(default=None, gt=0, le=1)
    session_len: int | None = Field(default=None, gt=0)
    tp: int | None = Field(default=None, gt=0)

    def server_command(self, port: int) -> list[str]:
        command = list(self.command) + [self.model, "--server-name", self.host, "--server-port", str(port),
                                        "--backend", self.backend, "--model-name", self.model_name]
        optional = {
            "--max-batch-size": self.max_batch_size,
            "--cache-max-entry-count": self.cache_max_entry_count,
            "--session-len": self.session_len,
            "--tp": self.tp,
        }
        command += optional_flags(optional)
        return command + list(self.extra_args)


class AttachConfig(ClientOptions):
    """Servers that are already running, by base URL (remote allowed)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["openai"] = "openai"
    urls: list[str] = Field(min_length=1, description="base URLs, e.g. http://gpu-box:8000")
    model: str | None = Field(default=None, description="served model name; default: the first of /v1/models")
    api_key_env: str | None = Field(default=None, description="environment variable holding the API key")
    api_key: SecretStr | None = Field(default=None, exclude=True, description="API key; sent, never saved")
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        default="fcfs", description="set 'priority' if the servers were started with --scheduling-policy priority"
    )

    @field_validator("urls", mode="before")
    @classmethod
    def _split(cls, value):
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("urls")
    @classmethod
    def _http(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return [url.rstrip("/").removesuffix("/v1") for url in urls]

    @property
    def instances(self) -> int:
        return len(self.urls)
