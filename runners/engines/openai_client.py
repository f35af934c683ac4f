"""Streaming client for OpenAI-compatible servers (vLLM, LMDeploy, others), on aiohttp.

Each request asks for exactly the target output: ``max_tokens`` = target, ``ignore_eos`` and,
where the engine accepts it, ``min_tokens`` = target, so every scheduler serves the same work.
``stream_options.include_usage`` is sent explicitly and the token count is taken from the final
usage chunk. Every SSE line is timestamped with ``time.perf_counter()`` (monotonic) the moment
it is read. HTTP errors, engine error chunks, dropped streams, timeouts and refused
connections come back as a result with ``error`` set, never as an exception.

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

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import aiohttp

#: Seconds a pooled connection may stay idle before the client closes it: below the 5 s
#: keep-alive of uvicorn-based servers (vLLM, LMDeploy), so it never races their close.
KEEPALIVE_S = 2.0


def client_connector() -> aiohttp.TCPConnector:
    """The connection pool for a run: unbounded (the policy bounds requests in flight), and
    closing idle connections before the servers do (see the module docstring)."""
    return aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=KEEPALIVE_S)


@dataclass(frozen=True)
class Endpoint:
    """One server: base URL (no trailing /v1), served model name, API flavour and headers."""

    base_url: str
    model: str
    api: Literal["completions", "chat"] = "completions"
    kind: str = "openai"
    headers: dict[str, str] = field(default_factory=dict)
    accepts_min_tokens: bool = True
    accepts_priority: bool = False

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
    error: str | None = None
    http_status: int | None = None
    dropped_unanswered: bool = False  # the connection closed before any response
    retried_after: str | None = None  # the error of a first attempt that was sent again

    @property
    def output_tokens(self) -> int:
        """Usage's completion tokens when the server sent them, else the number of text chunks."""
        return self.completion_tokens if self.completion_tokens is not None else len(self.chunk_times)


def build_payload(endpoint: Endpoint, prompt: str, max_tokens: int, priority: int | None, send_min_tokens: bool) -> dict[str, Any]:
    """The JSON body for one request."""
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
    return payload


def _chunk_text(chunk: dict[str, Any], api: str) -> str | None:
    """The chunk's generated text, or None if it carries no token.

    As in vLLM's benchmark client, a completions chunk with any choice is a token event even
    when its text is empty (a token that ends inside a multi-byte character); a chat chunk
    counts only with content, since servers open chat streams with a role-only chunk.
    """
    choices = chunk.get("choices") or []
    if not choices:
        return None
    if api == "chat":
        text = "".join((choice.get("delta") or {}).get("content") or "" for choice in choices)
        return text or None
    return "".join(choice.get("text") or "" for choice in choices)


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
) -> StreamResult:
    """Send one streaming request and collect its chunks; never raises for server trouble.

    ``on_chunk(time, is_first)`` is called for every chunk that carries text, as it arrives.
    If the server drops the connection before any response (a keep-alive close racing the
    send: the server never saw the request), it is sent once more, on a connection of its own.
    """
    result = await _stream_once(session, endpoint, prompt, max_tokens, priority, send_min_tokens, timeout_s,
                                on_chunk, clock)
    if result.dropped_unanswered:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as fresh:
            retry = await _stream_once(fresh, endpoint, prompt, max_tokens, priority, send_min_tokens, timeout_s,
                                       on_chunk, clock)
        retry.sent_at = result.sent_at
        retry.retried_after = result.error
        return retry
    return result


async def _stream_once(session, endpoint, prompt, max_tokens, priority, send_min_tokens, timeout_s, on_chunk,
                       clock) -> StreamResult:
    payload = build_payload(endpoint, prompt, max_tokens, priority, send_min_tokens)
    result = StreamResult(sent_at=clock())
    done = False
    try:
        async with session.post(
            endpoint.url, json=payload, headers=endpoint.headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as response:
            result.http_status = response.status
            if response.status != 200:
                result.error = f"HTTP {response.status}: {_error_message(await response.text())}"
                return result
            async for raw in response.content:
                now = clock()
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    result.error = f"malformed stream chunk: {data[:120]!r}"
                    return result
                if "error" in chunk or chunk.get("object") == "error":
                    result.error = f"engine error: {_error_message(data)}"
                    return result
                text = _chunk_text(chunk, endpoint.api)
                if text is not None:
                    if on_chunk is not None:
                        on_chunk(now, not result.chunk_times)
                    result.chunk_times.append(now)
                    result.text += text
                usage = chunk.get("usage")
                if usage:
                    result.completion_tokens = usage.get("completion_tokens", result.completion_tokens)
                    result.prompt_tokens = usage.get("prompt_tokens", result.prompt_tokens)
    except asyncio.TimeoutError:
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
    if not done:
        result.error = f"stream dropped after {len(result.chunk_times)} chunks (no [DONE])"
    elif not result.chunk_times:
        result.error = "stream ended without any token"
    return result
