"""An OpenAI-compatible test server that misbehaves on purpose, for the real-engine client tests.

A real HTTP server (aiohttp) on a loopback port, run in a background thread like
:mod:`tests.fakes.lmdeploy_server`. ``behaviour`` picks what ``POST /v1/completions`` (and
``/v1/chat/completions``) does:

- ``"ok"``: ``max_tokens`` text chunks, a usage chunk with the right count, ``[DONE]``.
- ``"malformed"``: ``good_tokens`` good chunks, then the line ``data: <chunk>`` with ``chunk``
  sent verbatim (valid JSON of an unexpected shape), then the rest of a good stream.
- ``"usage"``: a full stream whose usage says ``completion_tokens = usage`` (0, -3, "abc", ...).
- ``"short"``: ``short_tokens`` chunks (fewer than asked) with an honest usage, then ``[DONE]``.
- ``"hang"``: reads the request, streams ``hang_after`` chunks (default none: not even the
  response head), then never answers more (until the server stops).
- ``"echo-auth"``: HTTP 401 whose body echoes the request's ``Authorization`` header.

``models`` replaces the body of ``GET /v1/models`` (e.g. a dict with no list) when set.
``hang_metrics`` makes ``GET /metrics`` never answer; ``metrics_body`` (text or bytes) replaces
its page (a hostile one: NaN gauges, 50 MB). ``models_echo_auth`` lists one model whose id is the
request's ``Authorization`` header (a server planting the API key in the model card); ``posts``
counts the completion requests received.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.threaded_server import ThreadedServer

BEHAVIOURS = ("ok", "malformed", "usage", "short", "hang", "echo-auth")


@dataclass
class FaultServer(ThreadedServer):
    behaviour: str = "ok"
    chunk: str = "null"  # for "malformed": the JSON text sent after good_tokens good chunks
    good_tokens: int = 2
    usage: Any = 0  # for "usage": the completion_tokens value reported
    short_tokens: int = 3  # for "short": chunks sent, whatever was asked
    hang_after: int = 0  # for "hang": chunks sent before it stops answering
    hang_metrics: bool = False
    metrics_body: str | bytes | None = None  # replaces the /metrics page when not None
    models_echo_auth: bool = False
    models: Any = None  # replaces the /v1/models body when not None
    model_name: str = "fault-model"
    token_delay_s: float = 0.001
    posts: int = 0
    bodies: list[dict] = field(default_factory=list)
    port: int = 0
    shutdown_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if self.behaviour not in BEHAVIOURS:
            raise ValueError(f"behaviour {self.behaviour!r}; expected one of {BEHAVIOURS}")
        self._init_thread()
        self._release: asyncio.Event | None = None

    # -- handlers ----------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, request: web.Request) -> web.Response:
        if self.hang_metrics:
            await self._release.wait()
        if self.metrics_body is not None:
            body = self.metrics_body.encode() if isinstance(self.metrics_body, str) else self.metrics_body
            return web.Response(body=body, content_type="text/plain")
        return web.Response(text="# TYPE fault_up gauge\nfault_up 1\n", content_type="text/plain")

    async def list_models(self, request: web.Request) -> web.Response:
        if self.models_echo_auth:
            card = {"id": request.headers.get("Authorization", ""), "owned_by": "fault"}
            return web.json_response({"object": "list", "data": [card]})
        if self.models is not None:
            return web.json_response(self.models)
        return web.json_response({"object": "list", "data": [{"id": self.model_name, "owned_by": "fault"}]})

    def _line(self, chunk: Any) -> bytes:
        text = chunk if isinstance(chunk, str) else json.dumps(chunk)
        return f"data: {text}\n\n".encode()

    def _token(self, index: int, chat: bool) -> dict:
        choice = {"index": 0, "delta": {"content": f"t{index} "}} if chat else {"index": 0, "text": f"t{index} "}
        return {"object": "text_completion", "choices": [choice]}

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.posts += 1
        self.bodies.append(body)
        if self.behaviour == "hang" and not self.hang_after:
            await self._release.wait()
            return web.Response(status=503)
        if self.behaviour == "echo-auth":
            message = f"bad key {request.headers.get('Authorization', '')}"
            return web.json_response({"error": {"message": message, "type": "auth"}}, status=401)
        chat = request.path.endswith("/chat/completions")
        asked = int(body.get("max_tokens") or 16)
        sent = min(self.short_tokens, asked) if self.behaviour == "short" else asked
        usage = self.usage if self.behaviour == "usage" else sent
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for index in range(sent):
                if self.behaviour == "malformed" and index == self.good_tokens:
                    await response.write(self._line(self.chunk))
                if self.behaviour == "hang" and index == self.hang_after:
                    await self._release.wait()
                    return response
                await asyncio.sleep(self.token_delay_s)
                await response.write(self._line(self._token(index, chat)))
            trailer = {
                "object": "text_completion",
                "choices": [],
                "usage": {"prompt_tokens": 1, "completion_tokens": usage, "total_tokens": 1},
            }
            await response.write(self._line(trailer))
            await response.write(b"data: [DONE]\n\n")
        except ConnectionResetError:  # the client gave up on this request
            pass
        return response

    # -- lifecycle -----------------------------------------------------------------------------
    def routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._release = asyncio.Event()

    def on_stopping(self) -> None:
        self._release.set()  # hanging handlers end
