"""A small test server that speaks SGLang's HTTP wire format and metric names.

Modelled on the SGLang 0.5.23 release (python/sglang/srt/entrypoints/http_server.py,
entrypoints/openai/protocol.py, serving_completions.py, serving_chat.py, serving_tokenize.py,
observability/metrics_collector.py), checked against 0.5.6.post2:

- ``GET /health``: 503 (empty body) until warm-up has run, then 200 with an empty body;
- ``GET /v1/models``: ``{"object": "list", "data": [{"id", "object": "model", "created",
  "owned_by": "sglang", "root", "parent": null, "max_model_len": <context length>}]}``;
- ``GET /server_info``: the server arguments flat, plus ``status``, ``max_total_num_tokens``,
  ``max_req_input_len``, ``version``; no ``/version`` route;
- ``POST /v1/tokenize`` (and ``/tokenize``): ``{"model", "prompt"}`` or ``{"model", "messages"}``
  -> ``{"tokens", "count", "max_model_len"}`` where ``max_model_len`` is the tokenizer's own limit
  (131072 here), not the server's context (versions below);
- streams: compact JSON (no spaces) in ``data: <json>\\n\\n`` events; completions chunks
  ``{"id": <32 hex>, "object": "text_completion", "created", "model": <as sent>, "choices":
  [{"index", "text", "logprobs": null, "finish_reason", "matched_stop": null}], "usage": null}``
  with ``finish_reason`` on the last content chunk; chat opens with a role chunk (content ``""``),
  then content chunks, then a separate finish chunk; with ``include_usage`` a ``choices: []``
  usage chunk; then ``data: [DONE]``;
- errors: HTTP 400 ``{"object": "error", "message", "type": "BadRequestError", "param": null,
  "code": 400}``, with SGLang's context-length messages, even for streams (0.5.23);
- ``/metrics`` only when started with ``enable_metrics`` (``--enable-metrics``): the ``sglang:``
  names with labels ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``, ``moe_ep_rank`` (the
  tokenizer-side histograms with ``model_name``, ``engine_type``, ``is_streaming``);
- the scheduler's gauges (running, queued, token usage) on SGLang's schedule
  (srt/managers/scheduler_metrics_mixin.py ``log_prefill_stats`` / ``log_decode_stats``, called
  from the scheduler's loop): at each prefill batch (running = the requests already running
  before it, queued = those still waiting) and every ``decode_log_interval`` decode steps
  (``--decode-log-interval``, default 40; running = the decode batch, finished requests
  included), never while idle, so they lag and keep their last values once the server drains.
  A decode step is one ``token_delay_s`` tick while any request runs;
- ``POST /v1/tokenize`` in two versions (``tokenize_style``): ``"completion"`` (the current
  srt/entrypoints/openai/serving_tokenize.py: ``add_special_tokens`` is dropped and a ``prompt`` is
  tokenized as a completion request, so BOS is always added; ``messages`` go through a chat
  request, whose template always ends with the generation prompt: no ``add_generation_prompt``
  field) and ``"prompt"`` (the 0.5.4-era file: ``prompt`` only, ``add_special_tokens`` honoured,
  a body without ``prompt`` refused with HTTP 400).

The tokenizer is a stand-in: one token per whitespace-separated word (BOS added with special
tokens), so its counts differ from 4 characters per token and a client that does not ask the
server miscounts. Tokens come out every ``token_delay_s``; at most ``max_running_requests`` run
at once, the others queue (by ``priority`` when priority scheduling is on: lower values first
with ``schedule_low_priority_values_first``, else higher first).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

try:
    from tests.fakes.threaded_server import ThreadedServer, serve_until_signalled
except ImportError:  # run as a script (the launch tests start it as `python -m sglang.launch_server`)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from threaded_server import ThreadedServer, serve_until_signalled  # type: ignore[no-redef]

SGLANG_FORMAT_VERSION = "0.5.23"
TOKENIZER_MAX_LENGTH = 131_072


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def word_tokens(text: str) -> list[int]:
    """The stand-in tokenizer: a token id per whitespace-separated word."""
    return [sum(word.encode()) % 30_000 + 3 for word in text.split()]


def chat_tokens(messages: list[dict]) -> list[int]:
    """The stand-in chat template: BOS, role markers around each message, the generation prompt."""
    text = " ".join(f"<|{m.get('role')}|> {m.get('content', '')} <|end|>" for m in messages)
    return [1] + word_tokens(text) + [2]


@dataclass
class FakeSGLang(ThreadedServer):
    served_model_name: str = "sglang-fake"
    context_length: int = 4096
    max_running_requests: int = 8
    max_total_tokens: int = 20_000
    token_delay_s: float = 0.005
    warmup_s: float = 0.0  # /health answers 503 this long after start
    enable_metrics: bool = True
    enable_cache_report: bool = (
        False  # --enable-cache-report: usage.prompt_tokens_details.cached_tokens (no cache here: 0)
    )
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    decode_log_interval: int = 40  # SGLang's default; a launch by schedlab passes 1
    tokenize_style: str = "completion"  # "completion" (current serving_tokenize.py) or "prompt" (0.5.4-era)
    port: int = 0
    requests_seen: list[dict] = field(default_factory=list)
    tokenize_seen: list[dict] = field(default_factory=list)
    started_order: list[str] = field(default_factory=list)  # prompts, in the order they began running

    def __post_init__(self) -> None:
        self.registry = CollectorRegistry()
        scheduler = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        tokenizer = ["model_name", "engine_type", "is_streaming"]
        self.running = Gauge(
            "sglang:num_running_reqs", "The number of running requests.", scheduler, registry=self.registry
        )
        self.queued = Gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue.", scheduler, registry=self.registry
        )
        self.usage = Gauge("sglang:token_usage", "The token usage.", scheduler, registry=self.registry)
        self.pool = Gauge(
            "sglang:max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            scheduler,
            registry=self.registry,
        )
        self.retracted = Counter(
            "sglang:num_retracted_requests", "Total number of retracted requests.", scheduler, registry=self.registry
        )
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            tokenizer,
            registry=self.registry,
            buckets=[0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 8, 400],
        )
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            tokenizer,
            registry=self.registry,
            buckets=[0.002, 0.004, 0.01, 0.02, 0.05, 0.1, 8],
        )
        self._scheduler_labels = {
            "model_name": self.served_model_name,
            "engine_type": "unified",
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        self._tokenizer_labels = {
            "model_name": self.served_model_name,
            "engine_type": "unified",
            "is_streaming": "true",
        }
        for metric in (self.running, self.queued, self.usage, self.pool, self.retracted):
            metric.labels(**self._scheduler_labels)
        self.pool.labels(**self._scheduler_labels).set(self.max_total_tokens)
        self._kv_tokens = 0
        self._running = 0
        self._waiting: list[tuple[float, int, asyncio.Future]] = []
        self._arrivals = 0
        self._decode_steps = 0
        self._ticker: asyncio.Task | None = None
        self._started_at = time.monotonic()
        self._init_thread()

    # -- helpers --------------------------------------------------------------------------------
    def _error(self, message: str, status: int = 400, kind: str = "BadRequestError") -> web.Response:
        body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
        return web.Response(text=compact(body), status=status, content_type="application/json")

    def server_args(self) -> dict:
        return {
            "model_path": self.served_model_name,
            "served_model_name": self.served_model_name,
            "context_length": self.context_length,
            "max_running_requests": self.max_running_requests,
            "max_total_tokens": self.max_total_tokens,
            "schedule_policy": "fcfs",
            "enable_priority_scheduling": self.enable_priority_scheduling,
            "schedule_low_priority_values_first": self.schedule_low_priority_values_first,
            "enable_metrics": self.enable_metrics,
            "decode_log_interval": self.decode_log_interval,
        }

    def _sort_key(self, priority: object) -> float:
        if not self.enable_priority_scheduling or not isinstance(priority, int):
            return 0.0
        return float(priority) if self.schedule_low_priority_values_first else -float(priority)

    def _log_stats(self, running: int) -> None:
        """What ``log_prefill_stats`` / ``log_decode_stats`` publish: the scheduler's gauges now."""
        self.running.labels(**self._scheduler_labels).set(running)
        self.queued.labels(**self._scheduler_labels).set(len(self._waiting))
        self.usage.labels(**self._scheduler_labels).set(min(1.0, self._kv_tokens / self.max_total_tokens))

    async def _decode_loop(self) -> None:
        """The scheduler's decode steps: one per ``token_delay_s`` while any request runs; every
        ``decode_log_interval``-th logs the gauges (none while idle)."""
        while True:
            await asyncio.sleep(self.token_delay_s)
            if self._running > 0:
                self._decode_steps += 1
                if self._decode_steps % self.decode_log_interval == 0:
                    self._log_stats(self._running)

    def on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._ticker = loop.create_task(self._decode_loop())

    def on_stopping(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()

    async def _admit(self, priority: object) -> None:
        """Wait for one of the ``max_running_requests`` slots (queue order: priority, then
        arrival); once admitted, its prefill batch logs the gauges."""
        if self._running < self.max_running_requests and not self._waiting:
            self._running += 1
        else:
            future = asyncio.get_running_loop().create_future()
            self._arrivals += 1
            self._waiting.append((self._sort_key(priority), self._arrivals, future))
            self._waiting.sort(key=lambda item: (item[0], item[1]))
            await future
        self._log_stats(self._running - 1)  # log_prefill_stats: running_bs, the batch it joins

    def _release(self) -> None:
        self._running -= 1
        while self._waiting and self._running < self.max_running_requests:
            _, _, future = self._waiting.pop(0)
            if not future.done():
                self._running += 1
                future.set_result(None)

    # -- handlers -------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if time.monotonic() - self._started_at < self.warmup_s:
            return web.Response(status=503)
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.served_model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": self.served_model_name,
            "parent": None,
            "max_model_len": self.context_length,
        }
        return web.Response(text=compact({"object": "list", "data": [card]}), content_type="application/json")

    async def server_info(self, request: web.Request) -> web.Response:
        info = {
            **self.server_args(),
            "status": "ready",
            "max_total_num_tokens": self.max_total_tokens,
            "max_req_input_len": min(self.context_length - 1, self.max_total_tokens - 1) - 5,
            "version": SGLANG_FORMAT_VERSION,
            "frontend": "python",
        }
        return web.Response(text=compact(info), content_type="application/json")

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.enable_metrics:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=generate_latest(self.registry), content_type="text/plain")

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.tokenize_seen.append(body)
        if self.tokenize_style == "prompt":  # 0.5.4-era TokenizeRequest: prompt (required), add_special_tokens
            if "prompt" not in body:
                return self._error("1 validation error for TokenizeRequest\nprompt\n  Field required")
            special = [1] if body.get("add_special_tokens", True) else []
            return self._tokens(special + word_tokens(str(body["prompt"])))
        if ("prompt" in body) == ("messages" in body):
            return self._error("Exactly one of 'prompt' or 'messages' must be provided.")
        if "messages" in body:  # a chat request: the template, generation prompt always added
            return self._tokens(chat_tokens(body["messages"]))
        return self._tokens([1] + word_tokens(str(body["prompt"])))  # a completion request: BOS always

    def _tokens(self, tokens: list[int]) -> web.Response:
        reply = {"tokens": tokens, "count": len(tokens), "max_model_len": TOKENIZER_MAX_LENGTH}
        return web.Response(text=compact(reply), content_type="application/json")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests_seen.append(body)
        chat = request.path.endswith("/chat/completions")
        if chat:
            messages = body.get("messages") or []
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            input_tokens = len(chat_tokens([m for m in messages if isinstance(m, dict)]))
        else:
            prompt = str(body.get("prompt", ""))
            input_tokens = 1 + len(word_tokens(prompt))
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or (None if chat else 16)
        if max_tokens is not None and max_tokens <= 0:
            return self._error("max_tokens must be positive", kind="Bad Request")
        if input_tokens > self.context_length:
            return self._error(
                f"The input ({input_tokens} tokens) is longer than the model's context length "
                f"({self.context_length} tokens)."
            )
        if max_tokens is None:
            max_tokens = self.context_length - input_tokens
        if input_tokens + max_tokens > self.context_length:
            return self._error(
                f"Requested token count exceeds the model's maximum context length of {self.context_length} tokens. "
                f"You requested a total of {input_tokens + max_tokens} tokens: {input_tokens} tokens from the input "
                f"messages and {max_tokens} tokens for the completion. Please reduce the number of tokens in the "
                "input messages or the completion to fit within the limit."
            )
        min_tokens = body.get("min_tokens") or 0
        if min_tokens > max_tokens:
            return self._error(f"min_new_tokens must be in [0, max_new_tokens({max_tokens})], got {min_tokens}.")
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        rid = body.get("rid") or uuid.uuid4().hex
        model = body.get("model", "default")
        created = int(time.time())
        arrived = time.perf_counter()
        await self._admit(body.get("priority"))
        self.started_order.append(prompt)
        used = input_tokens
        self._kv_tokens += used  # allocated after the prefill batch logged its stats
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        kind = "chat.completion.chunk" if chat else "text_completion"

        async def send(choices: list[dict], **extra: object) -> None:
            """One ``data:`` line: a chunk of this request carrying ``choices`` (and ``extra`` fields)."""
            chunk = {"id": rid, "object": kind, "created": created, "model": model, "choices": choices, **extra}
            await response.write(f"data: {compact(chunk)}\n\n".encode())

        try:
            await response.prepare(request)
            if chat:
                await send(
                    [
                        {
                            "index": 0,
                            "delta": {"reasoning_content": None, "role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                            "matched_stop": None,
                        }
                    ]
                )
            last_token = arrived
            for index in range(max_tokens):
                await asyncio.sleep(self.token_delay_s)
                now = time.perf_counter()
                if index == 0:
                    self.ttft.labels(**self._tokenizer_labels).observe(now - arrived)
                else:
                    self.itl.labels(**self._tokenizer_labels).observe(now - last_token)
                last_token = now
                self._kv_tokens += 1
                used += 1
                last = index == max_tokens - 1
                if chat:
                    choice = {
                        "index": 0,
                        "delta": {"reasoning_content": None, "content": f"t{index} "},
                        "logprobs": None,
                        "finish_reason": None,
                        "matched_stop": None,
                    }
                    await send([choice])
                else:
                    choice = {
                        "index": 0,
                        "text": f"t{index} ",
                        "logprobs": None,
                        "finish_reason": "length" if last else None,
                        "matched_stop": None,
                    }
                    await send([choice], usage=None)
            if chat:
                await send(
                    [
                        {
                            "index": 0,
                            "delta": {"reasoning_content": None},
                            "logprobs": None,
                            "finish_reason": "length",
                            "matched_stop": None,
                        }
                    ]
                )
            if include_usage:
                usage = {
                    "prompt_tokens": input_tokens,
                    "total_tokens": input_tokens + max_tokens,
                    "completion_tokens": max_tokens,
                    "reasoning_tokens": 0,
                }
                if chat:
                    usage.update(prompt_tokens_details=None, completion_tokens_details=None)
                if self.enable_cache_report:
                    usage["prompt_tokens_details"] = {"cached_tokens": 0}
                await send([], usage=usage)
            await response.write(b"data: [DONE]\n\n")
        except ConnectionResetError:  # the client went away
            pass
        finally:
            self._kv_tokens -= used
            self._release()
        return response

    # -- lifecycle -----------------------------------------------------------------------------
    def routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/v1/tokenize", self.tokenize)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.completions)


def main(argv: list[str] | None = None) -> None:
    """Command line shaped like ``python -m sglang.launch_server`` (flag names from SGLang 0.5.23,
    srt/arg_groups/fields/), so schedlab's SGLang launch path can start this server in its place."""
    import argparse

    parser = argparse.ArgumentParser(prog="fake python -m sglang.launch_server")
    parser.add_argument("--model-path", "--model", required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--max-running-requests", type=int, default=8)
    parser.add_argument("--context-length", type=int, default=4096)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--max-total-tokens", type=int, default=20_000)
    parser.add_argument("--chunked-prefill-size", type=int, default=None)
    parser.add_argument("--page-size", type=int, default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument(
        "--schedule-policy", default="fcfs", choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"]
    )
    parser.add_argument("--enable-priority-scheduling", action="store_true")
    parser.add_argument("--schedule-low-priority-values-first", action="store_true")
    parser.add_argument("--enable-metrics", action="store_true")
    parser.add_argument("--enable-cache-report", action="store_true")
    parser.add_argument("--decode-log-interval", type=int, default=40)
    parser.add_argument("--die-after", type=float, default=None, help="test only: exit with code 9 after S seconds")
    args = parser.parse_args(argv)
    server = FakeSGLang(
        served_model_name=args.served_model_name or args.model_path,
        context_length=args.context_length,
        max_running_requests=args.max_running_requests,
        max_total_tokens=args.max_total_tokens,
        enable_metrics=args.enable_metrics,
        enable_cache_report=args.enable_cache_report,
        enable_priority_scheduling=args.enable_priority_scheduling,
        schedule_low_priority_values_first=args.schedule_low_priority_values_first,
        decode_log_interval=args.decode_log_interval,
        warmup_s=0.3,
        port=args.port,
    )
    server.start()
    print(
        f"max_total_num_tokens={args.max_total_tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests={args.max_running_requests}, context_len={args.context_length}, "
        "available_gpu_mem=0.00 GB",
        flush=True,
    )
    print(f"fake SGLang {SGLANG_FORMAT_VERSION} serving {server.served_model_name} on {server.url}", flush=True)
    print("The server is fired up and ready to roll!", flush=True)
    serve_until_signalled(server, args.die_after)


if __name__ == "__main__":
    main()
