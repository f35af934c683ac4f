"""schedlab's in-engine vLLM schedulers (runners/schedulers/vllm): the shared Alg. 1
decision functions and the version check without vLLM; the real CPU vLLM loading
engine-dynamic-mem with ``--scheduler-cls`` (needs ``SCHEDLAB_VLLM_PYTHON``, under the CPU lock).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from runners.registry import in_engine_policy
from runners.schedulers import dynamic_batching
from runners.schedulers.dynamic_batching_core import (
    batch_capacity_tokens,
    clamp_batch,
    memory_batch_size,
    memory_limit,
    normal_quantile,
)
from runners.schedulers.vllm import (
    EngineDynamicMemoryParams,
    load_params,
    supported_version,
    version_error,
)
from tests.real_vllm import needs_vllm, run_to_completion, vllm_run_config

ROOT = Path(__file__).resolve().parents[2]
ENGINE_CLASS = "runners.schedulers.vllm.dynamic_mem.DynamicMemoryScheduler"


# --- without vLLM ------------------------------------------------------------------------------


def test_the_registry_and_the_client_side_import_without_vllm():
    """The registry, the in-engine classes' vLLM-free decision functions and the client policies
    load in a Python without vLLM (every engine-* scheduler's test relies on this one)."""
    code = (
        "import sys, runners.registry as r, runners.schedulers.vllm.mcsf_core, "
        "runners.schedulers.in_engine; "
        "cls = r.in_engine_policy('engine-dynamic-mem'); "
        "assert not any(n == 'vllm' or n.startswith('vllm.') for n in sys.modules); "
        "print(cls.engine_class)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ENGINE_CLASS
    assert in_engine_policy("engine-dynamic-mem").engine_class == ENGINE_CLASS
    assert in_engine_policy("engine-dynamic-mem").engine_params is EngineDynamicMemoryParams
    with pytest.raises(KeyError, match="engine-dynamic-mem"):
        in_engine_policy("engine:nope")
    with pytest.raises(KeyError, match="unknown in-engine scheduler 'fcfs'"):
        in_engine_policy("fcfs")


def test_the_client_policy_and_the_engine_share_one_decision_function():
    assert dynamic_batching.memory_batch_size is memory_batch_size
    assert dynamic_batching.clamp_batch is clamp_batch


def test_block_exact_capacity_by_hand():
    # 10 free blocks of 128 tokens; running requests holding blocks [1, 2], [2, 3] (block 2, a
    # common prefix, shared), [4] and none: 4 distinct blocks, eta = 128 * (10 + 4) = 1792 tokens
    assert batch_capacity_tokens(128, 10, [[1, 2], [2, 3], [4], []]) == 1792
    assert batch_capacity_tokens(16, 0, []) == 0


def test_memory_limit_by_hand():
    # 24 blocks of 128 = 3072 tokens; every request 100 prompt + 200 output tokens, no spread.
    # Footprint in blocks: mean 300 + 127/2 = 363.5, variance (128^2 - 1)/12 = 1365.25, std 36.949.
    # theta = 1.6449 (eps 0.05), sigma*theta = 60.777; b* = ((sqrt(60.777^2 + 4*363.5*3072) - 60.777)
    # / (2*363.5))^2 = (2053.55 / 727)^2 = 7.979; L0 = 60.777 * sqrt(7.979) = 171.68;
    # b = floor((3072 - 171.68) / 363.5) = floor(7.979) = 7
    limit, mean, std = memory_limit(3072, 100, 0, 200, 0, 128, 0.05, 0, 64)
    assert (limit, mean) == (7, 363.5) and std == pytest.approx(36.949, abs=1e-3)
    assert memory_limit(3072, 100, 0, 200, 0, 128, 0.05, 9, 64)[0] == 9  # never below the decoding
    assert memory_limit(10**7, 100, 0, 200, 0, 128, 0.05, 0, 64)[0] == 64  # never above B_max
    # no rounding, no spread: floor(3072 / 300) = 10
    assert memory_limit(3072, 100, 0, 200, 0, None, 0.05, 0, 64)[0] == 10


def test_the_quantile_gives_scipys_batch_sizes_over_a_grid():
    norm = pytest.importorskip("scipy.stats").norm
    for eps in (1e-9, 1e-4, 0.01, 0.05, 0.1, 0.3, 0.5, 0.9):
        assert normal_quantile(1 - eps) == pytest.approx(float(norm.ppf(1 - eps)), rel=1e-14)
        theta = float(norm.ppf(1 - eps))
        for eta in (128, 3072, 40_000, 1_000_000):
            for mean in (50.0, 363.5, 1000.0):
                for std in (0.0, 36.9, 300.0, 2000.0):
                    root = (math.sqrt((std * theta) ** 2 + 4 * mean * eta) - std * theta) / (2 * mean)
                    scipy_size = max(1, math.floor((eta - theta * std * root) / mean))
                    assert memory_batch_size(eta, mean, std, eps)[0] == scipy_size, (eta, mean, std, eps)


@pytest.mark.parametrize(
    "version, ok",
    [
        ("0.32.0", True),
        ("0.32.3+cpu", True),
        ("0.32.0rc1", True),
        ("0.31.2", False),
        ("0.320.0", False),
        ("1.32.0", False),
        ("", False),
    ],
)
def test_version_check(version, ok):
    assert supported_version(version) is ok
    message = version_error(version)
    assert (message is None) is ok
    if not ok:
        assert "0.32.x" in message and repr(version) in message
    assert "unknown" in version_error(None)


def test_params_from_the_file_named_by_the_environment(tmp_path):
    assert load_params(EngineDynamicMemoryParams, {}) == EngineDynamicMemoryParams()
    path = tmp_path / "params.json"
    path.write_text(json.dumps({"eps_m": 0.1, "output_prior": "given", "output_mean": 200, "output_std": 20}))
    params = load_params(EngineDynamicMemoryParams, {"SCHEDLAB_ENGINE_PARAMS": str(path)})
    assert (params.eps_m, params.output_prior, params.output_mean, params.output_count) == (0.1, "given", 200, 100)
    path.write_text(json.dumps({"output_prior": "given"}))
    with pytest.raises(ValueError, match="output_mean"):
        load_params(EngineDynamicMemoryParams, {"SCHEDLAB_ENGINE_PARAMS": str(path)})
    path.write_text(json.dumps({"eps_m": 1.5}))
    with pytest.raises(ValueError, match="eps_m"):
        load_params(EngineDynamicMemoryParams, {"SCHEDLAB_ENGINE_PARAMS": str(path)})
    with pytest.raises(ValueError, match="cannot read"):
        load_params(EngineDynamicMemoryParams, {"SCHEDLAB_ENGINE_PARAMS": str(tmp_path / "missing.json")})


# --- the real CPU vLLM ---------------------------------------------------------------------------


def engine_run(model: Path, run_id: str, env: dict[str, str], requests: int = 20) -> dict:
    """A run of scheduler engine-dynamic-mem as a user starts it: schedlab launches the CPU vLLM
    with the class, its parameters and the decisions file (runners.run.benchmark)."""
    return vllm_run_config(model, run_id, "engine-dynamic-mem", {"eps_m": 0.05}, env, requests)


@needs_vllm
def test_dynamic_mem_in_the_real_cpu_vllm(tiny_model, tmp_path):
    config = engine_run(tiny_model, "engine-dynamic-mem", {"SCHEDLAB_ENGINE_DECISION_INTERVAL_S": "0"})
    # the decisions come from the launcher's per-instance file, engine-decisions-0.jsonl
    run, decisions, log = run_to_completion(config, tmp_path / "results", ENGINE_CLASS)
    assert json.loads((run.folder / "engine-scheduler-params.json").read_text())["eps_m"] == 0.05
    assert "schedlab in-engine scheduler DynamicMemoryScheduler (vLLM 0.32" in log and ", sync)" in log
    assert "SCHEDLAB_DECISION {" in log

    assert decisions and all(d["block_size"] == 128 and d["total_blocks"] == 23 for d in decisions)
    sized = [d for d in decisions if d["sized"]]
    assert sized
    for d in sized:  # the engine applied the shared function to what it saw
        size, _ = memory_batch_size(d["eta_tokens"], d["footprint_mean"], d["footprint_std"], 0.05)
        assert d["limit"] == clamp_batch(size, d["decoding"], 64), d
        assert d["eta_tokens"] <= 128 * 23
    # the KV holds 23 usable blocks: Alg. 1 keeps the running limit far below max_num_seqs 64, and
    # the engine admits no one past it
    assert max(d["limit"] for d in decisions) < 23
    assert all(d["running"] <= d["limit"] for d in decisions if d["admitted"] > 0)
    assert sum(d["admitted"] for d in decisions) >= 20
    assert any(d["held_back"] > 0 for d in decisions)
    # the decisions reach the time series (every busy step recorded, so the samples' admitted
    # counts add up to the file's): one run checked once, not at two levels
    series = run.timeseries.sort_values("t_s")
    known = series.dropna(subset=["engine_limit"])
    assert len(known) > 0 and known["engine_held_back"].notna().all()
    assert set(known["engine_limit"].astype(int)) <= {d["limit"] for d in decisions}
    assert known["engine_limit"].max() < 23
    # the last sample (after the run) has read the whole file: its limit is the last decision's
    assert int(series["engine_limit"].iloc[-1]) == decisions[-1]["limit"]
    assert int(series["engine_admitted"].fillna(0).sum()) == sum(d["admitted"] for d in decisions)
    leftover = subprocess.run(["pgrep", "-f", f"--model {tiny_model}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


@needs_vllm
def test_an_unsupported_vllm_version_refuses_to_start(tiny_model, tmp_path):
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    config = engine_run(tiny_model, "engine-old-vllm", {"SCHEDLAB_ENGINE_VLLM_VERSION": "0.31.0"}, requests=2)
    config["engine"]["startup_timeout_s"] = 300
    outcome = execute_run(parse_config(config), tmp_path / "results")
    assert outcome.summary.status == "failed"
    # the run's error quotes the plugin's own line, not only vLLM's generic last lines
    assert "support vLLM 0.32.x; this server runs vLLM '0.31.0'" in (outcome.error or ""), outcome.error
    logs = list((tmp_path / "results").rglob("server-0.log"))
    assert logs
    log = logs[0].read_text(errors="replace")
    assert "support vLLM 0.32.x; this server runs vLLM '0.31.0'" in log
    leftover = subprocess.run(["pgrep", "-f", f"--model {tiny_model}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


@needs_vllm
def test_a_plugin_that_raises_mid_run_stops_the_run_and_keeps_what_was_measured(tiny_model, tmp_path):
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config
    from runners.store.result_store import load_run

    # requests of at most 256 tokens (seed 1: outputs of 23 to 196 tokens): the short ones among the
    # first admitted finish within 150 steps, the longest need more than 150 steps by themselves;
    # no warm-up waves (their steps would count)
    config = engine_run(tiny_model, "engine-raises", {"SCHEDLAB_ENGINE_FAIL_AT_STEP": "150"})
    config["workload"]["filters"] = {"max_total_tokens": 256}
    config["engine"]["warmup_concurrency"] = []
    config["max_duration_s"] = 300
    outcome = execute_run(parse_config(config), tmp_path / "results")
    assert outcome.summary.status == "failed"
    # the run's error quotes the plugin's exception from the server log
    assert "DynamicMemoryScheduler failed at step 150" in (outcome.error or ""), outcome.error
    assert "server 0 log (server-0.log), last lines:" in outcome.error
    run = load_run(tmp_path / "results", "engine-raises")
    requests = run.requests
    assert len(requests) == 20  # every request has its row
    done = requests[requests["error"].isna()]
    assert len(done) >= 1, "requests finished before the failure are kept"
    assert (done["output_tokens"] == done["target_output_tokens"]).all()
    assert requests["error"].notna().any()
    decisions = [json.loads(line) for line in (run.folder / "engine-decisions-0.jsonl").read_text().splitlines()]
    assert decisions and max(d["step"] for d in decisions) < 150
    leftover = subprocess.run(["pgrep", "-f", f"--model {tiny_model}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
