"""What an engine adapter owns: everything schedlab knows about one serving engine.

An adapter is one module in this package holding the engine's launch config (a :class:`LaunchConfig`
whose ``kind`` tag names the engine), and an :class:`EngineAdapter` subclass that says how to
start it (argument list, health path, context-limit flag), what its OpenAI-compatible requests
accept (``min_tokens``, ``priority``), how to recognise it when attached (its ``/metrics``
prefix, its ``/v1/models`` ``owned_by``), what its Prometheus metrics are called, how it counts
tokens over HTTP, whether it is installed here, and which fields the Launch page draws. The
config union, the CLI, the registry, telemetry and the Launch page all read the adapters
(:data:`runners.engines.adapters.ADAPTERS`), so adding an engine is adding a module.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, FieldSerializationInfo, field_serializer

from runners.engines.real_config import ApiKind, ClientOptions, LaunchOptions, redact_args, redacting
from runners.engines.tokenize_api import TokenizeAPI

if TYPE_CHECKING:  # the client (aiohttp) loads only when a run talks to a server
    from runners.engines.openai_client import Endpoint

#: Longest wait for another Python to say whether it has an engine's package, seconds.
PYTHON_PROBE_TIMEOUT_S = 30.0
#: Exit code of :data:`FIND_SPEC_CODE` when the package is missing.
MODULE_MISSING_CODE = 3
#: Run by another Python: exit 0 when the package named by its argument can be imported (nothing is imported).
FIND_SPEC_CODE = (
    f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec(sys.argv[1]) else {MODULE_MISSING_CODE})"
)


@dataclass(frozen=True)
class MetricNames:
    """An engine's Prometheus names, each tuple in order of preference (the first present
    wins): KV-cache usage as a fraction 0-1, requests running and waiting (gauges), preemptions
    (counter), the TTFT and inter-token latency histograms (seconds), and the info metric whose
    labels give the KV capacity (``num_gpu_blocks``, ``block_size``). ``prefix`` (``vllm:``)
    identifies the engine on a ``/metrics`` page. ``waiting_extra`` names gauges of requests
    that wait somewhere the ``waiting`` gauge does not count (LMDeploy's API-layer queue for a
    request handle): each one present is added to the waiting count."""

    prefix: str
    kv_usage: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    preemptions: tuple[str, ...] = ()
    ttft: tuple[str, ...] = ()
    itl: tuple[str, ...] = ()
    cache_info: tuple[str, ...] = ()
    kv_capacity_tokens: tuple[str, ...] = ()  # a gauge of the KV pool size in tokens, where there is one
    waiting_extra: tuple[str, ...] = ()  # gauges added to ``waiting`` (every one present, summed)
    # the prefix cache's counters, tokens: looked up and found (vLLM's prefix_cache_queries/_hits)
    prefix_queries: tuple[str, ...] = ()
    prefix_hits: tuple[str, ...] = ()


@dataclass(frozen=True)
class FormField:
    """One engine-specific input of the Launch page: the config path it fills
    (``engine.max_num_seqs``), its label, widget (``text``, ``int``, ``float``, ``choice``,
    ``flag``), help text, choices, and the number input's step."""

    path: str
    label: str
    widget: Literal["text", "int", "float", "choice", "flag"]
    help: str = ""
    choices: tuple[str, ...] = ()
    step: float | None = None
    flag_value: Any = True  # what a ticked ``flag`` sets (``"priority"`` for engine.scheduling_policy)


@dataclass(frozen=True)
class Availability:
    """Whether an engine can be driven from this machine now, and why (for the home page)."""

    name: str
    available: bool
    detail: str


@dataclass(frozen=True)
class Capabilities:
    """What the engine's OpenAI-compatible API accepts besides the standard fields."""

    min_tokens: bool = False
    priority: bool = False  # a per-request ``priority`` field the engine's queue orders by
    engine_args: bool = False  # per-request ``vllm_xargs`` for an in-engine scheduler class


