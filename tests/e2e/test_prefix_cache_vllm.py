"""The prefix cache on the real CPU vLLM against the simulator (issue 31): the bundled Mooncake
sample's first 40 records (speed-up 4) replayed on vLLM, whose prefix caching is on by default,
and on the simulator with vLLM's block size (128 here). Both find exactly the blocks the trace's
hash_ids share: vLLM's own counters, between the scrape after warm-up and the last one, and the
simulator's count. The warm-up shares no prefix with the run (it used to send the run's first
prompts, which then hit). Needs ``SCHEDLAB_VLLM_PYTHON``; under the CPU lock like every real-vLLM test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

from bench.vllm_cpu_common import launched_vllm
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.workload.prefix import block_keys
from runners.workload.traces import TRACES_DIR, TraceConfig, load_trace
from tests.real_vllm import WakeUpProbe, needs_vllm

SAMPLE = TRACES_DIR / "mooncake_synthetic.jsonl"
RECORDS = 40
BLOCK = 128  # the CPU vLLM's block size


def _implied_hit_tokens() -> int:
    """Tokens of each record's leading full blocks (of BLOCK tokens) that an earlier record's
    hash_ids already hold, at most (tokens - 1) // BLOCK blocks each."""
    seen: set[int] = set()
    hits = 0
    for record in load_trace(TraceConfig(path=str(SAMPLE)), RECORDS).records:
        keys = block_keys(record.segments, BLOCK, record.input_tokens)
        for key in keys[: (record.input_tokens - 1) // BLOCK]:
            if key not in seen:
                break
            hits += BLOCK
        seen.update(keys)
    return hits


def _summary(outcome) -> dict:
    return json.loads((outcome.folder / "summary.json").read_text())


@pytest.fixture(scope="module")
def server_url(tiny_model, tmp_path_factory) -> Iterator[str]:
    """One CPU vLLM (prefix caching on, its default; 320 KV blocks of 128 tokens) for the module's
    replays, attached by URL (issue 42: a server per test cost a launch each)."""
    with launched_vllm(tiny_model, tmp_path_factory.mktemp("logs"), num_gpu_blocks_override=320) as engine:
        yield engine.instances[0].endpoint.base_url


def _replay(url: str, run_id: str, workload: dict, folder) -> tuple[Any, WakeUpProbe]:
    """The workload replayed on the attached server, with the machine's wake-up delay measured
    meanwhile (the floor of its arrival lag)."""
    config = {"run_id": run_id, "engine": {"kind": "openai", "urls": url}, "workload": workload}
    with WakeUpProbe() as probe:
        outcome = execute_run(parse_config(config), folder)
    print(
        f"{run_id}: arrival lag p90/p99 {_summary(outcome)['arrival_lag_s']}; wake-up p90/p99 {probe.p90}/{probe.p99}"
    )
    return outcome, probe


@needs_vllm
def test_vllm_and_the_simulator_hit_the_blocks_the_trace_shares(server_url, tiny_model, tmp_path):
    workload = {"requests": RECORDS, "trace": {"path": str(SAMPLE), "speedup": 4}}
    real, probe = _replay(server_url, "real", {**workload, "tokenizer": str(tiny_model)}, tmp_path)
    simulated = execute_run(
        parse_config({"run_id": "sim", "engine": {"kind": "sim", "block_size": BLOCK}, "workload": workload}), tmp_path
    )
    implied = _implied_hit_tokens()
    assert implied == 33_280  # 260 blocks of 128 tokens, 54% of the trace's 61,637 prompt tokens
    real_summary, sim_summary = _summary(real), _summary(simulated)
    assert real.status == "done" and real_summary["completed"] == RECORDS, real.error
    assert real_summary["prefix_cache"]["source"] == "/metrics"
    assert real_summary["prefix_cache"]["hits_tokens"] == implied, real_summary["prefix_cache"]
    assert sim_summary["prefix_cache"] == {"queries_tokens": 61_637, "hits_tokens": implied, "source": "simulator"}
    # the engine looks up the prompts as its tokenizer counts them (within 2% of the trace's counts)
    assert abs(real_summary["prefix_cache"]["queries_tokens"] / 61_637 - 1) < 0.02
    # the trace's timing: each request sent at its offset / 4, lagging by milliseconds at most beyond
    # the machine's own wake-up delay meanwhile
    assert real_summary["arrival_process"] == "trace" and real_summary["arrival_lag_s"]["p90"] < 0.005 + probe.p90
    sent = pd.read_parquet(real.folder / "requests.parquet").sort_values("request_id")["arrival_s"].tolist()
    expected = [offset / 4 for offset in load_trace(TraceConfig(path=str(SAMPLE)), RECORDS).arrivals_s]
    assert sent == expected


@needs_vllm
def test_azure_and_burstgpt_samples_replay_on_their_offsets(server_url, tiny_model, tmp_path):
    """The two formats without shared blocks, on the module's server: each sample's first 30
    records sent at their offsets / 8, each within milliseconds (p90 under 5 ms, p99 under 20 ms,
    beyond the machine's own wake-up delay meanwhile), and no prefix shared between records
    (vLLM's hit counter does not move)."""
    for name in ("azure_conv_synthetic.csv", "burstgpt_synthetic.csv"):
        workload = {
            "requests": 30,
            "tokenizer": str(tiny_model),
            "trace": {"path": str(TRACES_DIR / name), "speedup": 8},
        }
        outcome, probe = _replay(server_url, name.split("_")[0], workload, tmp_path)
        summary = _summary(outcome)
        assert outcome.status == "done" and summary["completed"] == 30, outcome.error
        lag = summary["arrival_lag_s"]
        assert lag["p90"] < 0.005 + probe.p90 and lag["p99"] < 0.02 + probe.p99, (lag, probe.p90, probe.p99)
        sent = pd.read_parquet(outcome.folder / "requests.parquet").sort_values("request_id")["arrival_s"].tolist()
        trace = load_trace(TraceConfig(path=str(TRACES_DIR / name)), 30)
        assert sent == [offset / 8 for offset in trace.arrivals_s]
        assert summary["prefix_cache"]["hits_tokens"] == 0, summary["prefix_cache"]
