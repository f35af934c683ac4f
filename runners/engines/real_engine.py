"""Real engine instances, launched (any engine adapter: vLLM, LMDeploy, SGLang) or attached (any
OpenAI-compatible URL): endpoints, engine-kind detection, token counting and context limit, KV
capacity, and clean shutdown. What differs between engines comes from their adapters
(``runners/engines/adapters/``)."""

from __future__ import annotations

import json
import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.error import HTTPError, URLError
from urllib.request import Request as HTTPRequest
from urllib.request import urlopen

from runners import paths
from runners.engines.adapters import ADAPTERS, EngineAdapter, adapter_for, detect_adapter
from runners.engines.adapters.base import positive_int
from runners.engines.beliefs import InstanceBeliefs, real_beliefs
from runners.engines.launcher import ServerProcess, free_port, launch_servers, unless_stopped
from runners.engines.openai_client import Endpoint, header_secrets, quote, redact
from runners.engines.real_config import AttachConfig
from runners.engines.server_tokens import ServerTokenCounter, TokenizerUnavailable, server_token_counter
from runners.engines.telemetry import (
    METRICS_MAX_BYTES,
    SCRAPE_TIMEOUT_S,
    MetricsSnapshot,
    MetricsTooLarge,
    parse_metrics,
)
from runners.errors import ConfigError, SchedlabError
from runners.workload.builder import ContextLimit
from runners.workload.tokens import ApproximateTokenCounter, TokenCounter, make_token_counter

#: Largest context length (tokens) a server's model card is believed to have.
MAX_CONTEXT_TOKENS = 2**31 - 1
#: A launch config of any adapter, or an attach config.
RealEngineConfig = Any
T = TypeVar("T")


class EngineWarning(UserWarning):
    """An attached server whose telemetry is empty or misleading as it is configured."""


@dataclass(kw_only=True)
class RealInstance:
    """One server the driver sends requests to."""

    index: int
    endpoint: Endpoint
    server: ServerProcess | None = None
    kv_capacity_tokens: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    version: str | None = None
    info: dict[str, Any] | None = None  # what the adapter's version path answered (attached servers)
    #: what a policy believes about this server, each value with its source (set by RealEngine.start)
    beliefs: InstanceBeliefs | None = None

    @property
    def metrics_url(self) -> str:
        return self.endpoint.base_url + "/metrics"


def _get(url: str, headers: dict[str, str], timeout: float = SCRAPE_TIMEOUT_S) -> tuple[int, str]:
    """(status, body) of ``GET url``: the body read for at most ``timeout`` seconds in all and
    :data:`METRICS_MAX_BYTES` (a longer one raises :class:`MetricsTooLarge`, a slower one
    TimeoutError), so a server that streams without end cannot stall the run's start."""
    deadline = time.monotonic() + timeout
    request = HTTPRequest(url, headers=headers)
    with urlopen(request, timeout=timeout) as response:
        length = response.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > METRICS_MAX_BYTES:
            raise MetricsTooLarge(int(length))
        body = bytearray()
        while chunk := response.read1(64 * 1024):
            body += chunk
            if len(body) > METRICS_MAX_BYTES:
                raise MetricsTooLarge()
            if time.monotonic() > deadline:
                raise TimeoutError(f"GET {url}: no complete answer within {timeout:g} s")
        return response.status, body.decode("utf-8", errors="replace")


def scrape(url: str, headers: dict[str, str]) -> MetricsSnapshot | None:
    """One synchronous scrape of ``/metrics``; None if the server has no usable endpoint."""
    return scrape_with_status(url, headers)[1]


def scrape_with_status(url: str, headers: dict[str, str]) -> tuple[int | None, MetricsSnapshot | None]:
    """(HTTP status, snapshot) of one synchronous scrape of ``/metrics``: the status None when
    the server did not answer, the snapshot None when the page is missing or unusable."""
    try:
        status, text = _get(url, headers)
        return status, parse_metrics(text) if status == 200 else None
    except HTTPError as exc:  # urlopen raises for 4xx/5xx
        return exc.code, None
    except (URLError, OSError, ValueError):
        return None, None


