"""Shared parts of the real-engine configs (each engine's own launch config lives in its adapter,
``runners/engines/adapters/``), and the config that attaches to running servers.

Everything launched is an argument list (never a shell). The API key of an attached server is
read from the environment variable named in ``api_key_env`` and never written to results; the
values of secret-looking ``env`` variables (``HF_TOKEN``, ``WANDB_API_KEY``: any name with a word
naming a key, token, secret or password) and ``extra_args`` (``--api-key X``, ``--hf-token=X``)
are written as ``***`` whenever a config is dumped with the :data:`REDACT_SECRETS` context
(config.json), and reach the launched servers unchanged. The other ``env`` values are written as
they are: they change how a server runs (``VLLM_CPU_KVCACHE_SPACE``), and ``run --resume``
relaunches the servers from them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, FieldSerializationInfo, SecretStr, field_serializer, field_validator, model_validator

from runners.input_model import InputModel

#: Written in place of a secret.
REDACTED = "***"
#: ``model_dump(context=REDACT_SECRETS)`` writes secrets as :data:`REDACTED`.
REDACT_SECRETS = {"redact_secrets": True}
#: A word of a command-line flag (split at - and _) that makes its value a secret: ``--api-key``,
#: ``--hf-token``, ``--apikey``, ``--db-password``; not ``--tokenizer`` or ``--max-num-batched-tokens``.
SECRET_WORD = re.compile(r".*(key|token|secret|passw(or)?d|credentials?|auth(orization)?)", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """True for a name (a flag's or an environment variable's) one of whose words (split at ``-``,
    ``_`` and ``.``) ends in key, token, secret, password, credential(s) or auth(orization):
    ``HF_TOKEN``, ``WANDB_API_KEY``, ``--db-password``; not ``VLLM_CPU_KVCACHE_SPACE``."""
    return any(SECRET_WORD.fullmatch(word) for word in re.split(r"[-_.]+", name))


def is_secret_flag(flag: str) -> bool:
    """True for a flag (``-x`` / ``--x-y``) with a secret-looking name (:func:`is_secret_name`)."""
    return flag.startswith("-") and is_secret_name(flag)


Port = Annotated[int, Field(ge=1, le=65_535)]


def redact_args(args: list[str]) -> list[str]:
    """``args`` with the value of every secret-looking flag replaced by ``***``: ``--api-key X``
    and ``--api-key=X`` both become ``--api-key ***`` / ``--api-key=***``."""
    redacted = []
    hide_next = False
    for arg in args:
        if hide_next and not arg.startswith("--"):
            redacted.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        flag, equals, _ = arg.partition("=")
        if is_secret_flag(flag):
            if equals:
                arg = f"{flag}={REDACTED}"
            else:
                hide_next = True
        redacted.append(arg)
    return redacted


def redact_url(url: str) -> str:
    """``url`` without the password of its user-info part (``http://u:***@host``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{REDACTED}@{netloc[2]}"))


def redacting(info: FieldSerializationInfo) -> bool:
    return bool(isinstance(info.context, dict) and info.context.get("redact_secrets"))


def optional_flags(options: dict[str, object]) -> list[str]:
    """``[flag, value, ...]`` for every option that is set, in order."""
    return [part for flag, value in options.items() if value is not None for part in (flag, str(value))]


#: The OpenAI API a run's requests use: ``/v1/completions`` or ``/v1/chat/completions``.
ApiKind = Literal["completions", "chat"]


class ProfileGate(InputModel):
    """The step profiler's quality gate (``engine.profile_gate``; runners.app.profile_quality). A
    phase fails when its step kind's out-of-fold error is over ``max_error`` (the model does not
    fit, or the measurements scatter), or other processes on this machine took more than
    ``max_other_cores`` cores on average while it ran (the same bound refuses a machine already
    busy in the 5 s before anything is measured). A failing phase is measured once more; if it
    fails again the profile is refused unless ``--accept-noisy``. Where the server runs elsewhere
    (its CPU cannot be told from other processes'), the fixed probe step's coefficient of variation
    over ``max_probe_cv`` names a noisy machine as the likely cause; it fails nothing by itself.

    The defaults, from the tiny CPU vLLM on the 2-core machine (issue 48). Out-of-fold error
    (prefill / decode / mixed): made on a quiet machine 15% / 5% / 13% (the committed
    bench/results/tiny-cpu-vllm.profile.yaml) and, by bench/profile_noise.py on 2026-12-08, 10-26% /
    7-21% / 12-33% over five quiet runs; made beside other work 14% / 243% / 63% and 28% / 27% / 50%;
    quiet but pinned to one core 26% / 14% / 52% (the model does not fit). 45% is above every quiet
    run's worst kind (33%) and below the worst kind of every bad one. It was 30% until the
    2026-12-08 bench refused two of five quiet runs at 30% and 33% (a change made after seeing
    that result). Other processes: quiet 0.00-0.07 cores, beside 2 busy loops 1.2-2.0: a quarter
    of a core, the signal that separates them. The probe's CV: quiet 2-53% within phases, beside
    busy loops 13-61%: it cannot separate them, so it only names a cause where nothing else can."""

    max_error: float = Field(
        default=0.45, gt=0, le=100.0, description="largest out-of-fold error of a step kind (a fraction: 0.45 = 45%)"
    )
    max_probe_cv: float = Field(
        default=0.25,
        gt=0,
        le=100.0,
        description="coefficient of variation of the probe step within a phase above which a failing phase's "
        "likely cause is called a noisy machine (not a reason to fail by itself)",
    )
    max_other_cores: float = Field(
        default=0.25,
        ge=0,
        le=1024.0,
        description="most cores other processes may use on average while a phase runs (judged only where "
        "the server's own processes are found on this machine)",
    )


class ClientOptions(InputModel):
    """How the streaming client talks to an engine, and when a run gives up."""

    api: ApiKind = Field(
        default="completions", description="/v1/completions, or /v1/chat/completions for chat-templated models"
    )
    request_timeout_s: float = Field(default=600.0, gt=0, le=86_400.0, description="per-request limit, seconds")
    send_min_tokens: bool = Field(default=True, description="also send min_tokens = max_tokens (vLLM accepts it)")
    on_failure: Literal["continue", "stop"] = Field(
        default="continue", description="what a failed request does to the run"
    )
    max_failures: int | None = Field(
        default=None, ge=1, le=1_000_000, description="stop the run after this many failures"
    )
    profile: str | None = Field(
        default=None, description="latency profile of this engine (from 'python -m runners profile'), for SLO 'auto'"
    )
    profile_gate: ProfileGate = Field(
        default_factory=lambda: ProfileGate(),
        description="the step profiler's quality gate (runners.app.profile_quality)",
    )
    warmup_concurrency: list[Annotated[int, Field(ge=1, le=1024)]] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32],
        description="before measuring, send waves of this many concurrent short requests to each instance "
        "(not recorded): engines compile kernels for new batch shapes on first use; [] to skip",
    )
    warmup_timeout_s: float = Field(
        default=60.0,
        gt=0,
        le=3_600.0,
        description="per warm-up request limit, seconds (at most request_timeout_s): the first wave with a "
        "request that fails or exceeds it ends the warm-up, and the run says so",
    )


