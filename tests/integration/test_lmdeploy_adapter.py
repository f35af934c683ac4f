"""LMDeploy through its adapter (runners/engines/adapters/lmdeploy.py) as its source behaves
(issue 29, items 3 and 4): the metrics switch of the launched version (v0.10.x serves no /metrics
unless ``--enable-metrics``; v0.11+ has ``--disable-metrics``), and the per-token inter-token
latency histogram (``time_per_output_token_seconds``) read in place of ``iter_token_latency``,
which LMDeploy observes once per engine output. Against tests/fakes/lmdeploy_server.py."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from runners.engines.adapters.lmdeploy import LMDeployAdapter, LMDeployConfig, metrics_flags
from runners.engines.openai_client import stream_request
from runners.engines.telemetry import mean_between, parse_metrics
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from tests.fakes.lmdeploy_server import FakeLMDeploy

ROOT = Path(__file__).resolve().parents[2]
FAKE_LMDEPLOY = [sys.executable, str(ROOT / "tests" / "fakes" / "lmdeploy_server.py")]
FAKE_LMDEPLOY_0_10 = [*FAKE_LMDEPLOY, "--fake-version", "0.10"]


def test_the_launch_passes_enable_metrics_only_to_a_version_that_has_it():
    assert metrics_flags(FAKE_LMDEPLOY_0_10) == ["--enable-metrics"]
    assert metrics_flags(FAKE_LMDEPLOY) == []  # v0.11+: on unless --disable-metrics
    assert metrics_flags(FAKE_LMDEPLOY_0_10, extra_args=["--enable-metrics"]) == []  # not twice
    # a wrapper's --help is never run: `python -c ...` would run the script (even start a server)
    marker = ROOT / "tests" / "fakes" / "never-written"
    wrapper = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]
    assert metrics_flags(wrapper) == [] and not marker.exists()
    assert metrics_flags(["/no/such/lmdeploy"]) == []  # unreadable help: the launch fails on its own
    old = LMDeployConfig(model="/models/qwen", command=FAKE_LMDEPLOY_0_10).server_command(23333)
    assert old[-1] == "--enable-metrics" and old.count("--enable-metrics") == 1
    assert "--enable-metrics" not in LMDeployConfig(model="/models/qwen", command=FAKE_LMDEPLOY).server_command(1)


def test_a_v0_10_server_started_without_the_flag_serves_no_metrics():
    quiet = FakeLMDeploy(metrics_enabled=False).start()
    try:
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(quiet.url + "/metrics")
    finally:
        quiet.stop()


def test_a_launched_v0_10_server_has_telemetry_and_the_flag_is_recorded(results_dir):
    data = {
        "run_id": "lmd-010",
        "engine": {
            "kind": "lmdeploy",
            "model": "internlm-fake-010",
            "command": FAKE_LMDEPLOY_0_10,
            "max_batch_size": 4,
            "use_gpus": False,
            "startup_timeout_s": 60,
        },
        "workload": {
            "requests": 16,
            "arrival": {"process": "poisson", "rate": 20},
            "filters": {"max_total_tokens": 300},
        },
        "scheduler": {"name": "fcfs"},
        "sample_interval_s": 0.05,
    }
    outcome = execute_run(parse_config(data), results_dir)
    assert outcome.status == "done", outcome.error
    run = load_run(results_dir, "lmd-010")
    command = json.loads((run.folder / "engine.json").read_text())["instances"][0]["command"]
    assert command[-1] == "--enable-metrics"
    assert (run.folder / "server-0.log").read_text().splitlines()[0].endswith("--max-batch-size 4 --enable-metrics")
    assert run.timeseries["running"].notna().any() and run.timeseries["running"].max() >= 1


def test_inter_token_latency_is_read_per_token_not_per_engine_output():
    # each engine output after the first carries 4 tokens, 4 token delays (20 ms) after the last
    server = FakeLMDeploy(tokens_per_output=4, token_delay_s=0.005).start()
    try:
        before = urllib.request.urlopen(server.url + "/metrics").read().decode()
        endpoint = LMDeployAdapter.endpoint(server.url, server.model_name, "completions")

        async def one():
            async with aiohttp.ClientSession() as session:
                return await stream_request(session, endpoint, "hello " * 8, 17)

        result = asyncio.run(one())
        after = urllib.request.urlopen(server.url + "/metrics").read().decode()
    finally:
        server.stop()
    assert result.error is None and result.completion_tokens == 17 and len(result.chunk_times) == 5
    first, last = parse_metrics(before), parse_metrics(after)
    per_token = mean_between(first.itl_sum_s, first.itl_count, last.itl_sum_s, last.itl_count)
    assert last.itl_count == 4  # one observation per output after the first, as stats.py makes them
    assert per_token is not None and 0.004 < per_token < 0.012  # ~5 ms a token
    per_output = re.search(r"^lmdeploy:iter_token_latency_sum\{[^}]*\} (\S+)", after, re.M)
    assert per_output is not None and float(per_output.group(1)) / 4 > 0.018  # ~20 ms an output
