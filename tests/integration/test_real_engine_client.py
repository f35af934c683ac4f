"""The real-engine path without a GPU: streaming client, telemetry parsing, attach, and whole
wall-clock runs against a test server speaking LMDeploy's exact wire format."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from runners.drivers.wall_clock import _InstanceTelemetry
from runners.engines.adapters.vllm import VLLMAdapter
from runners.engines.openai_client import Endpoint, build_payload, stream_request
from runners.engines.real_engine import detect_kind
from runners.engines.telemetry import mean_between, parse_metrics
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from tests.fakes.lmdeploy_server import FakeLMDeploy


@pytest.fixture(scope="module")
def lmdeploy():
    server = FakeLMDeploy().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def lmdeploy_separate_usage():
    server = FakeLMDeploy(usage_style="separate").start()
    yield server
    server.stop()


def stream(endpoint: Endpoint, prompt: str, max_tokens: int, timeout_s: float = 10.0):
    async def go():
        async with aiohttp.ClientSession() as session:
            return await stream_request(session, endpoint, prompt, max_tokens, timeout_s=timeout_s)

    return asyncio.run(go())


def endpoint_for(server: FakeLMDeploy) -> Endpoint:
    return Endpoint(server.url, server.model_name, "completions", "lmdeploy", accepts_min_tokens=False)


# -- payloads ------------------------------------------------------------------------------------
def test_payload_asks_for_exactly_the_target():
    vllm = Endpoint("http://x", "m", accepts_min_tokens=True, accepts_priority=True)
    payload = build_payload(vllm, "hi", 37, priority=3, send_min_tokens=True)
    assert payload["max_tokens"] == 37 and payload["min_tokens"] == 37 and payload["ignore_eos"] is True
    assert payload["stream"] is True and payload["stream_options"] == {"include_usage": True}
    assert payload["priority"] == 3 and payload["prompt"] == "hi"
    lmdeploy = Endpoint("http://x", "m", api="chat", accepts_min_tokens=False)
    payload = build_payload(lmdeploy, "hi", 5, priority=3, send_min_tokens=True)
    assert "min_tokens" not in payload and "priority" not in payload
    assert payload["messages"] == [{"role": "user", "content": "hi"}]


def test_engine_args_travel_as_vllm_xargs_only_where_accepted():
    args = {"schedlab_predicted_output_tokens": 120, "schedlab_ttft_slo_s": 2.5}
    vllm = VLLMAdapter.endpoint("http://x", "m", "completions")
    assert vllm.accepts_engine_args
    assert build_payload(vllm, "hi", 7, None, True, args)["vllm_xargs"] == args
    assert "vllm_xargs" not in build_payload(vllm, "hi", 7, None, True)  # none given: none sent
    lmdeploy = Endpoint("http://x", "m", accepts_min_tokens=False)
    assert "vllm_xargs" not in build_payload(lmdeploy, "hi", 7, None, True, args)


# -- streaming -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fixture", ["lmdeploy", "lmdeploy_separate_usage"])
def test_stream_counts_tokens_from_usage_in_both_lmdeploy_styles(fixture, request):
    server = request.getfixturevalue(fixture)
    result = stream(endpoint_for(server), "hello " * 20, 12)
    assert result.error is None and result.http_status == 200
    assert result.completion_tokens == 12 and len(result.chunk_times) == 12
    assert result.chunk_times == sorted(result.chunk_times) and result.chunk_times[0] > result.sent_at
    assert result.text.startswith("t0 t1 ")
    sent = server.requests_seen[-1]
    assert sent["max_tokens"] == 12 and sent["ignore_eos"] is True and "min_tokens" not in sent


def test_chat_completions_stream(lmdeploy):
    endpoint = Endpoint(lmdeploy.url, lmdeploy.model_name, "chat", "lmdeploy", accepts_min_tokens=False)
    result = stream(endpoint, "hello there", 7)
    assert result.error is None and result.completion_tokens == 7 and len(result.chunk_times) == 7
    assert lmdeploy.requests_seen[-1]["messages"] == [{"role": "user", "content": "hello there"}]


def test_http_error_dropped_stream_timeout_and_dead_engine(lmdeploy):
    endpoint = endpoint_for(lmdeploy)
    assert stream(endpoint, "FAIL500", 4).error == "HTTP 500: internal error (injected)"
    dropped = stream(endpoint, "DROPME", 10)
    assert dropped.error is not None and "dropped after 2 chunks" in dropped.error
    slow = stream(endpoint, "SLOWME", 10, timeout_s=0.5)
    assert slow.error.startswith("timeout after 0.5 s")
    wrong_model = stream(Endpoint(lmdeploy.url, "nope"), "hi", 2)
    assert wrong_model.error == "HTTP 404: The model 'nope' does not exist."
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    dead = stream(Endpoint(f"http://127.0.0.1:{closed_port}", "m"), "hi", 2)
    assert dead.error.startswith("connection refused")


# -- telemetry -----------------------------------------------------------------------------------
def vllm_v1_metrics_text(
    running=3,
    waiting=2,
    usage=0.42,
    preemptions=7,
    itl=(0.02, 0.03, 0.04),
    itl_name="vllm:inter_token_latency_seconds",
    prefix=(1000, 250),
) -> str:
    """Exposition text with vLLM V1's names, types and labels (vllm/v1/metrics/loggers.py); ``itl``:
    the inter-token latencies observed (seconds), under ``itl_name``."""
    registry = CollectorRegistry()
    labels = {"model_name": "tiny", "engine": "0"}
    Gauge("vllm:num_requests_running", "", list(labels), registry=registry).labels(**labels).set(running)
    Gauge("vllm:num_requests_waiting", "", list(labels), registry=registry).labels(**labels).set(waiting)
    Gauge("vllm:kv_cache_usage_perc", "", list(labels), registry=registry).labels(**labels).set(usage)
    Counter("vllm:num_preemptions", "", list(labels), registry=registry).labels(**labels).inc(preemptions)
    if prefix is not None:  # the prefix cache's counters (tokens looked up, found)
        Counter("vllm:prefix_cache_queries", "", list(labels), registry=registry).labels(**labels).inc(prefix[0])
        Counter("vllm:prefix_cache_hits", "", list(labels), registry=registry).labels(**labels).inc(prefix[1])
    ttft = Histogram("vllm:time_to_first_token_seconds", "", list(labels), registry=registry)
    for value in (0.1, 0.3):
        ttft.labels(**labels).observe(value)
    if itl_name is not None:
        histogram = Histogram(itl_name, "", list(labels), registry=registry)
        for value in itl:
            histogram.labels(**labels).observe(value)
    info_labels = {"block_size": "128", "num_gpu_blocks": "40", "cache_dtype": "auto", "engine": "0"}
    Gauge("vllm:cache_config_info", "", list(info_labels), registry=registry).labels(**info_labels).set(1)
    return generate_latest(registry).decode()


def test_parse_vllm_v1_metrics():
    snapshot = parse_metrics(vllm_v1_metrics_text())
    assert snapshot.kind == "vllm"
    assert (snapshot.running, snapshot.waiting, snapshot.kv_usage, snapshot.preemptions) == (3, 2, 0.42, 7)
    assert snapshot.ttft_count == 2 and snapshot.ttft_sum_s == pytest.approx(0.4)
    assert snapshot.kv_capacity_tokens == 40 * 128 and snapshot.block_size == 128
    assert snapshot.itl_count == 3 and snapshot.itl_sum_s == pytest.approx(0.09)
    assert (snapshot.prefix_queries, snapshot.prefix_hits) == (1000, 250)
    assert parse_metrics(vllm_v1_metrics_text(prefix=None)).prefix_queries is None


def test_inter_token_latency_between_scrapes():
    # two scrapes: 3 tokens at 20, 30, 40 ms, then 2 more at 60 and 100 ms: the interval's mean is 80 ms
    first = parse_metrics(vllm_v1_metrics_text(itl=(0.02, 0.03, 0.04)))
    second = parse_metrics(vllm_v1_metrics_text(itl=(0.02, 0.03, 0.04, 0.06, 0.10)))
    assert (second.itl_count, second.itl_sum_s) == (5, pytest.approx(0.25))
    assert mean_between(first.itl_sum_s, first.itl_count, second.itl_sum_s, second.itl_count) == pytest.approx(0.08)
    assert mean_between(second.itl_sum_s, second.itl_count, second.itl_sum_s, second.itl_count) is None  # no token
    assert mean_between(second.itl_sum_s, second.itl_count, first.itl_sum_s, first.itl_count) is None  # restarted
    assert mean_between(None, None, second.itl_sum_s, second.itl_count) is None
    # older vLLM: the same histogram as vllm:time_per_output_token_seconds; none at all: absent
    old = parse_metrics(vllm_v1_metrics_text(itl=(0.05, 0.07), itl_name="vllm:time_per_output_token_seconds"))
    assert old.itl_count == 2 and old.itl_sum_s == pytest.approx(0.12)
    missing = parse_metrics(vllm_v1_metrics_text(itl_name=None))
    assert (missing.itl_sum_s, missing.itl_count) == (None, None)
    # the wall-clock driver's per-instance state: baseline, then one interval; a failed scrape or a
    # page without the histogram gives None and keeps the last values for the next interval
    state = _InstanceTelemetry()
    assert state.decode_step_s(first) is None  # the baseline: nothing to compare with yet
    assert state.decode_step_s(None) is None and state.decode_step_s(missing) is None
    assert state.decode_step_s(second) == pytest.approx(0.08)
    assert state.decode_step_s(second) is None  # no token since


def test_parse_older_vllm_and_lmdeploy_names(lmdeploy):
    old = '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'
    assert parse_metrics(old).kv_usage == 0.25 and parse_metrics(old).kind == "vllm"
    import urllib.request

    text = urllib.request.urlopen(lmdeploy.url + "/metrics").read().decode()
    snapshot = parse_metrics(text)
    assert snapshot.kind == "lmdeploy" and snapshot.running is not None and snapshot.kv_usage is not None
    assert snapshot.preemptions is None and snapshot.kv_capacity_tokens is None


def test_non_finite_or_garbled_metrics_are_absent_not_a_crash():
    page = (
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} +Inf\n'
        '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} NaN\n'
        '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} 0.5\n'
    )
    snapshot = parse_metrics(page)
    assert (snapshot.running, snapshot.waiting, snapshot.kv_usage) == (None, None, 0.5)
    with pytest.raises(ValueError):
        parse_metrics('vllm:num_requests_running{a="b" 3\n')


def test_detect_kind_from_metrics_or_models(lmdeploy):
    assert detect_kind(lmdeploy.url, {}) == ("lmdeploy", lmdeploy.model_name)


# -- whole runs through the wall-clock driver -------------------------------------------------------
def attach_config(server: FakeLMDeploy, run_id: str, scheduler: dict, requests: int = 40, **engine) -> dict:
    return {
        "run_id": run_id,
        "engine": {"kind": "openai", "urls": server.url, **engine},
        "workload": {"requests": requests, "arrival": {"process": "poisson", "rate": 40}},
        "scheduler": scheduler,
        "sample_interval_s": 0.05,
    }


def test_warmup_is_sent_but_not_recorded(lmdeploy, results_dir):
    before = len(lmdeploy.requests_seen)
    data = attach_config(lmdeploy, "warm", {"name": "fcfs"}, requests=5, warmup_concurrency=[1, 2])
    assert execute_run(parse_config(data), results_dir).status == "done"
    sent = lmdeploy.requests_seen[before:]
    assert len(sent) == 3 + 5 and [body["max_tokens"] for body in sent[:3]] == [16, 16, 16]
    assert len(load_run(results_dir, "warm").requests) == 5


def test_fcfs_and_static_runs_against_lmdeploy_format(lmdeploy, results_dir):
    for name, scheduler in [("fcfs", {"name": "fcfs"}), ("static", {"name": "static", "params": {"batch_size": 4}})]:
        data = attach_config(lmdeploy, name, scheduler)
        data["workload"]["filters"] = {"max_total_tokens": 300}
        outcome = execute_run(parse_config(data), results_dir)
        assert outcome.status == "done", outcome.error
        run = load_run(results_dir, name)
        requests = run.requests
        assert len(requests) == 40 and requests["error"].isna().all()
        assert (requests["output_tokens"] == requests["target_output_tokens"]).all()
        assert (requests["ttft_s"] <= requests["e2e_s"]).all() and (requests["tpot_s"] > 0).all()
        assert (requests["ttft_s"] >= requests["queue_s"]).all()
        ts = run.timeseries
        assert len(ts) > 3 and ts["kv_usage"].dropna().between(0, 1).all()
        assert ts["running"].max() >= 1
        engine = (run.folder / "engine.json").read_text()
        assert '"kind": "lmdeploy"' in engine
    static = load_run(results_dir, "static").requests
    assert static["queue_s"].max() > 0.05  # static batching holds requests at the gateway
    assert load_run(results_dir, "static").timeseries["in_flight"].max() <= 4


def test_failures_are_recorded_and_the_stop_rule_applies(lmdeploy, results_dir, tmp_path):
    import json as jsonlib

    entries = [
        {
            "conversations": [
                {"from": "human", "value": ("FAIL500 " if i % 4 == 0 else "") + "word " * 20},
                {"from": "gpt", "value": "x " * 20},
            ]
        }
        for i in range(20)
    ]
    path = tmp_path / "mixed.json"
    path.write_text(jsonlib.dumps(entries))
    data = attach_config(lmdeploy, "keepgoing", {"name": "fcfs"}, requests=20)
    data["workload"].update(ratio={"chat": 1, "code": 0}, chat={"kind": "file", "path": str(path)})
    outcome = execute_run(parse_config(data), results_dir)
    requests = load_run(results_dir, "keepgoing").requests
    failed = requests[requests["error"].notna()]
    assert outcome.status == "done" and len(failed) > 0
    assert failed["error"].str.startswith("HTTP 500").all()
    assert outcome.summary.failed == len(failed) and outcome.summary.completed == 20 - len(failed)
    data.update(run_id="stopper")
    data["engine"]["on_failure"] = "stop"
    outcome = execute_run(parse_config(data), results_dir)
    assert outcome.status == "failed" and "engine.on_failure is 'stop'" in outcome.error
    assert len(load_run(results_dir, "stopper").requests) == 20  # nothing lost: every request has a row


def test_api_key_is_sent_but_never_saved(lmdeploy, results_dir, monkeypatch):
    monkeypatch.setenv("SCHEDLAB_TEST_KEY", "sk-very-secret")
    data = attach_config(lmdeploy, "keyed", {"name": "fcfs"}, requests=4, api_key_env="SCHEDLAB_TEST_KEY")
    assert execute_run(parse_config(data), results_dir).status == "done"
    for path in (results_dir / "keyed").iterdir():
        assert b"sk-very-secret" not in path.read_bytes(), path.name


def test_two_attached_instances_share_the_load(results_dir):
    first, second = FakeLMDeploy().start(), FakeLMDeploy().start()
    try:
        data = attach_config(first, "two", {"name": "fcfs"}, requests=30)
        data["engine"]["urls"] = f"{first.url},{second.url}"
        assert execute_run(parse_config(data), results_dir).status == "done"
        run = load_run(results_dir, "two")
        assert set(run.requests["instance"]) == {0, 1}
        assert set(run.timeseries["instance"]) == {0, 1}
        assert len(first.requests_seen) > 0 and len(second.requests_seen) > 0
    finally:
        first.stop()
        second.stop()


def test_slices_continue_with_their_output_so_far(lmdeploy, results_dir, monkeypatch):
    from runners import registry
    from runners.schedulers.base import Decision
    from runners.schedulers.fcfs import FCFSPolicy

    class FiveTokenSlices(FCFSPolicy):
        name = "five-token-slices"

        def decide(self, now):
            return Decision([self._take(rid, 0, max_tokens=5) for rid in list(self.pending)])

    monkeypatch.setitem(registry.SCHEDULERS, "five-token-slices", FiveTokenSlices)
    data = attach_config(lmdeploy, "sliced", {"name": "five-token-slices"}, requests=6, warmup_concurrency=[])
    data["workload"]["filters"] = {"max_total_tokens": 200}
    before = len(lmdeploy.requests_seen)
    assert execute_run(parse_config(data), results_dir).status == "done"
    requests = load_run(results_dir, "sliced").requests
    assert (requests["output_tokens"] == requests["target_output_tokens"]).all()
    assert (requests["slices"] == -(-requests["target_output_tokens"] // 5)).all()
    sent = lmdeploy.requests_seen[before:]
    assert all(body["max_tokens"] <= 5 for body in sent)
    continued = [body["prompt"] for body in sent if body["prompt"].endswith("t4 ")]
    assert continued, "a later slice re-sends the prompt with the output so far appended"
