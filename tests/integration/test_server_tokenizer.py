"""Counting tokens with the server's own tokenizer and sizing every request for its context
(issue 12, section 1), against a test server that speaks vLLM's wire format for ``/tokenize``,
``/v1/models`` and streamed ``/v1/completions``.

The formats are vLLM 0.32's (vllm/entrypoints/serve/tokenize/protocol.py: TokenizeCompletionRequest
``{"model", "prompt", "add_special_tokens": true}``, TokenizeChatRequest ``{"model", "messages",
"add_generation_prompt": true, "add_special_tokens": false}``, TokenizeResponse ``{"count",
"max_model_len", "tokens", "token_strs"}``; vllm/entrypoints/serve/engine/protocol.py: ModelCard
``{"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"}``;
the two refusals of vllm/renderers/params.py and vllm/sampling_params.py quoted in issue 12).
The fake's tokenizer: one token per 2 characters (rounded up), a BOS token when special tokens
are added, and a chat template of 3 tokens around the user's text.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from runners.engines.adapters.vllm import VLLMAdapter, VLLMConfig
from runners.engines.real_config import AttachConfig
from runners.engines.real_engine import context_from_model_folder, resolve_tokenization
from runners.engines.server_tokens import _SERVER_COUNTERS, ServerTokenCounter, TokenizerUnavailable
from runners.run.benchmark import execute_run, prepare_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from runners.workload.builder import OVER_CONTEXT, ContextLengthFilter
from runners.workload.conversations import LengthFilter
from tests.fakes.threaded_server import ThreadedServer

CHAT_TEMPLATE_TOKENS = 3


def fake_count(text: str) -> int:
    """The fake server's tokenizer: one token per 2 characters, rounded up."""
    return math.ceil(len(text) / 2)