class EngineAdapter:
    """Base of the engine adapters; subclasses set the class attributes and override what differs."""

    name: ClassVar[str]  # the config's ``kind`` tag, and the engine's name on the CLI and page
    summary: ClassVar[str]
    order: ClassVar[int] = 100  # position in lists (vLLM first)
    config: ClassVar[type[BaseModel] | None] = None  # the launch config; None: attach only
    metrics: ClassVar[MetricNames]
    owned_by: ClassVar[tuple[str, ...]] = ()  # /v1/models owned_by values that identify the engine
    health_path: ClassVar[str] = "/health"
    version_path: ClassVar[str] = "/version"  # GET, answered by a JSON object with "version"
    #: a start-up log line giving the KV pool in tokens (group 1), for engines whose metrics do not
    kv_log_pattern: ClassVar[re.Pattern[str] | None] = None
    context_flag: ClassVar[str | None] = None  # the launch flag that sets the context limit, tokens
    tokenize_api: ClassVar[TokenizeAPI | None] = None
    form_fields: ClassVar[tuple[FormField, ...]] = ()
    #: the Python module a launch runs (``vllm.entrypoints.openai.api_server``), or the CLI it finds
    module: ClassVar[str | None] = None
    cli: ClassVar[str | None] = None
    install_hint: ClassVar[str] = "not installed here: attach to a running server by URL"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        config = cls.__dict__.get("config")
        if isinstance(config, type) and issubclass(config, LaunchConfig):
            config.adapter = cls  # its server_command asks this adapter

    @classmethod
    def capabilities(cls, scheduling_policy: str = "fcfs") -> Capabilities:
        """What a server of this engine accepts, given how its queue is ordered."""
        return Capabilities()

    @classmethod
    def attach_warnings(cls, info: Mapping[str, Any] | None, metrics_status: int | None) -> list[str]:
        """One-line warnings about an attached server whose telemetry cannot be trusted as it
        is, from the JSON object its :attr:`version_path` answered (``info``; None when it did
        not) and the HTTP status of its ``/metrics`` (None: no answer). The base reads one field:
        a ``decode_log_interval`` above 1 (SGLang's ``/server_info``, its
        ``--decode-log-interval``: the running/queued/usage gauges are published only at each
        prefill batch and every that many decode steps, and not at all while idle, so they lag
        and stay non-zero after the queue drains)."""
        interval = (info or {}).get("decode_log_interval")
        if isinstance(interval, int) and not isinstance(interval, bool) and interval > 1:
            return [
                f"{cls.name} server publishes its gauges every {interval} decode steps "
                "(decode_log_interval): running, waiting and KV usage lag and stay non-zero "
                "after the queue drains; start it with --decode-log-interval 1"
            ]
        return []

    @classmethod
    def server_command(cls, config: Any, port: int) -> list[str]:
        """The argument list that starts one server on ``port`` (never a shell)."""
        raise NotImplementedError(f"{cls.name} cannot be launched")

    @classmethod
    def server_env(cls, config: Any) -> dict[str, str]:
        """Environment variables a launched server needs beyond the config's ``env`` (none by
        default), set over it: an adapter that extends a variable the config also sets (a path
        list) merges the config's value into its own."""
        return {}

    @classmethod
    def served_model(cls, config: Any) -> str:
        """The model name a launched server answers to."""
        raise NotImplementedError

    @classmethod
    def max_num_seqs(cls, config: Any) -> int | None:
        """The launch's cap on requests running at once, when set."""
        return cls.launch_limits(config).get("max_num_seqs", (None, ""))[0]

    @classmethod
    def launch_limits(cls, config: Any) -> dict[str, tuple[Any, str]]:
        """The engine limits a launch config sets (runners.engines.beliefs names: slots,
        batched tokens) as name -> (value, the flag that set it); only those set. None by default."""
        return {}

    #: a GET path whose JSON object states the server's limits (vLLM's dev-mode /server_info),
    #: asked on attach besides :attr:`version_path`; None: the version answer is all there is
    limits_path: ClassVar[str | None] = None

    @classmethod
    def discovered_limits(cls, info: Mapping[str, Any] | None) -> dict[str, tuple[Any, str]]:
        """The limits a server states in a JSON object it answered (:attr:`version_path`'s, or
        :attr:`limits_path`'s merged over it): name -> (value, source). None stated by default."""
        return {}

    @classmethod
    def documented_limits(cls, launch: Any | None) -> dict[str, tuple[Any, str]]:
        """The engine's documented defaults for limits not set or discovered: name -> (value,
        why), for a launch of ``launch`` (None: an attached server, hardware unknown). Empty for
        an engine with none known (runners.engines.beliefs.ASSUMED then states schedlab's)."""
        return {}

    #: the engine's name in sentences ("vLLM")
    display_name: ClassVar[str] = "the engine"

    @classmethod
    def context_limit(cls, config: Any) -> int | None:
        """The context limit (tokens) the launch sets through its config field, when set."""
        return None

    @classmethod
    def endpoint(
        cls,
        base_url: str,
        model: str,
        api: ApiKind,
        headers: dict[str, str] | None = None,
        scheduling_policy: str = "fcfs",
    ) -> Endpoint:
        """The client's view of one server of this engine."""
        from runners.engines.openai_client import Endpoint

        able = cls.capabilities(scheduling_policy)
        return Endpoint(
            base_url,
            model,
            api,
            cls.name,
            dict(headers or {}),
            accepts_min_tokens=able.min_tokens,
            accepts_priority=able.priority,
            accepts_engine_args=able.engine_args,
        )

    @classmethod
    def package(cls) -> str | None:
        """The top-level package a launch imports (``vllm`` of ``vllm.entrypoints...``), if any."""
        return cls.module.split(".")[0] if cls.module else None

    @classmethod
    def installed_in(cls, python: str, env: Mapping[str, str] | None = None) -> bool | None:
        """Whether :meth:`package` can be imported by the interpreter ``python``: this one is
        asked with ``importlib.util.find_spec``, another in a subprocess (nothing is imported,
        at most :data:`PYTHON_PROBE_TIMEOUT_S`); None when that Python cannot be run or asked."""
        package = cls.package()
        if package is None:
            return None
        if _same_file(python, sys.executable):
            return importlib.util.find_spec(package) is not None
        try:
            done = subprocess.run(
                [python, "-c", FIND_SPEC_CODE, package],
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=PYTHON_PROBE_TIMEOUT_S,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return {0: True, MODULE_MISSING_CODE: False}.get(done.returncode)

    @classmethod
    def known_pythons(cls) -> list[str]:
        """Interpreters of environments this engine is known to be installed in besides this
        one (none by default; vLLM: ``SCHEDLAB_VLLM_PYTHON``, ``.venv-vllm``)."""
        return []

    @classmethod
    def availability(cls) -> Availability:
        """Installed here (its module importable in this Python, or its CLI on PATH)? The Home
        page's check; :meth:`launch_problem` asks the same of the Python a launch names."""
        if cls.installed_in(sys.executable):
            return Availability(cls.name, True, f"{cls.package()} importable in this Python: launchable")
        if cls.cli and shutil.which(cls.cli):
            return Availability(cls.name, True, f"{cls.cli} found at {shutil.which(cls.cli)}: launchable")
        return Availability(cls.name, False, cls.install_hint)

    @classmethod
    def launch_problem(cls, config: Any) -> tuple[str, str] | None:
        """(field, sentence) when the launch ``config`` cannot start its server on this machine:
        the program of its command is not found (the config's ``command``, else the engine's
        CLI); None when it can. :class:`PythonModuleAdapter` also asks its Python for the module."""
        command = list(getattr(config, "command", None) or ([cls.cli] if cls.cli else []))
        if command and not program_found(command[0]):
            return (
                "engine.kind",
                f"{command[0]!r} is not found on this machine (PATH); {cls.name} is {cls.install_hint}",
            )
        return None


def python_form_field(engine: str) -> FormField:
    """The Launch page's input for a :class:`PythonModuleAdapter` config's ``python``: the
    interpreter of the environment ``engine`` (its display name) is installed in."""
    return FormField(
        "engine.python",
        f"Python of the {engine} environment",
        "text",
        f"{engine} pins its own torch: point at its venv",
    )


def program_found(program: str) -> bool:
    """Whether ``program`` (a name looked up on PATH, or a path) can be run here."""
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program).expanduser()
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(program) is not None


