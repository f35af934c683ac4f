"""Telemetry and client halves of issue 29 (items 2, 6 and the attach halves of 1 and 3), against
the fakes that follow the engines' source (tests/fakes/lmdeploy_server.py, sglang_server.py):

- LMDeploy's waiting count is its engine queue plus the requests waiting in the API layer for a
  request handle (``lmdeploy:num_api_requests_waiting``, v0.13+), which the engine's gauge never counts;
- LMDeploy ends each stream with a chunk of empty text carrying the finish reason, and reports an
  error inside the stream as ``{"error": {...}}`` then ``[DONE]``: only chunks of text are token events;
- an attached SGLang whose ``/server_info`` says ``decode_log_interval`` > 1 and an attached
  LMDeploy whose ``/metrics`` is 404 (v0.10.x without ``--enable-metrics``) get a one-line warning.
"""

from __future__ import annotations

import asyncio
import json
import warnings

import aiohttp
import pytest

from runners.engines.openai_client import Endpoint, stream_request
from runners.engines.real_config import AttachConfig
from runners.engines.real_engine import EngineWarning, RealEngine
from runners.engines.telemetry import parse_metrics, read_metrics_page
from tests.fakes.lmdeploy_server import FakeLMDeploy
from tests.fakes.sglang_server import FakeSGLang


def endpoint_for(server: FakeLMDeploy) -> Endpoint:
    return Endpoint(server.url, server.model_name, "completions", "lmdeploy", accepts_min_tokens=False)


def overloaded_snapshot(server: FakeLMDeploy, requests: int):
    """The fake's metrics read while ``requests`` 40-token requests are in flight at once."""

    async def go():
        async with aiohttp.ClientSession() as session:
            endpoint = endpoint_for(server)
            sent = [asyncio.create_task(stream_request(session, endpoint, "hello " * 8, 40)) for _ in range(requests)]
            await asyncio.sleep(0.3)  # all have arrived; the first max_batch run for 40 x 20 ms
            page = await read_metrics_page(session, server.url + "/metrics")
            results = await asyncio.gather(*sent)
        assert all(result.error is None for result in results)
        assert page is not None
        return parse_metrics(page)

    return asyncio.run(go())


# -- item 2: LMDeploy's waiting includes the API layer's queue ----------------------------------
def test_lmdeploy_waiting_counts_the_requests_queued_for_a_request_handle():
    server = FakeLMDeploy(max_batch=2, token_delay_s=0.02).start()
    try:
        snapshot = overloaded_snapshot(server, 6)
    finally:
        server.stop()
    assert snapshot.kind == "lmdeploy"
    assert snapshot.running == 2
    assert snapshot.waiting == 4  # all in num_api_requests_waiting; num_requests_waiting says 0


def test_lmdeploy_waiting_sums_the_engine_and_api_gauges_and_reads_older_pages():
    labels = '{engine="0",model_name="m"}'
    page = (
        f"# TYPE lmdeploy:num_requests_waiting gauge\nlmdeploy:num_requests_waiting{labels} 3.0\n"
        f"# TYPE lmdeploy:num_api_requests_waiting gauge\nlmdeploy:num_api_requests_waiting{labels} 5.0\n"
        f"# TYPE lmdeploy:num_requests_running gauge\nlmdeploy:num_requests_running{labels} 8.0\n"
    )
    assert parse_metrics(page).waiting == 8
    older = page.split("# TYPE lmdeploy:num_api")[0]  # before v0.13: no API-layer gauge
    assert parse_metrics(older).waiting == 3
    only_api = f"# TYPE lmdeploy:num_api_requests_waiting gauge\nlmdeploy:num_api_requests_waiting{labels} 5.0\n"
    assert parse_metrics(only_api).waiting == 5


def test_before_v0_13_the_api_queue_is_invisible():
    server = FakeLMDeploy(max_batch=2, token_delay_s=0.02, api_waiting_metric=False).start()
    try:
        snapshot = overloaded_snapshot(server, 5)
    finally:
        server.stop()
    assert (snapshot.running, snapshot.waiting) == (2, 0)  # what LMDeploy v0.10-v0.12 export


