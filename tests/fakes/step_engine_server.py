"""A test server whose engine runs in steps and shares its time with its front end, in vLLM's
OpenAI completions wire format (``data:`` chunks ``{"choices": [{"index": 0, "text": ...}]}``, a
usage chunk with ``choices: []`` before ``data: [DONE]``, as vLLM's serving_completion.py streams
with ``stream_options.include_usage``).

The engine is one loop: a step lasts ``step_s`` seconds, and every running request gets one token
out of it (its first token is its prefill). Every request that arrives (the HTTP handler runs)
takes ``arrival_s`` seconds from the engine: the next step lasts that much longer. That is the
front-end cost the step profiler's interference phase measures (runners/app/profiler.py), with a
known answer. A prompt's token count is its number of words. A real aiohttp server on a loopback
port, run in a background thread.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from aiohttp import web

from tests.fakes.threaded_server import ThreadedServer


@dataclass
class StepEngineServer(ThreadedServer):
    """``step_s``: seconds per engine step; ``arrival_s``: engine seconds each arriving request
    takes (added to the next step)."""

    step_s: float = 0.005
    arrival_s: float = 0.003
    port: int = 0

    def __post_init__(self) -> None:
        self._init_thread()

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._running: dict[asyncio.Queue, int] = {}
        self._stolen_s = 0.0
        self._wake = asyncio.Event()
        self._engine = loop.create_task(self._steps())

    def on_stopping(self) -> None:
        self._engine.cancel()
        assert self._loop is not None
        self._loop.run_until_complete(asyncio.gather(self._engine, return_exceptions=True))

    async def _steps(self) -> None:
        while True:
            if not self._running:
                self._wake.clear()
                await self._wake.wait()
            delay, self._stolen_s = self.step_s + self._stolen_s, 0.0
            await asyncio.sleep(delay)
            for queue, left in list(self._running.items()):
                queue.put_nowait("x")
                if left <= 1:
                    del self._running[queue]
                else:
                    self._running[queue] = left - 1

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self._completions)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        self._stolen_s += self.arrival_s  # the front end's work on this request, on the engine's time
        body = await request.json()
        prompt_tokens = len(str(body["prompt"]).split())
        max_tokens = int(body["max_tokens"])
        queue: asyncio.Queue = asyncio.Queue()
        self._running[queue] = max_tokens
        self._wake.set()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(max_tokens):
            text = await queue.get()
            chunk = {"object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": None}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": max_tokens,
            "total_tokens": prompt_tokens + max_tokens,
        }
        await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response
