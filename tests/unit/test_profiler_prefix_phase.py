"""The step profiler's prefix phase (issue 31 item 3) against a fake engine with a prefix cache and a
known prefill cost: each pair's third request (a prompt extending one sent before) becomes a prefill
sample of its computed tokens with prefill_context = computed x hit tokens, its seconds the engine's
own prefill time; the fit recovers the fake's per (computed x cached) token cost."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from aiohttp import web

from runners.app.profiler import PREFIX_SIGNAL, PromptTokens, StepGrid, fit_step_model, measure_steps
from runners.engines.openai_client import Endpoint
from runners.workload.synthetic import made_up_vocabulary
from tests.fakes.threaded_server import ThreadedServer

BLOCK = 16  # words per KV block
FIXED_S, PER_TOKEN_S, PER_PAIR_S = 0.002, 1e-5, 1e-8


class WordCounter:
    """A prompt's tokens are its words, as the fake engine counts them."""

    name = "words"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(text.split()) for text in texts]


@dataclass
class PrefixCacheServer(ThreadedServer):
    """OpenAI completions (one text chunk, then usage) and a /metrics page with vLLM's prefill-time
    histogram sums and prefix-cache counters. Full blocks of BLOCK words are cached; a request finds
    its leading cached blocks (at most (words - 1) // BLOCK) and its prefill "takes" FIXED_S +
    PER_TOKEN_S x computed + PER_PAIR_S x computed x hits (reported, not slept)."""

    port: int = 0

    def __post_init__(self) -> None:
        self._init_thread()
        self.cached: set[tuple[str, ...]] = set()
        self.counters = {"prefill_sum": 0.0, "prefill_count": 0, "hits": 0, "queries": 0}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/metrics", self._metrics)

    async def _metrics(self, request: web.Request) -> web.Response:
        c = self.counters
        label = '{model_name="fake"}'
        text = (
            f"vllm:request_prefill_time_seconds_sum{label} {c['prefill_sum']}\n"
            f"vllm:request_prefill_time_seconds_count{label} {c['prefill_count']}\n"
            f"vllm:request_queue_time_seconds_sum{label} 0.0\n"
            f"vllm:prefix_cache_hits_total{label} {c['hits']}\n"
            f"vllm:prefix_cache_queries_total{label} {c['queries']}\n"
        )
        return web.Response(text=text)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        words = tuple(str((await request.json())["prompt"]).split())
        blocks = 0
        while blocks < (len(words) - 1) // BLOCK and words[: (blocks + 1) * BLOCK] in self.cached:
            blocks += 1
        hits = blocks * BLOCK
        computed = len(words) - hits
        self.cached.update(words[: (i + 1) * BLOCK] for i in range(len(words) // BLOCK))
        c = self.counters
        c["prefill_sum"] += FIXED_S + PER_TOKEN_S * computed + PER_PAIR_S * computed * hits
        c["prefill_count"] += 1
        c["hits"] += hits
        c["queries"] += len(words)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk = {"object": "text_completion", "choices": [{"index": 0, "text": "x", "finish_reason": None}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"prompt_tokens": len(words), "completion_tokens": 1, "total_tokens": len(words) + 1}
        await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response


def test_the_prefix_phase_measures_prefills_after_a_cached_prefix():
    server = PrefixCacheServer().start()
    try:
        rng = np.random.default_rng(3)
        tokens = PromptTokens(WordCounter(), rng, made_up_vocabulary(400, rng))
        grid = StepGrid(
            prefix_cached_tokens=[64, 256, 1000], prefix_new_tokens=[16, 100], prefix_repeats=1, warmup_requests=0
        )
        endpoint = Endpoint(server.url, "fake", accepts_min_tokens=False)
        samples = asyncio.run(measure_steps(endpoint, grid, 2048, phases=("prefix",), tokens=tokens))
    finally:
        server.stop()
    cached = [s for s in samples if s.signal == PREFIX_SIGNAL]
    # 6 pairs; 1000 words hold 62 full blocks: 992 cached, the rest computed with the new words
    assert sorted((s.prefill_tokens, s.prefill_context // s.prefill_tokens) for s in cached) == [
        (16, 64),
        (16, 256),
        (24, 992),
        (100, 64),
        (100, 256),
        (108, 992),
    ]
    for s in cached:
        hits = s.prefill_context // s.prefill_tokens
        assert s.kind == "prefill" and s.prefill_requests == 1
        assert s.seconds == pytest.approx(FIXED_S + PER_TOKEN_S * s.prefill_tokens + PER_PAIR_S * s.prefill_context)
        assert hits % BLOCK == 0
    # beside each: the fresh prompts of the pair (the new part's size and the cached part's), no context
    fresh = [s for s in samples if s.kind == "prefill" and not s.prefill_context]
    assert sorted(s.prefill_tokens for s in fresh) == [16, 16, 16, 64, 64, 100, 100, 100, 256, 256, 1000, 1000]
    assert all(s.seconds == pytest.approx(FIXED_S + PER_TOKEN_S * s.prefill_tokens) for s in fresh)
    assert sum(s.kind == "overhead" for s in samples) == 12  # the front end's share of each fresh prompt
    # the fit separates the context cost from the per-token cost (prefill steps only: the other
    # columns stay 0, and the constant is split over the columns that are 1 on every row)
    fitted = fit_step_model([s for s in samples if s.kind == "prefill"]).model
    assert fitted.per_prefill_context_token_s == pytest.approx(PER_PAIR_S, rel=1e-4)
    assert fitted.per_prefill_token_s == pytest.approx(PER_TOKEN_S, rel=1e-4)
    assert fitted.fixed_s + fitted.idle_start_s + fitted.per_request_cpu_s == pytest.approx(FIXED_S, rel=1e-4)
