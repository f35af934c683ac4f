"""The client under a busy CPU (issue 28): what keeps the measuring process's timestamps on its
bytes and its event loop free of long pauses, checked against a real aiohttp server on loopback.

- A reply's events are read as the pieces that arrived: every event of one piece carries the
  time that piece was read (one ``clock()`` per piece), and a burst costs one wake-up, not one
  per line.
- While a run is measured, the objects that existed before it are hidden from the cyclic
  garbage collector (``gc.freeze``), so a full collection walks only the run's own objects;
  they are handed back when the run ends.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from runners.drivers.wall_clock import WallClockDriver
from runners.engines.openai_client import Endpoint, stream_request
from runners.engines.real_config import ClientOptions
from runners.engines.real_engine import RealEngine, RealInstance
from runners.engines.sse import MAX_LINE_BYTES, LineTooLong, SSEParser
from runners.registry import make_policy
from runners.store.recording import RunRecorder
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO
from tests.fakes.threaded_server import ThreadedServer

TOKENS = 64


@dataclass
class BurstServer(ThreadedServer):
    """``POST /v1/completions``: the whole stream (``max_tokens`` token chunks, usage, ``[DONE]``)
    in one write, as a client finds it after the process was descheduled while a reply arrived."""

    port: int = 0
    shutdown_timeout_s: float = 1.0
    posts: list[dict] = field(default_factory=list)
    endless_line: bool = False  # send one line of 200 kB with no end instead

    def __post_init__(self) -> None:
        self._init_thread()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.posts.append(body)
        tokens = int(body["max_tokens"])
        events = [{"choices": [{"index": 0, "text": f" t{i}"}]} for i in range(tokens)]
        events.append({"choices": [], "usage": {"completion_tokens": tokens, "prompt_tokens": 4}})
        payload = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        if self.endless_line:
            payload = b'data: {"choices": [{"index": 0, "text": "' + b"x" * 200_000
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(payload)
        await response.write_eof()
        return response

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text="vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/metrics", self.metrics)


def test_the_events_of_one_piece_share_the_time_it_was_read():
    server = BurstServer().start()
    ticks = itertools.count(1)

    async def ask():
        async with aiohttp.ClientSession() as session:
            return await stream_request(
                session, Endpoint(server.url, "m"), "hello", TOKENS, clock=lambda: float(next(ticks))
            )

    try:
        result = asyncio.run(ask())
    finally:
        server.stop()
    assert result.error is None
    assert len(result.chunk_times) == TOKENS and result.output_tokens == TOKENS
    # one write of 64 events (~3.7 kB) arrives as one piece on loopback: one clock reading for
    # all of them (read line by line, each event had its own: 64 distinct times, 130 readings)
    assert len(set(result.chunk_times)) <= 2, sorted(set(result.chunk_times))
    assert next(ticks) <= 6  # sent_at, the piece(s), the end of the stream


def test_a_measured_run_hides_older_objects_from_the_collector(tmp_path):
    server = BurstServer().start()
    engine = RealEngine(config=None, log_folder=tmp_path)
    engine.instances.append(RealInstance(index=0, endpoint=Endpoint(server.url, "m")))
    slo = TaskSLO(e2e_s=60.0)
    requests = [Request(f"r{i}", "chat", "hello", 4, 8, 0.01 * i, slo) for i in range(5)]
    policy = make_policy("fcfs")
    seen: dict[str, int] = {}
    start = policy.start

    def start_and_look(infos, now):
        seen["frozen_at_start"] = gc.get_freeze_count()
        return start(infos, now)

    policy.start = start_and_look
    recorder = RunRecorder(requests)
    driver = WallClockDriver(
        engine=engine,
        policy=policy,
        requests=requests,
        recorder=recorder,
        options=ClientOptions(warmup_concurrency=[]),
        sample_interval_s=0.05,
    )
    frozen_before = gc.get_freeze_count()
    try:
        driver.run()
    finally:
        server.stop()
    assert recorder.all_done and [r.output_tokens for r in recorder.records.values()] == [8] * 5
    # every object alive before the clock started (this test's modules: tens of thousands) is
    # out of the collector's reach while the run is measured ...
    assert seen["frozen_at_start"] > frozen_before + 10_000
    # ... and back in it once the run is over
    assert gc.get_freeze_count() == frozen_before


def test_a_line_past_the_limit_fails_the_request_not_the_memory():
    parser = SSEParser()
    parser.feed(b"data: " + b"x" * (MAX_LINE_BYTES - 10))  # just under: kept, waiting for its end
    with pytest.raises(LineTooLong):
        parser.feed(b"x" * 20)
    server = BurstServer(endless_line=True).start()

    async def ask():
        async with aiohttp.ClientSession() as session:
            return await stream_request(session, Endpoint(server.url, "m"), "hello", 4)

    try:
        result = asyncio.run(ask())
    finally:
        server.stop()
    assert result.error == f"client error after 0 chunks: LineTooLong: a stream line longer than {MAX_LINE_BYTES} bytes"
