"""A server's count of prompt tokens found in its prefix cache (vLLM's final usage chunk with
``--enable-prompt-tokens-details``: ``usage.prompt_tokens_details.cached_tokens``) reaches the
request's row; a malformed count is one clear error; the vLLM launch asks for it."""

from __future__ import annotations

import pytest

from runners.engines.adapters.vllm import VLLMAdapter
from runners.engines.openai_client import MalformedChunk, parse_chunk
from runners.run.config import parse_config
from runners.store.recording import RunRecorder
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO

USAGE = {"prompt_tokens": 300, "completion_tokens": 12, "prompt_tokens_details": {"cached_tokens": 256}}


def test_the_final_usage_chunk_gives_the_cached_tokens():
    text, usage = parse_chunk({"choices": [], "usage": USAGE}, "completions")
    assert text is None and usage == {"completion_tokens": 12, "prompt_tokens": 300, "cached_tokens": 256}
    _, plain = parse_chunk({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}, "completions")
    assert plain["cached_tokens"] is None  # a server that does not say: unknown, not 0
    with pytest.raises(MalformedChunk, match="prompt_tokens_details.cached_tokens is negative"):
        parse_chunk({"choices": [], "usage": {**USAGE, "prompt_tokens_details": {"cached_tokens": -1}}}, "completions")


def test_the_row_sums_the_cached_tokens_of_each_dispatch():
    recorder = RunRecorder([Request("r", "chat", "hi", 300, 20, 0.0, TaskSLO(ttft_s=1.0))])
    recorder.cached("r", None)
    assert recorder.records["r"].cached_tokens is None
    recorder.cached("r", 256)
    recorder.cached("r", 128)  # a second slice of the same request
    recorder.records["r"].first_token_s = recorder.records["r"].last_token_s = 0.5
    recorder.finish("r", 1.0)
    assert recorder.rows[0]["cached_tokens"] == 384


def test_vllm_is_launched_to_report_cached_tokens():
    engine = parse_config({"engine": {"kind": "vllm", "model": "/m"}}).engine
    assert "--enable-prompt-tokens-details" in VLLMAdapter.server_command(engine, 8000)


def test_a_lone_token_of_empty_text_is_still_a_token():
    """vLLM with one token asked whose text ends inside a multi-byte character streams one chunk:
    empty text with its finish_reason. It is the token (the step profiler's prefills ask for one);
    an empty finishing chunk after a token (LMDeploy's closing chunk) is not another."""
    from runners.engines.openai_client import StreamResult, _take_event
    from runners.engines.sse import SSEEvent

    def events(*chunks: str) -> StreamResult:
        result = StreamResult(sent_at=0.0)
        for at, data in enumerate(chunks, start=1):
            assert _take_event(result, SSEEvent(data=data, received_at=float(at)), "completions", None)
        return result

    lone = events('{"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}')
    assert lone.chunk_times == [1.0] and lone.output_tokens == 1
    closing = events(
        '{"choices": [{"index": 0, "text": "hi", "finish_reason": null}]}',
        '{"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}',
    )
    assert closing.chunk_times == [1.0] and closing.text == "hi"
