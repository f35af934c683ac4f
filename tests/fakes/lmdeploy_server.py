"""A small test server that speaks LMDeploy's OpenAI-compatible wire format and metric names.

Modelled on InternLM/lmdeploy ``lmdeploy/serve/openai/api_server.py`` and ``protocol.py`` of
the v0.10 line (usage only on the chunk that carries ``finish_reason``, null fields included,
``id`` = the session id as a string) and, with ``usage_style="separate"``, on current main
(lmdeploy/serve/openai/endpoints/completions.py at 0.16.0: null fields dropped, a separate
``choices: []`` usage chunk before ``[DONE]``). Both end every stream with a chunk of empty text
that carries the finish reason (lmdeploy/serve/core/async_engine.py, v0.10.2 to 0.16.0: the
finishing output repeats no text), after the chunk of the last token; metrics as
``lmdeploy/metrics/loggers.py`` of v0.10/v0.11 (``lmdeploy:gpu_cache_usage_perc``,
``lmdeploy:num_requests_running``, ``lmdeploy:num_requests_waiting``,
``lmdeploy:time_to_first_token_seconds``, ...) with labels ``model_name`` and ``engine``.
Errors use LMDeploy's flat body ``{"message", "type", "code", "param", "object": "error"}``.
``POST /v1/encode`` (api_server.py of v0.10; endpoints/auxiliary.py since v0.16) takes
``{"input": str | [str], "do_preprocess": bool, "add_bos": bool}`` and answers
``{"input_ids", "length"}`` (lists for a list input); ``has_encode=False`` leaves it out.
The fake's tokenizer: ``len(text) // 4`` ids per text, plus BOS with ``add_bos``, the count its
usage reports for a prompt.

Metrics switch (lmdeploy/cli/utils.py, api_server.py ``mount_metrics``): ``version="0.10"`` is
v0.10.x, whose ``/metrics`` is 404 unless started with ``--enable-metrics`` (its ``--help`` lists
that flag); ``version="0.11"`` (the default) is v0.11.0 and later, metrics on unless
``--disable-metrics``. The inter-token histograms are filled as lmdeploy/metrics/stats.py
(``IterationStats.update_from_output``) fills them: once per engine output, not per token, each
output after the first carrying ``tokens_per_output`` tokens streamed in one chunk;
``lmdeploy:iter_token_latency`` observes the gap since the previous output and
``lmdeploy:time_per_output_token_seconds`` that gap over the output's tokens.

It is a real HTTP server (aiohttp) on a loopback port, run in a background thread. Tokens come
out every ``token_delay_s``; at most ``max_batch`` requests run at once (others wait), so
running and KV usage move like an engine's. As in LMDeploy (lmdeploy/serve/core/async_engine.py,
v0.10.2's ``free_insts``), a request beyond ``max_batch`` waits in the API layer for a request
handle: it is never in ``lmdeploy:num_requests_waiting`` (the engine's queue, 0 here), only in
``lmdeploy:num_api_requests_waiting`` (metrics/loggers.py from v0.13.0; ``api_waiting_metric=False``
leaves it out, as before v0.13). Prompts containing ``FAIL500`` get an HTTP
500, ``DROPME`` streams two tokens and then cuts the connection, ``STREAMERR`` streams two tokens
and then an in-stream error ``data: {"error": {...}}`` and ``[DONE]`` (completions.py's
``RequestError`` path), ``SLOWME`` stalls for 30 s.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

try:
    from tests.fakes.threaded_server import ThreadedServer, serve_until_signalled
except ImportError:  # run as a script (the launch tests start it as `lmdeploy serve api_server`)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from threaded_server import ThreadedServer, serve_until_signalled  # type: ignore[no-redef]

LMDEPLOY_FORMAT_VERSION = "0.10 (api_server.py streaming; loggers.py metric names)"


@dataclass
class FakeLMDeploy(ThreadedServer):
    model_name: str = "internlm-fake"
    token_delay_s: float = 0.005
    max_batch: int = 8
    kv_capacity_tokens: int = 20_000
    usage_style: str = "final"  # "final" (v0.10) or "separate" (main)
    has_encode: bool = True
    metrics_enabled: bool = True  # False: /metrics is 404 (v0.10 without --enable-metrics, or --disable-metrics)
    tokens_per_output: int = 1  # tokens each engine output after the first carries (one stream chunk)
    api_waiting_metric: bool = True  # v0.13+: export lmdeploy:num_api_requests_waiting (earlier: no such gauge)
    port: int = 0
    requests_seen: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.running = Gauge("lmdeploy:num_requests_running", "running", labels, registry=self.registry)
        self.waiting = Gauge("lmdeploy:num_requests_waiting", "waiting", labels, registry=self.registry)
        self.api_waiting = Gauge(
            "lmdeploy:num_api_requests_waiting",
            "Number of requests waiting for free request handles.",
            labels,
            registry=self.registry if self.api_waiting_metric else None,
        )
        self.cache = Gauge("lmdeploy:gpu_cache_usage_perc", "kv usage 0-1", labels, registry=self.registry)
        self.ttft = Histogram(
            "lmdeploy:time_to_first_token_seconds",
            "ttft",
            labels,
            registry=self.registry,
            buckets=[0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10],
        )
        gap_buckets = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0]
        self.tpot = Histogram(
            "lmdeploy:time_per_output_token_seconds", "tpot", labels, registry=self.registry, buckets=gap_buckets
        )
        self.itl = Histogram("lmdeploy:iter_token_latency", "itl", labels, registry=self.registry, buckets=gap_buckets)
        self._labels = {"model_name": self.model_name, "engine": "0"}
        for metric in (self.running, self.waiting, self.api_waiting, self.cache, self.ttft, self.tpot, self.itl):
            metric.labels(**self._labels)  # as LMDeploy's loggers do: series exist from start-up
        self._session = 0
        self._kv_tokens = 0
        self._init_thread()

    # -- handlers ----------------------------------------------------------------------------
    def _error(self, status: int, message: str) -> web.Response:
        body = {"message": message, "type": "invalid_request_error", "code": status, "param": None, "object": "error"}
        return web.json_response(body, status=status)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "lmdeploy",
            "root": self.model_name,
            "parent": None,
            "permission": [],
        }
        return web.json_response({"object": "list", "data": [card]})

    async def encode(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = body.get("input")
        if not isinstance(texts, (str, list)):
            return self._error(400, "input must be a string or a list of strings")

        def ids(text: str) -> list[int]:
            return ([1] if body.get("add_bos", True) else []) + [7] * (len(text) // 4)

        if isinstance(texts, str):
            encoded = ids(texts)
            return web.json_response({"input_ids": encoded, "length": len(encoded)})
        encoded_all = [ids(text) for text in texts]
        return web.json_response({"input_ids": encoded_all, "length": [len(item) for item in encoded_all]})

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.metrics_enabled:  # mount_metrics mounted no route: FastAPI's 404
            return web.json_response({"detail": "Not Found"}, status=404)
        return web.Response(body=generate_latest(self.registry), content_type="text/plain")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests_seen.append(body)
        if body.get("model") != self.model_name:
            return self._error(404, f"The model '{body.get('model')}' does not exist.")
        chat = request.path.endswith("/chat/completions")
        if chat:
            messages = body.get("messages") or []
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        else:
            prompt = body.get("prompt", "")
        if "FAIL500" in prompt:
            return self._error(500, "internal error (injected)")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._session += 1
        session = str(self._session)
        arrived = time.perf_counter()
        # async_engine.py: a request waits for one of max-batch-size request handles in the API
        # layer, counted only in num_api_requests_waiting (v0.13+), never in the engine's waiting
        self.api_waiting.labels(**self._labels).inc()
        while self.running.labels(**self._labels)._value.get() >= self.max_batch:
            await asyncio.sleep(self.token_delay_s)
        self.api_waiting.labels(**self._labels).dec()
        self.running.labels(**self._labels).inc()
        prompt_tokens = max(1, len(prompt) // 4)
        used = prompt_tokens
        self._kv_tokens += used
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        try:
            await response.prepare(request)
            index, previous = 0, arrived
            while index < max_tokens:
                new = 1 if index == 0 else min(self.tokens_per_output, max_tokens - index)
                await asyncio.sleep(self.token_delay_s * new)
                now = time.perf_counter()
                if index == 0:
                    self.ttft.labels(**self._labels).observe(now - arrived)
                else:  # stats.py: itl = the gap since the previous output, tpot = itl / its new tokens
                    self.itl.labels(**self._labels).observe(now - previous)
                    self.tpot.labels(**self._labels).observe((now - previous) / new)
                previous = now
                if "DROPME" in prompt and index == 2:
                    request.transport.close()
                    return response
                if "STREAMERR" in prompt and index == 2:  # completions.py: a RequestError mid-stream
                    error = {"message": "injected engine error", "type": "internal_error", "code": 500}
                    await response.write(
                        f"data: {json.dumps({'error': {**error, 'param': None, 'object': 'error'}})}\n\n".encode()
                    )
                    await response.write(b"data: [DONE]\n\n")
                    return response
                if "SLOWME" in prompt:
                    await asyncio.sleep(30)
                self._kv_tokens += new
                used += new
                self.cache.labels(**self._labels).set(min(1.0, self._kv_tokens / self.kv_capacity_tokens))
                text = "".join(f"t{i} " for i in range(index, index + new))
                index += new
                chunk = self._chunk(session, chat, text, None, include_usage)
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            # async_engine.py: the finishing output is a separate one with empty text ("avoid
            # returning the last response twice"), streamed as its own chunk with the finish reason
            usage = {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + max_tokens,
                "completion_tokens": max_tokens,
            }
            finish = self._chunk(session, chat, "", "length", include_usage)
            if include_usage and self.usage_style == "final":
                finish["usage"] = usage
            await response.write(f"data: {json.dumps(finish)}\n\n".encode())
            if include_usage and self.usage_style == "separate":
                trailer = {
                    "id": session,
                    "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": int(time.time()),
                    "model": self.model_name,
                    "choices": [],
                    "usage": usage,
                }
                await response.write(f"data: {json.dumps(trailer)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
        except ConnectionResetError:  # the client went away (timeouts, dropped streams)
            pass
        finally:
            self.running.labels(**self._labels).dec()
            self._kv_tokens -= used
            self.cache.labels(**self._labels).set(max(0.0, self._kv_tokens / self.kv_capacity_tokens))
        return response

    def _chunk(self, session: str, chat: bool, text: str, finish: str | None, include_usage: bool) -> dict:
        """One stream chunk as LMDeploy writes it: v0.10 (``usage_style="final"``) with its null
        fields; current main (``"separate"``, endpoints/completions.py at 0.16.0) dumped with
        ``exclude_none=True`` and ``"usage": None`` put back when the request asked for usage."""
        if chat:  # ChatCompletionStreamResponse: role on every chunk, no separate role chunk
            delta = {"role": "assistant", "content": text, "reasoning_content": None, "gen_tokens": None}
            delta["tool_calls"] = []
            choice: dict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "gen_tokens": None, "finish_reason": finish}
        chunk = {
            "id": session,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": None,
        }
        if self.usage_style == "separate":
            chunk = _without_none(chunk)
            if include_usage:
                chunk["usage"] = None
        return chunk

    # -- lifecycle -----------------------------------------------------------------------------
    def routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.metrics)
        if self.has_encode:
            app.router.add_post("/v1/encode", self.encode)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)


def _without_none(value: object) -> object:
    """``value`` with every None-valued key dropped, as pydantic's ``exclude_none`` dumps it."""
    if isinstance(value, dict):
        return {key: _without_none(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_none(item) for item in value]
    return value


def main(argv: list[str] | None = None) -> None:
    """Command line shaped like ``lmdeploy serve api_server`` (flags from lmdeploy/cli/serve.py),
    so schedlab's LMDeploy launch path can start this server in place of the real one."""
    import argparse

    # --fake-version picks the LMDeploy whose command line (and --help) this one copies
    version_parser = argparse.ArgumentParser(add_help=False)
    version_parser.add_argument("--fake-version", choices=["0.10", "0.11"], default="0.11")
    version, rest = version_parser.parse_known_args(argv)
    parser = argparse.ArgumentParser(prog="fake lmdeploy serve api_server")
    parser.add_argument("model_path")
    parser.add_argument("--server-name", default="0.0.0.0")
    parser.add_argument("--server-port", type=int, default=23333)
    parser.add_argument("--backend", choices=["turbomind", "pytorch"], default="turbomind")
    parser.add_argument("--model-name", default=None)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--cache-max-entry-count", type=float, default=0.8)
    parser.add_argument("--session-len", type=int, default=None)
    parser.add_argument("--tp", type=int, default=1)
    if version.fake_version == "0.10":  # lmdeploy/cli/utils.py of v0.10.2
        parser.add_argument("--enable-metrics", action="store_true", default=False, help="enable metrics system")
    else:  # v0.11.0 and later
        parser.add_argument("--disable-metrics", action="store_true", default=False, help="disable metrics system")
    parser.add_argument("--die-after", type=float, default=None, help="test only: exit with code 9 after S seconds")
    args = parser.parse_args(rest)
    server = FakeLMDeploy(
        model_name=args.model_name or args.model_path,
        max_batch=args.max_batch_size,
        port=args.server_port,
        metrics_enabled=args.enable_metrics if version.fake_version == "0.10" else not args.disable_metrics,
    )
    server.start()
    print(
        f"fake LMDeploy {version.fake_version} {LMDEPLOY_FORMAT_VERSION} serving {server.model_name} on {server.url}",
        flush=True,
    )
    serve_until_signalled(server, args.die_after)


if __name__ == "__main__":
    main()
