"""Multi-turn sessions on the real CPU vLLM (issue 31): the same sessions served with vLLM's prefix
caching on (its default) and off. With it on, later turns find the conversation so far in the cache
(vLLM's own /metrics counters: within one 128-token block per later turn of what the turns'
segments imply, and of what the simulator finds with the same blocks), and their TTFT falls
against the same turns with the cache off; first turns, which share nothing, gain nothing. Needs
``SCHEDLAB_VLLM_PYTHON``; under the CPU lock like every real-vLLM test."""

from __future__ import annotations

import pandas as pd

from bench.vllm_cpu_common import vllm_engine
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from runners.workload.builder import build_workload
from runners.workload.config import WorkloadConfig
from runners.workload.prefix import block_keys
from runners.workload.slo import PAPER_SLOS
from tests.real_vllm import needs_vllm

BLOCK = 128  # the CPU vLLM's block size


def _workload(tokenizer: str) -> dict:
    return {
        "requests": 10,
        "seed": 5,
        "ratio": {"chat": 1, "code": 0},
        "arrival": {"process": "poisson", "rate": 1.0},
        "tokenizer": tokenizer,
        "multi_turn": {"max_turns": 4, "think_time": {"distribution": "constant", "mean_s": 0.3}},
    }


def _implied_hit_tokens(workload: dict) -> tuple[int, int]:
    """Tokens of each later turn's leading full blocks that its previous turn's prompt holds (at
    most (tokens - 1) // BLOCK blocks), and the number of later turns."""
    requests = build_workload(WorkloadConfig.model_validate(workload), PAPER_SLOS).requests
    by_id = {request.request_id: request for request in requests}
    hits = later = 0
    for request in requests:
        if not request.after:
            continue
        later += 1
        previous = by_id[request.after]
        held = set(block_keys(previous.segments, BLOCK, previous.input_tokens))
        for key in block_keys(request.segments, BLOCK, request.input_tokens)[: (request.input_tokens - 1) // BLOCK]:
            if key not in held:
                break
            hits += BLOCK
    return hits, later


def _ttft_by_turn(rows: pd.DataFrame) -> pd.Series:
    done = rows[rows["error"].isna()]
    return done.groupby(done["turn"].clip(upper=2))["ttft_s"].mean()  # 1: first turns, 2: later ones


@needs_vllm
def test_later_turns_hit_the_prefix_cache_and_their_ttft_falls(tiny_model, tmp_path):
    workload = _workload(str(tiny_model))
    runs = {}
    for name, extra in (("cached", []), ("uncached", ["--no-enable-prefix-caching"])):
        engine = vllm_engine(tiny_model, extra_args=extra)
        outcome = execute_run(parse_config({"run_id": name, "engine": engine, "workload": workload}), tmp_path)
        assert outcome.status == "done", outcome.error
        runs[name] = load_run(tmp_path, name)
    simulated = execute_run(
        parse_config({"run_id": "sim", "engine": {"kind": "sim", "block_size": BLOCK}, "workload": workload}), tmp_path
    )
    sim = load_run(tmp_path, "sim")
    implied, later = _implied_hit_tokens(workload)
    cached, uncached = runs["cached"].summary, runs["uncached"].summary
    assert cached.completed == uncached.completed == len(runs["cached"].requests) and later >= 10
    assert cached.prefix_cache.source == "/metrics" and implied > 10 * BLOCK
    # vLLM tokenizes the whole prompt: a message boundary may change a token, so one block per later turn
    assert abs(cached.prefix_cache.hits_tokens - implied) <= BLOCK * later, (cached.prefix_cache, implied)
    assert uncached.prefix_cache.hits_tokens == 0
    # the time series' counters (from /metrics, less the scrape after warm-up) end at the summary's
    last = runs["cached"].timeseries.sort_values("t_s").iloc[-1]
    assert int(last["prefix_cache_hits_tokens"]) == cached.prefix_cache.hits_tokens
    # and each reply's usage says how many of its prompt tokens were cached: they add up to the counters
    per_request = runs["cached"].requests["cached_tokens"]
    assert per_request.notna().all() and int(per_request.sum()) == cached.prefix_cache.hits_tokens
    later_turns = runs["cached"].requests[runs["cached"].requests["turn"] > 1]
    assert (later_turns["cached_tokens"] > 0).mean() > 0.8  # nearly every later turn hit
    assert simulated.status == "done" and sim.summary.prefix_cache.hits_tokens == implied
    with_cache, without = _ttft_by_turn(runs["cached"].requests), _ttft_by_turn(runs["uncached"].requests)
    print(f"TTFT mean s, first / later turns: cache on {with_cache.tolist()}, off {without.tolist()}")
    print(f"sim TTFT by turn: {[(t.turn, t.ttft_mean_s) for t in sim.summary.turns]}")
    print(f"real TTFT by turn: {[(t.turn, t.ttft_mean_s) for t in cached.turns]}")
    assert with_cache[2] < without[2]  # later turns: most of the prompt is not computed again
