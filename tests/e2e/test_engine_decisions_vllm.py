"""The in-engine scheduler's decisions reach the time series on the real CPU vLLM: a launched
engine-dynamic-mem run's timeseries.parquet carries the running limit of its decisions file
(needs ``SCHEDLAB_VLLM_PYTHON``; run under the CPU lock, vLLM start-up takes minutes)."""

from __future__ import annotations

import json

from tests.real_vllm import needs_vllm, vllm_run_config

pytestmark = needs_vllm


def test_the_time_series_carries_the_engines_decisions(tiny_model, tmp_path):
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config
    from runners.store.result_store import load_run

    # 24 KV blocks of 128 tokens, 64 slots; every busy step recorded, so the samples' admitted counts
    # add up to the file's
    config = vllm_run_config(
        tiny_model, "engine-ts", "engine-dynamic-mem", {"eps_m": 0.05}, {"SCHEDLAB_ENGINE_DECISION_INTERVAL_S": "0"}
    )
    execute_run(parse_config(config), tmp_path / "results")
    run = load_run(tmp_path / "results", "engine-ts")
    assert run.summary.status == "done", run.summary.error
    decisions = [json.loads(line) for line in (run.folder / "engine-decisions-0.jsonl").read_text().splitlines()]
    series = run.timeseries.sort_values("t_s")
    known = series.dropna(subset=["engine_limit"])
    assert len(known) > 0 and known["engine_held_back"].notna().all()
    limits = {d["limit"] for d in decisions}
    assert set(known["engine_limit"].astype(int)) <= limits
    assert known["engine_limit"].max() < 23  # 23 usable blocks: Alg. 1 keeps it far below 64 slots
    # the last sample (after the run) has read the whole file: its limit is the last decision's,
    # and the admitted counts of all samples add up to the file's
    assert int(series["engine_limit"].iloc[-1]) == decisions[-1]["limit"]
    assert int(series["engine_admitted"].fillna(0).sum()) == sum(d["admitted"] for d in decisions) >= 20
