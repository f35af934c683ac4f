"""SGLang through its adapter (runners/engines/adapters/sglang.py), end to end against
tests/fakes/sglang_server.py, a server speaking SGLang 0.5.23's wire format: launch argument
list and launch path, attach-time detection, its metric names, its tokenizer and context limit,
streaming (completions and chat), priority, and its errors."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from runners.engines.adapters import ADAPTERS, detect_adapter
from runners.engines.adapters.sglang import SGLangAdapter, SGLangConfig
from runners.engines.openai_client import stream_request
from runners.engines.real_config import AttachConfig
from runners.engines.real_engine import RealEngine, detect_kind, resolve_tokenization
from runners.engines.server_tokens import ServerTokenCounter, TokenizerUnavailable
from runners.engines.telemetry import parse_metrics
from runners.errors import ConfigError
from runners.registry import ENGINES
from runners.run.benchmark import execute_run, prepare_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from runners.workload.builder import OVER_CONTEXT
from tests.fakes.sglang_server import FakeSGLang, chat_tokens, word_tokens

ROOT = Path(__file__).resolve().parents[2]
FAKE_SGLANG = [sys.executable, str(ROOT / "tests" / "fakes" / "sglang_server.py")]


@pytest.fixture()
def sglang():
    server = FakeSGLang().start()
    yield server
    server.stop()


def attach(server: FakeSGLang, run_id: str, requests: int = 30, **engine) -> dict:
    return {
        "run_id": run_id,
        "engine": {"kind": "openai", "urls": server.url, **engine},
        "workload": {"requests": requests, "arrival": {"process": "poisson", "rate": 60}, "seed": 5},
        "scheduler": {"name": "fcfs"},
        "sample_interval_s": 0.05,
    }


def test_sglang_is_an_engine_everywhere_from_its_one_module():
    assert "sglang" in ADAPTERS and ENGINES["sglang"].config is SGLangConfig
    config = parse_config({"engine": {"kind": "sglang", "model": "/models/qwen"}}).engine
    assert isinstance(config, SGLangConfig)
    with pytest.raises(ConfigError, match="engine.served_model_name"):
        parse_config({"engine": {"kind": "sglang", "model": "/m", "served_model_name": "base:lora"}})


def test_sglang_argument_list():
    # vLLM's list: test_launcher.py::test_vllm_argument_list; apart, as each engine's flags are its own
    config = SGLangConfig(
        model="/models/qwen",
        python="/envs/sglang/bin/python",
        max_running_requests=64,
        context_length=4096,
        mem_fraction_static=0.85,
        scheduling_policy="priority",
        extra_args=["--api-key", "k"],
    )
    assert SGLangAdapter.server_command(config, 30001) == [
        "/envs/sglang/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/qwen",
        "--served-model-name",
        "model",
        "--host",
        "127.0.0.1",
        "--port",
        "30001",
        "--enable-metrics",
        "--enable-cache-report",
        "--decode-log-interval",
        "1",
        "--max-running-requests",
        "64",
        "--context-length",
        "4096",
        "--mem-fraction-static",
        "0.85",
        "--schedule-policy",
        "fcfs",
        "--enable-priority-scheduling",
        "--schedule-low-priority-values-first",
        "--api-key",
        "k",
    ]
    own = SGLangConfig(model="/m", extra_args=["--decode-log-interval=10"]).server_command(1)
    assert "--decode-log-interval" not in own and own[-1] == "--decode-log-interval=10"  # the user's stands
    able = SGLangAdapter.capabilities("priority")
    assert able.min_tokens and able.priority and not SGLangAdapter.capabilities("fcfs").priority


def test_detected_from_metrics_or_models_and_its_metrics_read(sglang):
    assert detect_kind(sglang.url, {}) == ("sglang", "sglang-fake")
    text = urllib.request.urlopen(sglang.url + "/metrics").read().decode()
    snapshot = parse_metrics(text)
    assert snapshot.kind == "sglang"
    assert (snapshot.running, snapshot.waiting, snapshot.kv_usage) == (0, 0, 0.0)
    assert snapshot.kv_capacity_tokens == 20_000 and snapshot.preemptions == 0.0
    endpoint = SGLangAdapter.endpoint(sglang.url, "sglang-fake", "completions")

    async def one():
        async with aiohttp.ClientSession() as session:
            return await stream_request(session, endpoint, "a b c", 4)

    assert asyncio.run(one()).error is None
    after = parse_metrics(urllib.request.urlopen(sglang.url + "/metrics").read().decode())
    assert after.ttft_count == 1 and after.itl_count == 3  # one first token, three gaps
    assert 0 < after.itl_sum_s / after.itl_count < 1
    assert detect_adapter(None, "sglang") is SGLangAdapter
    quiet = FakeSGLang(enable_metrics=False).start()  # /metrics is 404 without --enable-metrics
    try:
        assert detect_kind(quiet.url, {}) == ("sglang", "sglang-fake")
    finally:
        quiet.stop()


def test_counts_with_sglang_tokenizer_and_reads_the_context_from_models_not_tokenize(sglang):
    sglang.context_length = 900
    tokenization = resolve_tokenization(AttachConfig(urls=[sglang.url]), None)
    record = tokenization.record
    assert record["source"] == f"server tokenizer (sglang): POST {sglang.url}/v1/tokenize"
    assert not record["approximate"]
    # /v1/tokenize's max_model_len (131072) is the tokenizer's own limit: the server's is 900
    assert record["context"] == {
        "max_tokens": 900,
        "prompt_overhead_tokens": 1,
        "source": f"GET {sglang.url}/v1/models max_model_len",
    }
    text = "def  add(a, b):\n    return a + b"
    assert tokenization.counter.count([text]) == [len(word_tokens(text))] == [7]
    assert sglang.tokenize_seen[-1] == {"model": "sglang-fake", "prompt": text, "add_special_tokens": False}


def test_attached_run_sizes_every_request_for_the_server_and_none_fails(sglang, results_dir):
    sglang.context_length = 600
    config = parse_config(attach(sglang, "sgl-fit"))
    prepared = prepare_run(config)
    for request in prepared.workload.requests:
        assert request.input_tokens == len(word_tokens(request.prompt))
        assert request.input_tokens + 1 + request.target_output_tokens <= 600
    assert sum(report["skipped"].get(OVER_CONTEXT, 0) for report in prepared.workload.reports.values()) > 0
    outcome = execute_run(config, results_dir)
    assert outcome.status == "done", outcome.error
    run = load_run(results_dir, "sgl-fit")
    rows = run.requests
    assert len(rows) == 30 and rows["error"].isna().all()
    assert (rows["output_tokens"] == rows["target_output_tokens"]).all()
    sent = [body for body in sglang.requests_seen if body["max_tokens"] != 16]  # not the warm-up
    assert len(sent) == 30 and all(body["min_tokens"] == body["max_tokens"] for body in sent)
    assert all("priority" not in body for body in sent)  # fcfs gives none
    engine = json.loads((run.folder / "engine.json").read_text())
    assert engine["instances"][0]["kind"] == "sglang" and engine["instances"][0]["version"] == "0.5.23"
    ts = run.timeseries
    assert ts["running"].max() >= 1 and ts["kv_usage"].dropna().between(0, 1).all()
    assert run.summary.server_ttft_mean_s is not None


def test_chat_stream_counts_tokens_not_the_role_or_finish_chunks(sglang):
    endpoint = SGLangAdapter.endpoint(sglang.url, "sglang-fake", "chat")

    async def go():
        async with aiohttp.ClientSession() as session:
            return await stream_request(session, endpoint, "hello there", 6)

    result = asyncio.run(go())
    assert result.error is None and result.completion_tokens == 6 and len(result.chunk_times) == 6
    assert result.text == "".join(f"t{index} " for index in range(6))
    assert result.prompt_tokens == 2 + len(word_tokens("<|user|> hello there <|end|>"))


def test_context_overflow_is_sglangs_http_400_quoted_in_the_request_error(sglang):
    sglang.context_length = 50
    endpoint = SGLangAdapter.endpoint(sglang.url, "sglang-fake", "completions")

    async def go():
        async with aiohttp.ClientSession() as session:
            return await stream_request(session, endpoint, "word " * 30, 40)

    result = asyncio.run(go())
    assert result.http_status == 400
    assert result.error == (
        "HTTP 400: Requested token count exceeds the model's maximum context length of 50 tokens. "
        "You requested a total of 71 tokens: 31 tokens from the input messages and 40 tokens for "
        "the completion. Please reduce the number of tokens in the input messages or the "
        "completion to fit within the limit."
    )


def test_priority_orders_the_queue_lower_values_first(sglang):
    sglang.enable_priority_scheduling = sglang.schedule_low_priority_values_first = True
    sglang.max_running_requests = 1
    endpoint = SGLangAdapter.endpoint(sglang.url, "sglang-fake", "completions", scheduling_policy="priority")

    async def go():
        async with aiohttp.ClientSession() as session:
            first = asyncio.ensure_future(stream_request(session, endpoint, "blocker", 20))
            await asyncio.sleep(0.03)
            rest = [
                asyncio.ensure_future(stream_request(session, endpoint, f"p{value}", 2, priority=value))
                for value in (5, 1, 3)
            ]
            await asyncio.sleep(0.03)
            return await asyncio.gather(first, *rest)

    results = asyncio.run(go())
    assert all(result.error is None for result in results)
    assert sglang.started_order == ["blocker", "p1", "p3", "p5"]


def test_sglang_launch_path_runs_and_stops(results_dir):
    data = {
        "run_id": "sgl-launch",
        "engine": {
            "kind": "sglang",
            "model": "qwen-fake",
            "command": FAKE_SGLANG,
            "max_running_requests": 4,
            "context_length": 2048,
            "use_gpus": False,
            "startup_timeout_s": 60,
        },
        "workload": {"requests": 12, "arrival": {"process": "poisson", "rate": 30}},
        "scheduler": {"name": "fcfs"},
        "sample_interval_s": 0.05,
    }
    config = parse_config(data)
    tokenization = resolve_tokenization(config.engine, None)
    assert tokenization.record["context"]["source"] == "launch flag --context-length"
    outcome = execute_run(config, results_dir)
    assert outcome.status == "done", outcome.error
    run = load_run(results_dir, "sgl-launch")
    assert run.requests["error"].isna().all() and len(run.requests) == 12
    log = (run.folder / "server-0.log").read_text()
    assert (
        "--model-path qwen-fake" in log
        and "--enable-metrics --enable-cache-report --decode-log-interval 1" in log
        and "fired up" in log
    )
    assert (run.requests["cached_tokens"] == 0).all()  # the cache report reached each row (this fake caches nothing)
    engine = json.loads((run.folder / "engine.json").read_text())
    assert engine["instances"][0]["kv_capacity_tokens"] == 20_000


def test_a_dead_sglang_launch_says_so(tmp_path):
    config = parse_config(
        {
            "engine": {
                "kind": "sglang",
                "model": "m",
                "use_gpus": False,
                "startup_timeout_s": 30,
                "command": [sys.executable, "-c", "print('CUDA not found'); raise SystemExit(1)"],
            }
        }
    )
    engine = RealEngine(config=config.engine, log_folder=tmp_path)
    with pytest.raises(Exception, match="CUDA not found"):
        engine.start()
    engine.stop()


def test_cli_run_and_show_say_how_tokens_were_counted(sglang, results_dir, capsys):
    from runners.app.cli import main

    sglang.context_length = 700
    code = main(
        [
            "run",
            "--engine",
            "openai",
            "--url",
            sglang.url,
            "--requests",
            "6",
            "--rate",
            "50",
            "--out",
            str(results_dir),
            "--set",
            "run_id=sgl-cli",
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert f"token counts: server tokenizer (sglang): POST {sglang.url}/v1/tokenize" in out
    assert f"context limit: 700 tokens (GET {sglang.url}/v1/models max_model_len)" in out
    assert main(["show", "sgl-cli", "--out", str(results_dir)]) == 0
    assert "context limit: 700 tokens" in capsys.readouterr().out


def test_cli_says_when_the_approximation_counted_and_no_limit_was_known(results_dir, capsys):
    from runners.app.cli import main
    from tests.fakes.lmdeploy_server import FakeLMDeploy

    fake = FakeLMDeploy(has_encode=False).start()
    try:
        code = main(
            [
                "run",
                "--engine",
                "openai",
                "--url",
                fake.url,
                "--requests",
                "4",
                "--rate",
                "50",
                "--out",
                str(results_dir),
                "--set",
                "run_id=lmd-cli",
                "--quiet",
                "--set",
                "workload.filters.max_total_tokens=300",
            ]
        )
    finally:
        fake.stop()
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "token counts approximate (4 characters per token); source: approximation (4 characters per token): no server "
        "or model tokenizer; requests may not fit the server's context"
    ) in out
    assert "context limit: unknown, requests not sized to it; tried: no /v1/models card reports max_model_len" in out


@pytest.mark.parametrize("style", ["completion", "prompt"])
def test_each_text_is_counted_once_whichever_tokenize_the_server_has(style):
    # current serving_tokenize.py adds BOS to every prompt whatever add_special_tokens says; the
    # 0.5.4-era one honours it: either way a prompt is its words plus one BOS, counted once
    server = FakeSGLang(tokenize_style=style).start()
    try:
        counter = ServerTokenCounter(server.url, "sglang-fake", SGLangAdapter.tokenize_api)
        assert counter.count(["one two three", "four"]) == [3, 1]
        assert counter.text_offset == (1 if style == "completion" else 0)
        assert counter.overhead_tokens("completions") == 1
        if style == "completion":  # the chat template, generation prompt included
            assert counter.overhead_tokens("chat") == len(chat_tokens([{"role": "user", "content": ""}])) == 4
        else:  # no messages before the chat tokenize
            with pytest.raises(TokenizerUnavailable, match="HTTP 400"):
                counter.overhead_tokens("chat")
        endpoint = SGLangAdapter.endpoint(server.url, "sglang-fake", "completions")

        async def one():
            async with aiohttp.ClientSession() as session:
                return await stream_request(session, endpoint, "one two three", 2)

        assert asyncio.run(one()).prompt_tokens == 3 + counter.overhead_tokens("completions")
    finally:
        server.stop()


def scrape(server: FakeSGLang):
    return parse_metrics(urllib.request.urlopen(server.url + "/metrics").read().decode())


@pytest.mark.parametrize("interval", [40, 1])
def test_gauges_follow_sglangs_logging_schedule_and_outlive_the_drain(interval):
    # scheduler_metrics_mixin.py: gauges are set at each prefill batch and every
    # decode_log_interval decode steps, never while idle
    server = FakeSGLang(decode_log_interval=interval, token_delay_s=0.02).start()
    endpoint = SGLangAdapter.endpoint(server.url, "sglang-fake", "completions")

    async def two() -> tuple:
        async with aiohttp.ClientSession() as session:
            both = asyncio.gather(*(stream_request(session, endpoint, f"p{i} a b", 15) for i in range(2)))
            await asyncio.sleep(0.15)
            middle = await asyncio.to_thread(scrape, server)
            return middle, await both

    try:
        middle, results = asyncio.run(two())
        assert all(result.error is None for result in results)
        time.sleep(0.2)  # idle: nothing logs
        drained = scrape(server)
        info = json.loads(urllib.request.urlopen(server.url + "/server_info").read())
    finally:
        server.stop()
    # 40: only the two prefills logged (0, then 1 already running); 1: every decode step (2 running)
    assert middle.running == (1 if interval == 40 else 2)
    assert drained.running >= 1 and drained.waiting == 0  # stale: nothing runs, the gauge says otherwise
    assert drained.kv_usage is not None and drained.kv_usage > 0
    assert info["decode_log_interval"] == interval  # what an attached server's lag can be read from
