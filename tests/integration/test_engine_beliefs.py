"""What a policy believes about its engine (issue 48): every limit discovered or stated with its
source, the same on the simulator and on an attached server made from one profile, and recorded
in engine.json.

The attached server is a fake that speaks vLLM's wire format (tests/fakes/fault_server.py with a
``/metrics`` page of vLLM V1's names and its ``cache_config_info`` labels, and no dev-mode
``/server_info``, as a production vLLM answers): 48 KV blocks of 128 tokens, prefix caching on."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from runners.engines.beliefs import beliefs_note, differences, run_beliefs
from runners.engines.profile import resolve_profile
from runners.registry import SCHEDULERS, check_engine_for
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from tests.fakes.fault_server import FaultServer

BLOCKS, BLOCK = 48, 128


def vllm_page(blocks: int = BLOCKS, block: int = BLOCK, prefix_caching: bool = True) -> str:
    """A vLLM V1 /metrics page: the running/waiting gauges and ``vllm:cache_config_info`` with the
    labels vLLM writes (CacheConfig.metrics_info: every field as a string)."""
    registry = CollectorRegistry()
    labels = {"model_name": "tiny", "engine": "0"}
    Gauge("vllm:num_requests_running", "", list(labels), registry=registry).labels(**labels).set(0)
    Gauge("vllm:num_requests_waiting", "", list(labels), registry=registry).labels(**labels).set(0)
    Gauge("vllm:kv_cache_usage_perc", "", list(labels), registry=registry).labels(**labels).set(0)
    info = {
        "block_size": str(block),
        "num_gpu_blocks": str(blocks),
        "enable_prefix_caching": str(prefix_caching),
        "engine": "0",
    }
    Gauge("vllm:cache_config_info", "", list(info), registry=registry).labels(**info).set(1)
    return generate_latest(registry).decode()


@pytest.fixture(scope="module")
def vllm_like():
    server = FaultServer(metrics_body=vllm_page(), model_name="tiny", token_delay_s=0.002).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    """The profile the profiler writes against that server: its KV pool (discovered), and the
    slots and batched tokens it could not discover (vLLM's documented defaults, said so)."""
    base = resolve_profile("qwen2.5-7b-2xv100-vllm", None)
    default = "vLLM default, not discovered: vLLM's default on GPUs under 70 GiB"
    profile = base.model_copy(
        update={
            "name": "fake-vllm",
            "kv_capacity_tokens": BLOCKS * BLOCK,
            "model": None,
            "gpu": None,
            "block_size": BLOCK,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "limit_sources": {
                "kv_capacity_tokens": "discovered (/metrics)",
                "block_size": "discovered (/metrics)",
                "max_num_seqs": default,
                "max_num_batched_tokens": default,
            },
        }
    )
    path = tmp_path_factory.mktemp("profile") / "fake-vllm.yaml"
    profile.to_file(path)
    return path


def workload(requests: int = 12) -> dict:
    return {
        "requests": requests,
        "seed": 3,
        "arrival": {"process": "all-at-once"},
        "filters": {"max_total_tokens": 600},
    }


def attached(server: FaultServer, run_id: str, scheduler: str, profile, requests: int = 12) -> dict:
    return {
        "run_id": run_id,
        "engine": {"kind": "openai", "urls": server.url, "profile": str(profile)},
        "workload": workload(requests),
        "scheduler": {"name": scheduler},
        "sample_interval_s": 0.05,
    }


def simulated(run_id: str, scheduler: str, profile, requests: int = 12) -> dict:
    return {
        "run_id": run_id,
        "engine": {"kind": "sim", "profile": str(profile)},
        "workload": workload(requests),
        "scheduler": {"name": scheduler},
    }


def peak_in_flight(requests) -> int:
    """Most requests between dispatch and finish at once."""
    events = sorted([(t, 1) for t in requests["dispatch_s"]] + [(t, -1) for t in requests["finish_s"]])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_slo_sa_on_an_attached_vllm_gets_the_engine_slots_not_a_silent_four(vllm_like, profile_path, results_dir):
    """Issue 48, measured item 1: slo-sa fell back to 4 slots when an attached engine did not
    report max_num_seqs (peak in flight 4 against fcfs's 43 on the CPU vLLM). Now the run states
    vLLM's documented default with its source, and slo-sa keeps more than 4 in flight."""
    outcome = execute_run(parse_config(attached(vllm_like, "slo-sa-attached", "slo-sa", profile_path)), results_dir)
    assert outcome.status == "done", outcome.error
    run = load_run(results_dir, "slo-sa-attached")
    beliefs = run_beliefs(run.folder)
    assert beliefs is not None
    assert beliefs["max_num_seqs"]["value"] == 256
    assert beliefs["max_num_seqs"]["source"].startswith("vLLM default, not discovered")
    assert beliefs["kv_capacity_tokens"] == {"value": BLOCKS * BLOCK, "source": "discovered (/metrics)"}
    assert beliefs["prefix_caching"] == {"value": True, "source": "discovered (/metrics cache info)"}
    assert peak_in_flight(run.requests) > 4


def attachable_policies() -> list[str]:
    """The built-in policies a run on an attached server accepts (not the in-engine ones)."""
    names = []
    for name in SCHEDULERS:
        try:
            check_engine_for(name, "openai")
        except Exception:
            continue
        names.append(name)
    return names


@pytest.mark.parametrize("scheduler", attachable_policies())
def test_every_built_in_policy_believes_the_same_on_the_simulator_and_the_attached_engine(
    scheduler, vllm_like, profile_path, results_dir
):
    """Every limit's value and the latency model the policy plans with (its whole planning record:
    coefficients, fit, error) are equal on the two sides; 6 requests (slo-exhaustive plans <= 7)."""
    real = execute_run(parse_config(attached(vllm_like, f"{scheduler}-real", scheduler, profile_path, 6)), results_dir)
    sim = execute_run(parse_config(simulated(f"{scheduler}-sim", scheduler, profile_path, 6)), results_dir)
    assert real.status == "done", real.error
    assert sim.status == "done", sim.error
    real_beliefs, sim_beliefs = run_beliefs(real.folder), run_beliefs(sim.folder)
    assert real_beliefs is not None and sim_beliefs is not None
    assert differences(real_beliefs, sim_beliefs) == []
    assert {k: v["value"] for k, v in real_beliefs.items()} == {k: v["value"] for k, v in sim_beliefs.items()}
    # the simulated side names the profile and, through it, where the profiler found each value
    assert sim_beliefs["max_num_seqs"]["source"].startswith(f"profile {profile_path}: vLLM default, not discovered")
    assert beliefs_note([("sim", sim.folder), ("real", real.folder)]) is None