class LaunchOptions(InputModel):
    """Shared launch settings: where servers listen and how long they may take to come up."""

    instances: int = Field(default=1, gt=0, le=16)
    host: str = "127.0.0.1"
    ports: list[Port] | None = Field(default=None, description="one port per instance; free ports when unset")
    gpus: list[str] | None = Field(
        default=None, description="CUDA_VISIBLE_DEVICES per instance (e.g. ['0', '1']); default: instance i gets GPU i"
    )
    use_gpus: bool = Field(default=True, description="set CUDA_VISIBLE_DEVICES per instance (off for CPU builds)")
    startup_timeout_s: float = Field(default=900.0, gt=0, le=86_400.0, description="seconds")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="extra environment for the servers (values of variables naming a key, token, secret or "
        "password are written to results as ***)",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        description="appended to the server's argument list "
        "(values of flags naming a key, token, secret or password are written as ***)",
    )

    @field_serializer("env")
    def _env_out(self, env: dict[str, str], info: FieldSerializationInfo) -> dict[str, str]:
        if not redacting(info):
            return dict(env)
        return {key: REDACTED if is_secret_name(key) else value for key, value in env.items()}

    @field_serializer("extra_args")
    def _args_out(self, args: list[str], info: FieldSerializationInfo) -> list[str]:
        return redact_args(args) if redacting(info) else list(args)

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
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


class AttachConfig(ClientOptions):
    """Servers that are already running, by base URL (remote allowed)."""

    kind: Literal["openai"] = "openai"
    urls: list[str] = Field(min_length=1, description="base URLs, e.g. http://gpu-box:8000")
    model: str | None = Field(default=None, description="served model name; default: the first of /v1/models")
    api_key_env: str | None = Field(default=None, description="environment variable holding the API key")
    api_key: SecretStr | None = Field(default=None, exclude=True, description="API key; sent, never saved")
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        default="fcfs",
        description="set 'priority' if the servers order their queue by priority (vLLM "
        "--scheduling-policy priority; SGLang --enable-priority-scheduling --schedule-low-priority-values-first)",
    )
    max_num_seqs: int | None = Field(
        default=None,
        gt=0,
        le=65_536,
        description="the servers' slots (requests running at once: vLLM --max-num-seqs, SGLang "
        "--max-running-requests, LMDeploy --max-batch-size) when they do not report it; policies plan with "
        "it. Unset: discovered where the server says it, else the engine's documented default (the run "
        "prints which)",
    )
    max_num_batched_tokens: int | None = Field(
        default=None,
        gt=0,
        le=10_000_000,
        description="the servers' token budget per step when they do not report it (vLLM --max-num-batched-tokens)",
    )
    context_tokens: int | None = Field(
        default=None,
        gt=0,
        le=10_000_000,
        description="the servers' context limit (prompt + output, tokens) when they do not report it on "
        "/v1/models (LMDeploy: its --session-len); the smaller wins when both are known",
    )

    @field_validator("urls", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
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

    @field_serializer("urls")
    def _urls_out(self, urls: list[str], info: FieldSerializationInfo) -> list[str]:
        return [redact_url(url) for url in urls] if redacting(info) else list(urls)

    @property
    def instances(self) -> int:
        return len(self.urls)