@dataclass
class FakeVLLMTokenizer(ThreadedServer):
    """vLLM's /v1/models, /tokenize, /metrics, /version and streamed /v1/completions."""

    model_name: str = "tiny"
    max_model_len: int | None = 2048
    root: str | None = "/models/not-here/tiny"
    has_tokenize: bool = True
    port: int = 0
    tokenize_bodies: list[dict] = field(default_factory=list)
    completions: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._init_thread()

    def _error(self, status: int, message: str) -> web.Response:
        # vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}
        return web.json_response(
            {"error": {"message": message, "type": "BadRequestError", "param": None, "code": status}}, status=status
        )

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": self.root,
            "parent": None,
            "max_model_len": self.max_model_len,
            "permission": [
                {
                    "id": "modelperm-1",
                    "object": "model_permission",
                    "created": 0,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }
        return web.json_response({"object": "list", "data": [card]})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.tokenize_bodies.append(body)
        if "messages" in body:
            content = "".join(message["content"] for message in body["messages"])
            count = fake_count(content) + CHAT_TEMPLATE_TOKENS + (1 if body.get("add_special_tokens", False) else 0)
        else:
            count = fake_count(body["prompt"]) + (1 if body.get("add_special_tokens", True) else 0)
        return web.json_response(
            {"count": count, "max_model_len": self.max_model_len or 0, "tokens": list(range(count)), "token_strs": None}
        )

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text="# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="{self.model_name}"}} 0.0\n',
            content_type="text/plain",
        )

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0"})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def stream_completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.completions.append(body)
        prompt_tokens = fake_count(body["prompt"]) + 1  # BOS, as /v1/completions adds it
        limit = self.max_model_len or 10**9
        if prompt_tokens > limit:
            return self._error(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {prompt_tokens} input tokens, which exceeds this limit even without "
                "any output tokens. Please reduce the length of the input prompt.",
            )
        max_tokens = min(body["max_tokens"], limit - prompt_tokens)  # vLLM clamps to what is left
        if body.get("min_tokens", 0) > max_tokens:
            return self._error(
                400, f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {body['min_tokens']}."
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index in range(max_tokens):
            chunk = {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 0,
                "model": self.model_name,
                "choices": [{"index": 0, "text": "ab", "logprobs": None, "finish_reason": None, "stop_reason": None}],
                "usage": None,
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if index % 16 == 15:
                await asyncio.sleep(0)
        usage = {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": self.model_name,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + max_tokens,
                "completion_tokens": max_tokens,
            },
        }
        await response.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/models", self.models)
        if self.has_tokenize:
            app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/version", self.version)
        app.router.add_get("/health", self.health)
        app.router.add_post("/v1/completions", self.stream_completions)


@pytest.fixture
def server():
    _SERVER_COUNTERS.clear()
    fake = FakeVLLMTokenizer().start()
    yield fake
    fake.stop()
    _SERVER_COUNTERS.clear()


def test_server_counter_counts_with_the_servers_tokenizer_once_per_text(server):
    counter = ServerTokenCounter(server.url, "tiny", VLLMAdapter.tokenize_api, concurrency=4)
    texts = ["hello world", "abc", "hello world", "x" * 101]
    assert counter.count(texts) == [6, 2, 6, 51]
    sent = [body["prompt"] for body in server.tokenize_bodies]
    # the duplicate is asked once; the empty text measures what the endpoint adds to every text (0 here)
    assert sorted(sent) == sorted(["", "hello world", "abc", "x" * 101]) and counter.text_offset == 0
    assert all(
        body == {"model": "tiny", "prompt": body["prompt"], "add_special_tokens": False}
        for body in server.tokenize_bodies
    )
    assert counter.count(["abc", "x" * 101, "abcd"]) == [2, 51, 2]
    assert len(server.tokenize_bodies) == 5  # only "abcd" was new
    assert counter.max_model_len == 2048
    # what the server adds to every prompt: BOS for completions, the template for chat
    assert counter.overhead_tokens("completions") == 1
    assert counter.overhead_tokens("chat") == CHAT_TEMPLATE_TOKENS
    assert server.tokenize_bodies[-1]["messages"] == [{"role": "user", "content": ""}]


def test_server_counter_many_texts_concurrently(server):
    counter = ServerTokenCounter(server.url, "tiny", VLLMAdapter.tokenize_api, concurrency=8)
    texts = [f"text number {i}" + "y" * (i % 7) for i in range(300)]
    assert counter.count(texts) == [fake_count(text) for text in texts]
    assert len(server.tokenize_bodies) == 301  # and the empty text, once


def test_a_server_without_tokenize_is_reported_not_counted():
    fake = FakeVLLMTokenizer(has_tokenize=False).start()
    try:
        with pytest.raises(TokenizerUnavailable, match=r"POST http://127\.0\.0\.1:\d+/tokenize answered HTTP 404"):
            ServerTokenCounter(fake.url, "tiny", VLLMAdapter.tokenize_api).count(["abc"])
    finally:
        fake.stop()


def test_context_filter_drops_what_does_not_fit_and_names_the_reason():
    base = LengthFilter(min_input_tokens=4, max_input_tokens=1024, min_output_tokens=4, max_total_tokens=2048)
    context = ContextLengthFilter(**base.model_dump(), context_tokens=100, prompt_overhead_tokens=1)
    assert context.rejects(50, 49) is None  # 50 + 1 + 49 = 100 fits exactly
    assert context.rejects(50, 50) == OVER_CONTEXT  # 101 does not
    assert context.rejects(2, 10) == "prompt too short"  # the dataset filters speak first
    assert context.rejects(1025, 10) == "prompt too long"


def test_attached_vllm_gives_its_tokenizer_and_limit(server):
    tokenization = resolve_tokenization(AttachConfig(urls=[server.url]), None)
    assert tokenization.record["source"] == f"server tokenizer (vllm): POST {server.url}/tokenize"
    assert tokenization.record["approximate"] is False
    assert tokenization.context.max_tokens == 2048
    assert tokenization.context.prompt_overhead_tokens == 1
    assert tokenization.context.source == f"GET {server.url}/v1/models max_model_len"
    assert tokenization.counter.count(["abcde"]) == [3]


def test_no_tokenize_and_no_readable_root_falls_back_to_the_labelled_approximation():
    _SERVER_COUNTERS.clear()
    fake = FakeVLLMTokenizer(has_tokenize=False, max_model_len=None).start()
    try:
        tokenization = resolve_tokenization(AttachConfig(urls=[fake.url]), None)
    finally:
        fake.stop()
    record = tokenization.record
    assert record["approximate"] is True and record["counter"] == "approx-4-chars-per-token"
    assert tokenization.context is None and record["context"] is None
    tried = " | ".join(record["tried"])
    assert "/tokenize answered HTTP 404" in tried
    assert "model folder /models/not-here/tiny (/v1/models root) is not readable here" in tried
    assert "no /v1/models card reports max_model_len" in tried
    assert "approximation: 4 characters per token (last resort)" in tried


def word_tokenizer(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = {"[UNK]": 0, "<s>": 1, "hello": 2, "world": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", bos_token="<s>").save_pretrained(folder)


def test_root_folder_readable_here_counts_when_there_is_no_tokenize(tmp_path):
    word_tokenizer(tmp_path / "tiny")
    _SERVER_COUNTERS.clear()
    fake = FakeVLLMTokenizer(has_tokenize=False, root=str(tmp_path / "tiny"), max_model_len=512).start()
    try:
        tokenization = resolve_tokenization(AttachConfig(urls=[fake.url]), None)
    finally:
        fake.stop()
    assert tokenization.record["source"] == f"model folder {tmp_path / 'tiny'} (/v1/models root)"
    assert tokenization.counter.count(["hello world hello"]) == [3]  # a word a token, not 17 / 4
    assert tokenization.context.max_tokens == 512


def test_launched_vllm_reads_the_limit_from_the_flag_or_the_model_config(tmp_path):
    folder = tmp_path / "model"
    word_tokenizer(folder)
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 4096, "n_positions": 1024}))
    assert context_from_model_folder(str(folder)) == (1024, f"{folder / 'config.json'} n_positions")
    derived = resolve_tokenization(VLLMConfig(model=str(folder)), None)
    assert derived.context.max_tokens == 1024 and derived.record["source"].startswith("model folder")
    assert derived.record["approximate"] is False
    flagged = resolve_tokenization(VLLMConfig(model=str(folder), max_model_len=300), None)
    assert (flagged.context.max_tokens, flagged.context.source) == (300, "launch flag --max-model-len")
    extra = resolve_tokenization(
        VLLMConfig(model=str(folder), max_model_len=300, extra_args=["--max-model-len=200"]), None
    )
    assert extra.context.max_tokens == 200