# -- item 6: the finish chunk and in-stream errors ------------------------------------------------
def raw_events(server: FakeLMDeploy, prompt: str, max_tokens: int) -> list[str]:
    async def go():
        body = {"model": server.model_name, "prompt": prompt, "max_tokens": max_tokens, "stream": True}
        body["stream_options"] = {"include_usage": True}
        async with aiohttp.ClientSession() as session:
            async with session.post(server.url + "/v1/completions", json=body) as response:
                text = await response.text()
        return [line[len("data: ") :] for line in text.split("\n\n") if line]

    return asyncio.run(go())


@pytest.mark.parametrize("usage_style", ["final", "separate"])
def test_lmdeploy_finish_chunk_is_not_a_token(usage_style):
    server = FakeLMDeploy(usage_style=usage_style).start()
    try:
        events = raw_events(server, "hello " * 10, 5)
        result = asyncio.run(_stream(endpoint_for(server), "hello " * 10, 5))
    finally:
        server.stop()
    finish = json.loads(events[5])
    assert finish["choices"][0]["text"] == "" and finish["choices"][0]["finish_reason"] == "length"
    if usage_style == "separate":  # endpoints/completions.py at 0.16.0: exclude_none, usage on its own
        assert finish == {
            "id": finish["id"],
            "object": "text_completion",
            "created": finish["created"],
            "model": server.model_name,
            "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
            "usage": None,
        }
        assert json.loads(events[6])["choices"] == [] and events[7] == "[DONE]"
    else:
        assert finish["usage"]["completion_tokens"] == 5 and events[6] == "[DONE]"
    assert result.error is None
    assert result.completion_tokens == 5 and len(result.chunk_times) == 5  # not 6
    assert result.text == "t0 t1 t2 t3 t4 "


def test_an_in_stream_error_fails_the_request_with_lmdeploys_message():
    server = FakeLMDeploy().start()
    try:
        events = raw_events(server, "STREAMERR " * 4, 8)
        result = asyncio.run(_stream(endpoint_for(server), "STREAMERR " * 4, 8))
    finally:
        server.stop()
    assert json.loads(events[2])["error"]["message"] == "injected engine error" and events[3] == "[DONE]"
    assert result.error == "engine error: injected engine error"
    assert len(result.chunk_times) == 2 and result.text == "t0 t1 "


async def _stream(endpoint: Endpoint, prompt: str, max_tokens: int):
    async with aiohttp.ClientSession() as session:
        return await stream_request(session, endpoint, prompt, max_tokens, timeout_s=10.0)


# -- items 1 and 3, attach halves: warnings on the run --------------------------------------------
def attach_warnings(url: str, tmp_path) -> tuple[list[str], list[str]]:
    engine = RealEngine(config=AttachConfig(urls=[url]), log_folder=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine.start()
    return engine.warnings, [str(w.message) for w in caught if issubclass(w.category, EngineWarning)]


def test_an_attached_sglang_with_lagging_gauges_is_warned_about(tmp_path):
    server = FakeSGLang(decode_log_interval=40).start()
    try:
        found, shown = attach_warnings(server.url, tmp_path)
    finally:
        server.stop()
    assert found == shown and len(found) == 1
    assert found[0].startswith(f"{server.url}: sglang server publishes its gauges every 40 decode steps")
    assert "--decode-log-interval 1" in found[0]


def test_an_sglang_logging_every_step_gets_no_warning(tmp_path):
    server = FakeSGLang(decode_log_interval=1).start()
    try:
        assert attach_warnings(server.url, tmp_path) == ([], [])
    finally:
        server.stop()


def test_an_attached_lmdeploy_without_metrics_names_enable_metrics(tmp_path):
    quiet = FakeLMDeploy(metrics_enabled=False).start()
    try:
        found, shown = attach_warnings(quiet.url, tmp_path)
    finally:
        quiet.stop()
    assert found == shown and len(found) == 1 and "\n" not in found[0]
    assert found[0].startswith(f"{quiet.url}: lmdeploy server has no /metrics (HTTP 404)")
    assert "--enable-metrics" in found[0]
    loud = FakeLMDeploy().start()
    try:
        assert attach_warnings(loud.url, tmp_path) == ([], [])
    finally:
        loud.stop()
