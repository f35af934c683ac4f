"""Streaming client for OpenAI-compatible servers (vLLM, LMDeploy, others), on aiohttp.

Each request asks for exactly the target output: ``max_tokens`` = target, ``ignore_eos`` and,
where the engine accepts it, ``min_tokens`` = target, so every scheduler serves the same work.
``stream_options.include_usage`` is sent explicitly and the token count is taken from the final
usage chunk. Every event (parsed by :mod:`runners.engines.sse`) is timestamped with
``time.perf_counter()`` (monotonic) the moment the piece of the body that completes its ``data:``
line is read (all the events of one piece share its time). HTTP errors, engine
error chunks, dropped streams, timeouts and refused connections come back as a result with
``error`` set, never as an exception. So do chunks that are valid JSON of an unexpected shape
(``null``, ``[1, 2]``, ``{"choices": "abc"}``, a usage count that is not a count): the error
quotes what arrived, and the chunks before it are kept. A usage count the client cannot trust
(0 after tokens arrived, or more than ``max_tokens``) fails the request too, rather than being
taken as progress. Every error text has the request's API key, and anything that looks like a
bearer token or ``sk-`` key, written as ``***`` (servers echo them).

Keep-alive: servers close a pooled connection after it has been idle for their keep-alive time
(uvicorn's default and vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE: 5 s), aiohttp keeps one for 15 s.
A request sent on a connection just as the server closes it fails with "Server disconnected"
or "Connection reset by peer" before any response - it happens to policies that hold requests
back, so connections sit idle for about 5 s (measured against uvicorn with a 1 s keep-alive
and requests sent 1 s +- 30 ms apart: 2 of 310 failed; with the client dropping connections
idle for 0.5 s, 0 of 310). So :func:`client_connector` drops idle connections after
``KEEPALIVE_S``, and a request that a server dropped before answering is sent once more.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from runners.engines.real_config import REDACTED, ApiKind
from runners.engines.sse import SSEEvent, SSEParser

#: Seconds a pooled connection may stay idle before the client closes it: below the 5 s
#: keep-alive of uvicorn-based servers (vLLM, LMDeploy), so it never races their close.
KEEPALIVE_S = 2.0


def client_connector() -> aiohttp.TCPConnector:
    """The connection pool for a run: unbounded (the policy bounds requests in flight), and
    closing idle connections before the servers do (see the module docstring)."""
    return aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)


#: Longest excerpt of a server's reply quoted in an error, characters.
QUOTE_CHARS = 120
_TOKEN_LIKE = re.compile(r"(?i)\b(bearer)(\s+)[^\s\"',;}\]]+|\bsk-[A-Za-z0-9_\-]{4,}")


def header_secrets(headers: dict[str, str]) -> list[str]:
    """The secret values in request headers: the credential part of each value (``Bearer sk-x``
    gives ``sk-x``), or the whole value when it has no scheme word."""
    secrets = []
    for value in headers.values():
        parts = value.split(None, 1)
        secrets.append(parts[1] if len(parts) == 2 else value)
    return [secret.strip() for secret in secrets if len(secret.strip()) >= 4]


def redact(text: str, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """``text`` with every one of ``secrets`` and anything that looks like a credential
    (``Bearer <token>``, ``sk-...``) replaced by ``***``: for error texts that are saved."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, REDACTED)

    def hide(match: re.Match) -> str:
        if match.group(1):
            return f"{match.group(1)}{match.group(2)}{REDACTED}"
        return f"sk-{REDACTED}"

    return _TOKEN_LIKE.sub(hide, text)