def _models(base_url: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    """The model cards of ``GET /v1/models``; SchedlabError naming the endpoint if the server
    does not answer or the reply is not ``{"data": [{"id": ...}, ...]}``."""
    endpoint = f"{base_url}/v1/models"
    try:
        status, text = _get(endpoint, headers)
    except (URLError, OSError, ValueError) as exc:
        reason = redact(str(exc), header_secrets(headers))
        raise SchedlabError(f"engine.urls: {base_url} did not answer GET /v1/models ({reason})") from exc
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = None
    cards = body.get("data") if isinstance(body, dict) else body
    if cards is None and isinstance(body, dict):
        cards = []  # the server lists no model: engine.model must name one
    if not isinstance(body, dict) or not isinstance(cards, list) or not all(isinstance(card, dict) for card in cards):
        raise SchedlabError(
            f"engine.urls: GET {endpoint} answered {redact(quote(text), header_secrets(headers))}; "
            'expected a JSON object {"data": [{"id": <model name>, ...}]}'
        )
    return cards


def detect_kind(base_url: str, headers: dict[str, str]) -> tuple[str, str | None]:
    """(engine kind, first served model) from the ``/metrics`` prefix or ``/v1/models`` owned_by
    (:func:`runners.engines.adapters.detect_adapter`; ``openai`` when neither is known)."""
    metrics_text: str | None
    try:
        status, metrics_text = _get(base_url + "/metrics", headers)
        if status != 200:
            metrics_text = None
    except (URLError, OSError, ValueError):
        metrics_text = None
    cards = _models(base_url, headers)
    model = owner = None
    if cards:
        model, owner = cards[0].get("id"), cards[0].get("owned_by")
        if model is not None and not isinstance(model, str):
            raise SchedlabError(
                f"engine.urls: GET {base_url}/v1/models lists a model whose id is not a string "
                f"({quote(json.dumps(model))})"
            )
    return detect_adapter(metrics_text, owner).name, model


def check_api_key(engine: object) -> None:
    """ConfigError naming ``engine.api_key_env`` when an attach config names an environment
    variable that is unset or empty; nothing for other engines. Called before a run folder exists."""
    if isinstance(engine, AttachConfig):
        _api_key(engine)


def config_secrets(engine: object) -> list[str]:
    """The secrets a run of ``engine`` sends to its servers (an attach config's API key), to be
    scrubbed from every server-supplied string written; [] for other engines or without a key."""
    if isinstance(engine, AttachConfig):
        key = _api_key(engine)
        return header_secrets({"Authorization": f"Bearer {key}"}) if key else []
    return []


def _api_key(config: AttachConfig) -> str | None:
    if config.api_key is not None:
        return config.api_key.get_secret_value()
    if config.api_key_env:
        value = os.environ.get(config.api_key_env)
        if not value:
            raise ConfigError("engine.api_key_env", f"environment variable {config.api_key_env} is not set")
        return value
    return None


def _info(base_url: str, headers: dict[str, str], path: str = "/version") -> dict[str, Any] | None:
    """The JSON object ``GET path`` answers (the adapter's: ``/version``, SGLang's ``/server_info``),
    or None when it answers anything else or nothing."""
    try:
        status, text = _get(base_url + path, headers)
        info = json.loads(text) if status == 200 else None
    except (URLError, OSError, ValueError, RecursionError):
        return None
    return info if isinstance(info, dict) else None


def _version(base_url: str, headers: dict[str, str], path: str = "/version") -> str | None:
    """The server's version from ``GET path`` (the adapter's: ``/version``, SGLang's ``/server_info``)."""
    info = _info(base_url, headers, path)
    return str(info.get("version")) if info is not None else None


#: Keys of a model's config.json that bound its context, as vLLM reads them
#: (vllm/transformers_utils/model_arch_config_convertor.py, derive_max_model_len_and_key): the
#: smallest present wins, and ``model_max_length`` overrides them all.
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


@dataclass
class Tokenization:
    """How a run against real servers counts tokens and what context its requests must fit:
    ``counter``, ``context`` (None when nothing reported a limit) and ``record`` (written to
    config.json as ``resolved.tokenization``: the counter's name, where it and the limit came
    from, ``approximate`` when the 4-characters-per-token rule counts, and what was tried)."""

    counter: TokenCounter
    context: ContextLimit | None
    record: dict[str, Any]


def model_card(base_url: str, headers: dict[str, str], model: str | None) -> dict[str, Any] | None:
    """The ``/v1/models`` card of ``model`` (the first when None); None if it is not listed.
    SchedlabError naming the endpoint if the server does not answer or answers garbage."""
    cards = _models(base_url, headers)
    if model is None:
        return cards[0] if cards else None
    return next((card for card in cards if card.get("id") == model), None)


def context_from_model_folder(folder: str) -> tuple[int, str] | None:
    """(context tokens, source) from a model folder's config.json as vLLM derives its default
    max_model_len (:data:`CONTEXT_KEYS`; text_config of multimodal models); None if unreadable."""
    path = Path(folder) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    text_config = data.get("text_config")
    config: dict[str, Any] = text_config if isinstance(text_config, dict) else data
    if positive_int(config.get("model_max_length")):
        return config["model_max_length"], f"{path} model_max_length"
    found = [(config[key], key) for key in CONTEXT_KEYS if positive_int(config.get(key))]
    if not found:
        return None
    value, key = min(found)
    return value, f"{path} {key}"


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` in an argument list (``--flag V`` or ``--flag=V``), the last one wins."""
    value = None
    for index, arg in enumerate(args):
        if arg == flag and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.partition("=")[2]
    return value


def _overhead(counter: TokenCounter, api: str, tried: list[str]) -> int:
    """Tokens the server adds to each prompt (see ``overhead_tokens`` of the counters); 0 when the
    counter cannot say (the approximation, a server refusing the empty chat)."""
    overhead = getattr(counter, "overhead_tokens", None)
    if not callable(overhead):
        return 0
    try:
        return overhead(api)
    except TokenizerUnavailable as exc:
        tried.append(f"prompt overhead: {exc}")
        return 0


def _with_fallback(counter: TokenCounter | None, source: str | None, tried: list[str]) -> tuple[TokenCounter, str]:
    if counter is not None and source is not None:
        return counter, source
    tried.append("approximation: 4 characters per token (last resort)")
    return ApproximateTokenCounter(), "approximation (4 characters per token): no server or model tokenizer"


def _folder_counter(folder: str, named_by: str, tried: list[str]) -> tuple[TokenCounter | None, str | None]:
    """The tokenizer in model folder ``folder`` (named by ``named_by``) and its source label, or
    (None, None) with the reason appended to ``tried``."""
    if not paths.is_dir(Path(folder)):
        tried.append(f"model folder {folder} ({named_by}) is not readable here")
        return None, None
    try:
        return make_token_counter(folder), f"model folder {folder} ({named_by})"
    except ConfigError as exc:
        tried.append(f"model folder {folder}: {exc}")
        return None, None


def _server_counter(
    url: str, model: str, owned_by: object, headers: dict[str, str], tried: list[str]
) -> tuple[TokenCounter | None, str | None]:
    """The server's own token counter, through the tokenize endpoint of the engine its
    ``/v1/models`` card names in ``owned_by`` (every adapter's in turn when that names none), or
    (None, None) with what failed in ``tried``. Only the card is read: ``/metrics`` may be slow
    or never answer, and nothing here can be cancelled."""
    detected = detect_adapter(None, owned_by)
    candidates = (
        [detected] if detected.tokenize_api else [adapter for adapter in ADAPTERS.values() if adapter.tokenize_api]
    )
    for adapter in candidates:
        if adapter.tokenize_api is None:
            continue
        try:
            counter = server_token_counter(url, model, adapter.tokenize_api, headers)
        except TokenizerUnavailable as exc:
            tried.append(f"{adapter.name} tokenizer: {exc}")
            continue
        return counter, f"server tokenizer ({adapter.name}): POST {counter.url}"
    return None, None


def resolve_tokenization(engine: RealEngineConfig, tokenizer: str | None) -> Tokenization:
    """The token counter and context limit for a run against real servers, before it starts.

    Counter: ``tokenizer`` (the workload's folder) when set; else, attached, the server's own
    tokenize endpoint (its adapter's; every adapter's in turn for a server of unknown kind), then
    the model folder its ``/v1/models`` card names as ``root`` when readable here; launched, the
    model folder. The approximation only when none of these works.
    Limit: the smallest ``max_model_len`` of the attached servers' cards (or a tokenize reply);
    launched, the adapter's context flag (``--max-model-len``, ``--session-len``,
    ``--context-length``), else the model folder's config.json as vLLM derives it.
    """
    tried: list[str] = []
    found = _Found(*(make_token_counter(tokenizer), f"workload.tokenizer {tokenizer}") if tokenizer else (None, None))
    if isinstance(engine, AttachConfig):
        _attached_tokenization(engine, found, tried)
    else:
        _launched_tokenization(engine, found, tried)
    counter, source = _with_fallback(found.counter, found.source, tried)
    context = None
    if found.limit is not None:
        context = ContextLimit(found.limit, _overhead(counter, engine.api, tried), found.limit_source)
    record = {
        "counter": counter.name,
        "source": source,
        "approximate": isinstance(counter, ApproximateTokenCounter),
        "context": context.as_dict() if context is not None else None,
        "tried": tried,
    }
    return Tokenization(counter, context, record)


@dataclass
class _Found:
    """What :func:`resolve_tokenization` has found so far: the counter and where it came from,
    the context limit (tokens) and where that came from."""

    counter: TokenCounter | None = None
    source: str | None = None
    limit: int | None = None
    limit_source: str = ""

    def lower_limit(self, value: int | None, source: str) -> None:
        """Take ``value`` as the limit when it is set and below the one found so far."""
        if value is not None and (self.limit is None or value < self.limit):
            self.limit, self.limit_source = value, source


def _card_limit(engine: AttachConfig, url: str, card: dict[str, Any], tried: list[str]) -> int | None:
    """The context limit a server's ``/v1/models`` card claims (None: none it can be believed
    for); SchedlabError for an impossible one unless the user set ``engine.context_tokens``."""
    claimed = card.get("max_model_len")
    if isinstance(claimed, int) and not isinstance(claimed, bool) and claimed > MAX_CONTEXT_TOKENS:
        if engine.context_tokens is not None:  # the user's limit stands; the card's is ignored
            tried.append(f"GET {url}/v1/models max_model_len {quote(str(claimed), 40)}: not believed")
            return None
        raise SchedlabError(
            f"engine.urls: GET {url}/v1/models says max_model_len {quote(str(claimed), 40)}; expected a "
            f"context length of at most {MAX_CONTEXT_TOKENS:,} tokens (set engine.context_tokens to override)"
        )
    return positive_int(claimed)


def _attached_tokenization(engine: AttachConfig, found: _Found, tried: list[str]) -> None:
    """Attached servers: the limit from their cards (or ``engine.context_tokens``), the counter
    from the first server's tokenize endpoint, else the model folder its card names."""
    key = _api_key(engine)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    cards = []
    for url in engine.urls:
        try:
            card = model_card(url, headers, engine.model)
        except SchedlabError as exc:
            tried.append(str(exc))
            continue
        if card is not None:
            cards.append((url, card))
            found.lower_limit(_card_limit(engine, url, card, tried), f"GET {url}/v1/models max_model_len")
    found.lower_limit(engine.context_tokens, "engine.context_tokens")
    if cards and found.limit is None:
        tried.append(
            "no /v1/models card reports max_model_len; set engine.context_tokens to the servers' context limit"
        )
    if found.counter is None and cards:
        url, card = cards[0]
        model = engine.model or card.get("id")
        if isinstance(model, str):
            found.counter, found.source = _server_counter(url, model, card.get("owned_by"), headers, tried)
        root = card.get("root")
        if found.counter is None and isinstance(root, str) and root:
            found.counter, found.source = _folder_counter(root, "/v1/models root", tried)
    counter = found.counter
    if found.limit is None and isinstance(counter, ServerTokenCounter) and positive_int(counter.max_model_len):
        found.limit, found.limit_source = counter.max_model_len, f"POST {counter.url} max_model_len"


def _launched_tokenization(engine: RealEngineConfig, found: _Found, tried: list[str]) -> None:
    """A launched server: the counter from the model folder, the limit from the adapter's context
    flag (in ``extra_args`` or the config), else the model folder's config.json."""
    adapter = adapter_for(engine.kind)
    model = engine.model
    if found.counter is None:
        found.counter, found.source = _folder_counter(model, "launch --model", tried)
    flag = adapter.context_flag or "the context-limit flag"
    launched = adapter.context_limit(engine)
    extra = _flag_value(list(engine.extra_args), flag) if adapter.context_flag else None
    if extra is not None and extra.isdigit() and int(extra) > 0:
        found.limit, found.limit_source = int(extra), f"launch flag {flag} (extra_args)"
    elif launched is not None:
        found.limit, found.limit_source = launched, f"launch flag {flag}"
    else:
        derived = context_from_model_folder(model)
        if derived is not None:
            found.limit, found.limit_source = derived
        else:
            tried.append(f"no {flag} and no readable {model}/config.json: context limit unknown")


#: In a launched server's environment values, replaced by the server's index (0, 1, ...).
INSTANCE_TOKEN = "{instance}"


class RealEngine:
    """Owns the instances of one run: launches or attaches in :meth:`start`, stops in :meth:`stop`."""

    def __init__(self, *, config: RealEngineConfig, log_folder: Path) -> None:
        self.config = config
        self.log_folder = log_folder
        self.instances: list[RealInstance] = []
        self.servers: list[ServerProcess] = []
        #: one line each, about attached servers whose telemetry cannot be trusted as it is
        #: (the adapters' :meth:`EngineAdapter.attach_warnings`); also issued as :class:`EngineWarning`
        self.warnings: list[str] = []

    def start(self, should_stop: Callable[[], bool] | None = None) -> list[RealInstance]:
        """Launch or attach; ``should_stop`` cancels (RunCancelled) while servers start or are
        probed, within about ``launcher.STOP_POLL_S``."""
        config = self.config

        def probe(call: Callable[[], T], what: str) -> T:
            return unless_stopped(call, should_stop, what)

        if isinstance(config, AttachConfig):
            key = _api_key(config)
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            for index, url in enumerate(config.urls):
                kind, first_model = probe(partial(detect_kind, url, headers), f"asking {url} for its models")
                model = config.model or first_model
                if not model:
                    raise ConfigError("engine.model", f"{url} lists no model; set engine.model")
                adapter = adapter_for(kind)
                endpoint = adapter.endpoint(url, model, config.api, headers, config.scheduling_policy)
                info = probe(partial(_info, url, headers, adapter.version_path), f"asking {url} for its version")
                version = str(info.get("version")) if info is not None else None
                if adapter.limits_path is not None:  # a second answer that states the limits, where enabled
                    stated = probe(partial(_info, url, headers, adapter.limits_path), f"asking {url} for its limits")
                    if stated is not None:
                        info = {**(info or {}), **stated}
                self.instances.append(RealInstance(index=index, endpoint=endpoint, version=version, info=info))
        else:
            self._launch(config, should_stop)
        for instance in self.instances:
            status, snapshot = probe(
                partial(scrape_with_status, instance.metrics_url, instance.endpoint.headers),
                f"reading {instance.metrics_url}",
            )
            if instance.server is None:  # attached: say what makes its telemetry wrong or empty
                for line in adapter_for(instance.endpoint.kind).attach_warnings(instance.info, status):
                    self.warnings.append(f"{instance.endpoint.base_url}: {line}")
                    warnings.warn(self.warnings[-1], EngineWarning, stacklevel=2)
            if snapshot is not None:
                instance.kv_capacity_tokens = snapshot.kv_capacity_tokens
                instance.block_size = snapshot.block_size
            pattern = adapter_for(instance.endpoint.kind).kv_log_pattern
            capacity_source = "discovered (/metrics)"
            if instance.kv_capacity_tokens is None and instance.server is not None and pattern is not None:
                instance.kv_capacity_tokens = kv_capacity_from_log(instance.server.log_path, pattern)
                capacity_source = "discovered (server log)"
            instance.beliefs = _beliefs(config, instance, snapshot, capacity_source)
            instance.max_num_seqs = instance.beliefs.value("max_num_seqs")
        return self.instances

    def _launch(self, config: Any, should_stop: Callable[[], bool] | None = None) -> None:
        """Start every server of ``config``; in its environment ``{instance}`` becomes the
        server's index (a per-instance file such as the in-engine schedulers' decisions)."""
        adapter: type[EngineAdapter] = adapter_for(config.kind)
        ports = config.ports or [free_port(config.host) for _ in range(config.instances)]
        for index, port in enumerate(ports):
            env = {
                name: value.replace(INSTANCE_TOKEN, str(index))
                for name, value in {**config.env, **adapter.server_env(config)}.items()
            }
            if config.use_gpus:
                env["CUDA_VISIBLE_DEVICES"] = config.gpus[index] if config.gpus else str(index)
            self.servers.append(
                ServerProcess(
                    adapter.server_command(config, port),
                    port,
                    config.host,
                    self.log_folder / f"server-{index}.log",
                    env,
                    adapter.health_path,
                )
            )
        launch_servers(self.servers, config.startup_timeout_s, should_stop)
        policy = getattr(config, "scheduling_policy", "fcfs")
        for index, server in enumerate(self.servers):
            endpoint = adapter.endpoint(server.base_url, adapter.served_model(config), config.api, {}, policy)
            version = unless_stopped(
                partial(_version, server.base_url, {}, adapter.version_path),
                should_stop,
                f"asking {server.base_url} for its version",
            )
            self.instances.append(
                RealInstance(
                    index=index,
                    endpoint=endpoint,
                    server=server,
                    max_num_seqs=adapter.max_num_seqs(config),
                    version=version,
                )
            )

    def dead_instances(self) -> list[tuple[RealInstance, int]]:
        """Launched instances whose process has exited, with the exit code."""
        dead = []
        for instance in self.instances:
            process = instance.server.process if instance.server else None
            if process is not None and process.poll() is not None:
                dead.append((instance, process.returncode))
        return dead

    def crash_reports(self) -> str:
        """The log tails of launched servers whose log shows a crash (for a failed run's error;
        empty when none does)."""
        reports = []
        for index, server in enumerate(self.servers):
            report = server.crash_report()
            if report:
                reports.append(f"server {index} log ({server.log_path.name}), last lines:\n{report}")
        return "\n".join(reports)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def _beliefs(
    config: Any, instance: RealInstance, snapshot: MetricsSnapshot | None, capacity_source: str
) -> InstanceBeliefs:
    """What a policy believes about ``instance`` (runners.engines.beliefs.real_beliefs): the
    launch or attach config, what its /metrics and info answers said, the engine's defaults."""
    adapter = adapter_for(instance.endpoint.kind)
    discovered = dict(adapter.discovered_limits(instance.info))
    if instance.kv_capacity_tokens is not None:
        discovered["kv_capacity_tokens"] = (instance.kv_capacity_tokens, capacity_source)
    if instance.block_size is not None:
        discovered["block_size"] = (instance.block_size, "discovered (/metrics)")
    if snapshot is not None and snapshot.prefix_caching is not None:
        discovered.setdefault("prefix_caching", (snapshot.prefix_caching, "discovered (/metrics cache info)"))
    return real_beliefs(adapter=adapter, config=config, launched=instance.server is not None, discovered=discovered)


def kv_capacity_from_log(path: Path, pattern: re.Pattern[str]) -> int | None:
    """KV capacity in tokens from a start-up log line (the adapter's ``kv_log_pattern``: vLLM's
    ``GPU KV cache size: N tokens``, SGLang's ``max_total_num_tokens=N``)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    match = pattern.search(text)
    return int(match.group(1).replace(",", "")) if match else None