def _same_file(one: str, other: str) -> bool:
    """Whether two interpreter paths (or names on PATH) are the same file, links not followed: a
    virtual environment's ``bin/python`` links to its base interpreter but has its own packages."""

    def where(program: str) -> str:
        return os.path.abspath(os.path.expanduser(shutil.which(program) or program))

    return where(one) == where(other)


class PythonModuleAdapter(EngineAdapter):
    """An engine launched as a Python module with ``--served-model-name``, ``--host`` and
    ``--port`` (vLLM, SGLang); subclasses set ``model_flag`` and add their own flags after
    :meth:`module_command`. Its config has ``python``, ``command``, ``model`` and
    ``served_model_name``."""

    model_flag: ClassVar[str]  # the flag naming the model folder (vLLM ``--model``, SGLang ``--model-path``)

    @classmethod
    def module_command(cls, config: Any, port: int) -> list[str]:
        """The config's ``command`` (default ``[python, -m, module]``), then the model, the served
        model name, host and port: the start of the argument list."""
        command = list(config.command) if config.command else [config.python, "-m", cls.module]
        return command + [
            cls.model_flag,
            config.model,
            "--served-model-name",
            config.served_model_name,
            "--host",
            config.host,
            "--port",
            str(port),
        ]

    @classmethod
    def served_model(cls, config: Any) -> str:
        return str(config.served_model_name)

    @classmethod
    def launch_problem(cls, config: Any) -> tuple[str, str] | None:
        """Also: the module is installed in the config's ``python`` (the field
        ``engine.python``), when the config launches ``python -m`` (no ``command`` of its own)."""
        if getattr(config, "command", None):
            return super().launch_problem(config)
        python, package = str(config.python), cls.package()
        if not program_found(python):
            return (
                "engine.python",
                f"{python!r} is not a Python on this machine; expected the Python of the environment {package} is installed in",
            )
        if cls.installed_in(python, getattr(config, "env", None)) is False:
            elsewhere = [
                known for known in cls.known_pythons() if not _same_file(known, python) and cls.installed_in(known)
            ]
            hint = f": {elsewhere[0]} has it" if elsewhere else f" ({cls.install_hint})"
            return (
                "engine.python",
                f"{package} is not installed in {python}; expected the Python of its environment{hint}",
            )
        return None