def scrub(value: Any, secrets: list[str] | tuple[str, ...] = ()) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every string, keys included,
    passed through :func:`redact`: for records whose strings a server supplied (a model id, a
    version) before they are written, since a server may echo the request's API key in them."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {scrub(key, secrets): scrub(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(item, secrets) for item in value]
    return value


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` as a Python literal, cut to ``limit`` characters (an ellipsis marks the cut)."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


class MalformedChunk(ValueError):
    """A stream chunk that is valid JSON but not shaped like an OpenAI stream chunk. ``text``:
    the chunk's generated text when only its ``usage`` was malformed (the token itself arrived)."""

    text: str | None = None


@dataclass(frozen=True)
class Endpoint:
    """One server: base URL (no trailing /v1), served model name, API flavour and headers."""

    base_url: str
    model: str
    api: ApiKind = "completions"
    kind: str = "openai"
    headers: dict[str, str] = field(default_factory=dict)
    accepts_min_tokens: bool = True
    accepts_priority: bool = False
    accepts_engine_args: bool = False  # vLLM's ``vllm_xargs`` (per-request values for its scheduler class)

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        return self.base_url + path


@dataclass
class StreamResult:
    """What one streamed request produced. Times are ``time.perf_counter()`` seconds."""

    sent_at: float
    chunk_times: list[float] = field(default_factory=list)
    text: str = ""
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    #: prompt tokens the server found in its prefix cache (``usage.prompt_tokens_details.cached_tokens``:
    #: vLLM with ``--enable-prompt-tokens-details``, which schedlab launches it with); None: not reported
    cached_tokens: int | None = None
    error: str | None = None
    http_status: int | None = None
    dropped_unanswered: bool = False  # the connection closed before any response
    retried_after: str | None = None  # the error of a first attempt that was sent again

    @property
    def output_tokens(self) -> int:
        """Usage's completion tokens when the server sent them, else the number of text chunks."""
        return self.completion_tokens if self.completion_tokens is not None else len(self.chunk_times)


def build_payload(
    endpoint: Endpoint,
    prompt: str,
    max_tokens: int,
    priority: int | None,
    send_min_tokens: bool,
    engine_args: Mapping[str, int | float | str] | None = None,
) -> dict[str, Any]:
    """The JSON body for one request (``engine_args`` as ``vllm_xargs`` where accepted)."""
    payload: dict[str, Any] = {
        "model": endpoint.model,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if endpoint.api == "chat":
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    if send_min_tokens and endpoint.accepts_min_tokens:
        payload["min_tokens"] = max_tokens
    if priority is not None and endpoint.accepts_priority:
        payload["priority"] = int(priority)
    if engine_args and endpoint.accepts_engine_args:
        payload["vllm_xargs"] = dict(engine_args)
    return payload


def _count(value: object, name: str) -> int | None:
    """A token count from a usage object: a non-negative integer (or integral float), or None."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedChunk(f"usage.{name} is not a count")
    if value < 0:
        raise MalformedChunk(f"usage.{name} is negative")
    return value


def parse_chunk(chunk: Any, api: str) -> tuple[str | None, dict[str, int | None] | None]:
    """(generated text or None if the chunk carries no token, usage counts or None) of one
    decoded chunk; :class:`MalformedChunk` if its shape is not an OpenAI stream chunk's.

    As in vLLM's benchmark client, a completions chunk with any choice is a token event even
    when its text is empty (a token that ends inside a multi-byte character), except a chunk of
    empty text that carries a ``finish_reason``: LMDeploy ends every stream with one, after the
    chunk of the last token (lmdeploy/serve/core/async_engine.py, v0.10.2 to 0.16.0: the
    finishing output repeats no text), so counting it would add one chunk time per request. A
    chat chunk counts only with content, since servers open chat streams with a role-only chunk.
    """
    if not isinstance(chunk, dict):
        raise MalformedChunk("not a JSON object")
    choices = chunk.get("choices")
    if choices is None:
        choices = []
    if not isinstance(choices, list):
        raise MalformedChunk("'choices' is not a list")
    pieces = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise MalformedChunk("a choice is not an object")
        if api == "chat":
            delta = choice.get("delta")
            if delta is None:
                delta = {}
            if not isinstance(delta, dict):
                raise MalformedChunk("'delta' is not an object")
            piece = delta.get("content")
        else:
            piece = choice.get("text")
        if piece is not None and not isinstance(piece, str):
            raise MalformedChunk("the generated text is not a string")
        pieces.append(piece or "")
    text: str | None = "".join(pieces)
    if api == "chat" or _finishing(chunk):
        text = text or None
    elif not choices:
        text = None
    usage = chunk.get("usage")
    if usage is None:
        return text, None
    try:
        if not isinstance(usage, dict):
            raise MalformedChunk("'usage' is not an object")
        counts = {name: _count(usage.get(name), name) for name in ("completion_tokens", "prompt_tokens")}
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        counts["cached_tokens"] = _count(cached, "prompt_tokens_details.cached_tokens")
    except MalformedChunk as exc:
        exc.text = text  # the chunk's token is good; only its usage is not
        raise
    return text, counts


def _error_message(body: str) -> str:
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return body.strip()[:300]
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        return str(error)[:300]
    return body.strip()[:300]


async def stream_request(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    prompt: str,
    max_tokens: int,
    priority: int | None = None,
    send_min_tokens: bool = True,
    timeout_s: float = 600.0,
    on_chunk: Callable[[float, bool], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    engine_args: Mapping[str, int | float | str] | None = None,
) -> StreamResult:
    """Send one streaming request and collect its chunks; never raises for server trouble.

    ``on_chunk(time, is_first)`` is called for every chunk that carries text, as it arrives.
    If the server drops the connection before any response (a keep-alive close racing the
    send: the server never saw the request), it is sent once more, on a connection of its own.
    Error texts have the endpoint's API key (and anything like a token) redacted. ``engine_args``:
    per-request values for an in-engine scheduler (see :func:`build_payload`).
    """
    secrets = header_secrets(endpoint.headers)
    result = await _stream_once(
        session, endpoint, prompt, max_tokens, priority, send_min_tokens, timeout_s, on_chunk, clock, engine_args
    )
    if result.dropped_unanswered:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as fresh:
            retry = await _stream_once(
                fresh, endpoint, prompt, max_tokens, priority, send_min_tokens, timeout_s, on_chunk, clock, engine_args
            )
        retry.sent_at = result.sent_at
        retry.retried_after = redact(result.error or "", secrets)
        result = retry
    if result.error is not None:
        result.error = redact(result.error, secrets)
    return result


async def _stream_once(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    prompt: str,
    max_tokens: int,
    priority: int | None,
    send_min_tokens: bool,
    timeout_s: float,
    on_chunk: Callable[[float, bool], None] | None,
    clock: Callable[[], float],
    engine_args: Mapping[str, int | float | str] | None = None,
) -> StreamResult:
    payload = build_payload(endpoint, prompt, max_tokens, priority, send_min_tokens, engine_args)
    result = StreamResult(sent_at=clock())
    try:
        async with session.post(
            endpoint.url, json=payload, headers=endpoint.headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            result.http_status = response.status
            if response.status != 200:
                result.error = f"HTTP {response.status}: {_error_message(await response.text())}"
                return result
            done = await _read_events(response.content, result, endpoint.api, on_chunk, clock)
            if result.error is not None:
                return result
    except TimeoutError:
        result.error = f"timeout after {timeout_s:g} s ({len(result.chunk_times)} chunks received)"
        return result
    except aiohttp.ClientConnectorError as exc:
        result.error = f"connection refused: {exc}"
        return result
    except aiohttp.ClientPayloadError as exc:
        result.error = f"stream dropped after {len(result.chunk_times)} chunks: {exc}"
        return result
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.dropped_unanswered = result.http_status is None
        return result
    except aiohttp.ClientError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    except Exception as exc:  # anything else the reply provokes fails this request, never the run
        result.error = f"client error after {len(result.chunk_times)} chunks: {type(exc).__name__}: {exc}"
        return result
    result.error = _ending_error(result, done, max_tokens)
    return result


def _pieces(content: Any) -> AsyncIterable[bytes]:
    """The body as the pieces that arrived: ``iter_any`` (every byte buffered so far, in one
    piece) where the body has it (aiohttp's ``StreamReader``), else ``content`` itself."""
    iter_any = getattr(content, "iter_any", None)
    return iter_any() if iter_any is not None else content


async def _read_events(
    content: Any,
    result: StreamResult,
    api: str,
    on_chunk: Callable[[float, bool], None] | None,
    clock: Callable[[], float],
) -> bool:
    """Read the body's events into ``result``. The body is read as the pieces that arrived, not
    line by line: one read, one ``clock()`` and one parser call per piece, however many events
    it holds, so every event is timestamped when its bytes were read and a burst of chunks costs
    one wake-up of the loop, not three per chunk (``data:`` line, blank line, next look; measured
    on the CPU vLLM, 128-token replies at 8 req/s: 80,629 line reads for 26,854 events).
    True once ``[DONE]`` arrives; False when the body ends without it, or at a chunk that fails
    the request (``result.error`` is then set)."""
    parser = SSEParser()
    async for raw in _pieces(content):
        for event in parser.feed(raw, clock()):
            if event.done:
                return True
            if not _take_event(result, event, api, on_chunk):
                return False
    for event in parser.close(clock()):
        if event.done:
            return True
        if not _take_event(result, event, api, on_chunk):
            return False
    return False


def _take_event(
    result: StreamResult, event: SSEEvent, api: str, on_chunk: Callable[[float, bool], None] | None
) -> bool:
    """Add one stream event's token and usage to ``result``; False (with ``result.error`` set) when
    it is not JSON, is an engine's error, or is not shaped like a stream chunk."""
    data = event.data.strip()
    try:
        chunk = json.loads(data)
    except ValueError:  # not JSON (or numbers too long for Python to read)
        result.error = f"malformed stream chunk (not JSON) after {len(result.chunk_times)} chunks: {quote(data)}"
        return False
    if isinstance(chunk, dict) and ("error" in chunk or chunk.get("object") == "error"):
        result.error = f"engine error: {_error_message(data)}"
        return False
    try:
        text, usage = parse_chunk(chunk, api)
    except MalformedChunk as exc:
        if exc.text is not None:  # a token with a malformed usage: the token arrived, keep it
            _take_token(result, exc.text, event.received_at, on_chunk)
        result.error = f"malformed stream chunk ({exc}) after {len(result.chunk_times)} chunks: {quote(data)}"
        return False
    if text is None and not result.chunk_times and _finishing(chunk):
        # a finishing chunk of empty text before any token: the stream's only token ended inside a
        # multi-byte character (vLLM, one token asked); after a token it is LMDeploy's closing chunk
        text = ""
    if text is not None:
        _take_token(result, text, event.received_at, on_chunk)
    if usage:
        if usage["completion_tokens"] is not None:
            result.completion_tokens = usage["completion_tokens"]
        if usage["prompt_tokens"] is not None:
            result.prompt_tokens = usage["prompt_tokens"]
        if usage["cached_tokens"] is not None:
            result.cached_tokens = usage["cached_tokens"]
    return True


def _finishing(chunk: Any) -> bool:
    """Whether a (well-formed) chunk carries a ``finish_reason``."""
    return any(
        isinstance(choice, dict) and choice.get("finish_reason") is not None for choice in chunk.get("choices") or []
    )


def _take_token(
    result: StreamResult, text: str, received_at: float, on_chunk: Callable[[float, bool], None] | None
) -> None:
    if on_chunk is not None:
        on_chunk(received_at, not result.chunk_times)
    result.chunk_times.append(received_at)
    result.text += text


def _ending_error(result: StreamResult, done: bool, max_tokens: int) -> str | None:
    """The error of a stream that ended without a failing chunk: no ``[DONE]``, no token, or a
    usage count the client cannot trust; None when it is whole."""
    chunks = len(result.chunk_times)
    if not done:
        return f"stream dropped after {chunks} chunks (no [DONE])"
    if not chunks:
        return "stream ended without any token"
    if result.completion_tokens == 0:
        return f"untrusted usage: completion_tokens 0 after {chunks} chunks"
    if result.completion_tokens is not None and result.completion_tokens > max_tokens:
        return (
            f"untrusted usage: completion_tokens {result.completion_tokens}, more than the "
            f"{max_tokens} asked ({chunks} chunks arrived)"
        )
    return None