def attach(server: FakeVLLMTokenizer, run_id: str, requests: int = 40) -> dict:
    return {
        "run_id": run_id,
        "engine": {"kind": "openai", "urls": server.url, "warmup_concurrency": []},
        "workload": {"requests": requests, "arrival": {"process": "poisson", "rate": 200}, "seed": 3},
        "scheduler": {"name": "fcfs"},
        "sample_interval_s": 0.05,
    }


def test_every_request_fits_the_servers_context_and_none_fails(server, results_dir):
    """The run of issue 12 in small: a context that the approximation's counts would overflow."""
    server.max_model_len = 700
    config = parse_config(attach(server, "fits"))
    prepared = prepare_run(config)
    record = prepared.tokenization
    assert record["source"] == f"server tokenizer (vllm): POST {server.url}/tokenize" and not record["approximate"]
    assert record["context"] == {
        "max_tokens": 700,
        "prompt_overhead_tokens": 1,
        "source": f"GET {server.url}/v1/models max_model_len",
    }
    for request in prepared.workload.requests:
        assert request.input_tokens == fake_count(request.prompt)
        assert request.input_tokens + 1 + request.target_output_tokens <= 700
    dropped = sum(report["skipped"].get(OVER_CONTEXT, 0) for report in prepared.workload.reports.values())
    assert dropped > 0  # the stand-ins hold pairs longer than 700 tokens of this tokenizer

    outcome = execute_run(config, results_dir)
    assert outcome.status == "done", outcome.error
    rows = load_run(results_dir, "fits").requests
    assert len(rows) == 40 and rows["error"].isna().all()
    assert (rows["output_tokens"] == rows["target_output_tokens"]).all()
    saved = json.loads((outcome.folder / "config.json").read_text())
    assert saved["resolved"]["tokenization"]["counter"] == f"server:{server.url}/tokenize (tiny)"
    assert all(body["min_tokens"] == body["max_tokens"] for body in server.completions)


def test_the_approximation_alone_would_have_sent_requests_the_server_refuses(server):
    """Why: counted at 4 characters a token, some prompts of the same workload overflow 700."""
    from runners.workload.builder import build_workload
    from runners.workload.slo import TaskSLO

    config = parse_config(attach(server, "approx"))
    slo = TaskSLO(e2e_s=10.0)
    workload = build_workload(config.workload, {"chat": slo, "code": slo})
    too_long = [r for r in workload.requests if fake_count(r.prompt) + 1 + r.target_output_tokens > 700]
    assert too_long, "the approximation's workload should hold requests the 700-token server refuses"


def test_an_lmdeploy_server_is_counted_by_its_encode_endpoint_and_its_stated_context():
    """LMDeploy counts with POST /v1/encode; it reports no context limit, so the run says so, and
    takes the one the user states (engine.context_tokens, its --session-len)."""
    from tests.fakes.lmdeploy_server import FakeLMDeploy

    fake = FakeLMDeploy().start()
    try:
        unstated = resolve_tokenization(AttachConfig(urls=[fake.url]), None)
        stated = resolve_tokenization(AttachConfig(urls=[fake.url], context_tokens=1024), None)
        counts = unstated.counter.count(["abcdefghi", "abc"])
    finally:
        fake.stop()
    record = unstated.record
    assert record["source"] == f"server tokenizer (lmdeploy): POST {fake.url}/v1/encode"
    assert not record["approximate"] and record["context"] is None
    assert "no /v1/models card reports max_model_len; set engine.context_tokens" in " ".join(record["tried"])
    assert counts == [2, 0]  # the fake's len // 4, no BOS
    assert stated.record["context"] == {
        "max_tokens": 1024,
        "prompt_overhead_tokens": 1,
        "source": "engine.context_tokens",
    }


def test_a_server_without_a_tokenizer_is_counted_by_the_labelled_approximation(results_dir):
    """An LMDeploy without /v1/encode and no max_model_len: the run says so in config.json."""
    from tests.fakes.lmdeploy_server import FakeLMDeploy

    fake = FakeLMDeploy(has_encode=False).start()
    try:
        config = parse_config(
            {
                "run_id": "lmd",
                "engine": {"kind": "openai", "urls": fake.url},
                "workload": {"requests": 5, "arrival": {"process": "poisson", "rate": 50}},
                "scheduler": {"name": "fcfs"},
            }
        )
        record = prepare_run(config).tokenization
    finally:
        fake.stop()
    assert record["approximate"] is True and record["context"] is None
    assert record["source"] == "approximation (4 characters per token): no server or model tokenizer"
    assert any(f"POST {fake.url}/v1/encode answered HTTP 404" in line for line in record["tried"])