def positive_int(value: object) -> int | None:
    """``value`` when it is a positive integer (not a bool) that fits a 64-bit column with room
    (at most 2**53), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**53 else None


def _prompt_body(model: str, text: str) -> dict[str, Any]:
    return {"model": model, "prompt": text, "add_special_tokens": False}


def _overhead_body(model: str, api: str) -> dict[str, Any]:
    if api == "chat":
        return {"model": model, "messages": [{"role": "user", "content": ""}], "add_generation_prompt": True}
    return {"model": model, "prompt": "", "add_special_tokens": True}


def reply_count(count_key: str, list_key: str) -> Callable[[Any], int | None]:
    """A tokenize reply's token count: its ``count_key`` field, else the length of its
    ``list_key`` list (vLLM and SGLang: ``count``/``tokens``; LMDeploy: ``length``/``input_ids``);
    None when the reply is not an object or has neither."""

    def read(reply: Any) -> int | None:
        if not isinstance(reply, dict):
            return None
        count = reply.get(count_key)
        if count is None and isinstance(reply.get(list_key), list):
            count = len(reply[list_key])
        return count

    return read


def _max_model_len_of(reply: Any) -> int | None:
    return positive_int(reply.get("max_model_len")) if isinstance(reply, dict) else None


def prompt_tokenize_api(path: str, reply_limit_is_context: bool) -> TokenizeAPI:
    """The tokenize protocol vLLM and SGLang share: ``{"model", "prompt", "add_special_tokens"}``
    (or ``messages`` with ``add_generation_prompt`` for a chat prompt's overhead) answered by
    ``{"count", "tokens", "max_model_len"}``; ``reply_limit_is_context`` says whether that
    ``max_model_len`` is the server's context (vLLM) or only the tokenizer's own (SGLang)."""
    return TokenizeAPI(
        path,
        _prompt_body,
        _overhead_body,
        reply_count("count", "tokens"),
        _max_model_len_of if reply_limit_is_context else (lambda reply: None),
        '{"count": <tokens>, "max_model_len": ..., "tokens": [...]}',
    )


class LaunchConfig(ClientOptions, LaunchOptions):
    """Base of an adapter's launch config (it adds ``kind``, ``model``, ``command`` and the
    engine's flags): ``command`` is written to config.json with secret-looking values as ***, and
    :meth:`server_command` asks the config's adapter for the argument list."""

    @field_serializer("command", check_fields=False)
    def _command_out(self, command: list[str] | None, info: FieldSerializationInfo) -> list[str] | None:
        return redact_args(command) if command is not None and redacting(info) else command

    #: The adapter whose launch config this is (set by :meth:`EngineAdapter.__init_subclass__`).
    adapter: ClassVar[type[EngineAdapter] | None] = None

    def server_command(self, port: int) -> list[str]:
        """The argument list that starts one server on ``port``."""
        adapter = type(self).adapter
        if adapter is None:
            raise TypeError(f"{type(self).__name__} is no adapter's launch config")
        return adapter.server_command(self, port)
