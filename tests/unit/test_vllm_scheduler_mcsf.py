"""engine-mcsf, 003 MC-SF as a vLLM scheduler class: the queue order, the predicted output and the
admission count by hand (without vLLM: runners.schedulers.vllm.mcsf_core, the functions
the class calls), agreement with the client-side mcsf, the client policy's engine arguments; then
the real CPU vLLM running engine-mcsf (needs ``SCHEDLAB_VLLM_PYTHON``, under the CPU lock).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from runners.registry import in_engine_policy, make_policy, scheduler_class
from runners.schedulers import memory_constrained
from runners.schedulers.base import InstanceInfo
from runners.schedulers.in_engine import EngineMCSFPolicy
from runners.schedulers.memory_constrained import MCSFPolicy
from runners.schedulers.vllm import (
    PREDICTED_OUTPUT_ARG,
    EngineMCSFParams,
    launch_settings,
    mcsf_core,
)
from runners.schedulers.vllm.mcsf_core import (
    capacity_tokens,
    demand_peak,
    mcsf_admissions,
    predicted_output_tokens,
    remaining_steps,
    shortest_first_key,
)
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO
from tests.real_vllm import needs_vllm, run_to_completion, vllm_run_config

ENGINE_CLASS = "runners.schedulers.vllm.mcsf.MCSFScheduler"


def _request(rid: str, prompt: int, output: int, arrival: float = 0.0, task: str = "chat") -> Request:
    return Request(rid, task, "x", prompt, output, arrival, TaskSLO(e2e_s=30.0))


# --- without vLLM ------------------------------------------------------------------------------


def test_registered():  # mcsf_core and in_engine import without vLLM: tests/unit/test_vllm_scheduler.py
    assert in_engine_policy("engine-mcsf").engine_class == ENGINE_CLASS
    assert in_engine_policy("engine-mcsf").twin == "mcsf"
    assert in_engine_policy("engine-mcsf").engine_params is EngineMCSFParams
    assert scheduler_class("engine-mcsf") is EngineMCSFPolicy and EngineMCSFPolicy.in_engine
    assert EngineMCSFPolicy.twin == "mcsf"


def test_one_admission_function_for_both_twins():
    assert mcsf_core.admit_shortest_first is memory_constrained.admit_shortest_first


def test_predicted_output_from_the_request():
    assert predicted_output_tokens({PREDICTED_OUTPUT_ARG: 37}, 200) == (37, "extra_args")
    assert predicted_output_tokens({PREDICTED_OUTPUT_ARG: 36.6}, 200) == (37, "extra_args")
    assert predicted_output_tokens({PREDICTED_OUTPUT_ARG: 0}, 200) == (1, "extra_args")  # at least 1
    assert predicted_output_tokens(None, 200) == (200, "max_tokens")  # the oracle: the target as max_tokens
    assert predicted_output_tokens({"other": 5}, 200) == (200, "max_tokens")
    for bad in ("37", True, float("nan"), [37]):  # not a finite number: not a prediction
        assert predicted_output_tokens({PREDICTED_OUTPUT_ARG: bad}, 200) == (200, "max_tokens")
    assert remaining_steps(200, 150) == 50 and remaining_steps(200, 250) == 1 and remaining_steps(5, 5) == 1


def test_queue_order_shortest_remaining_first_ties_by_arrival():
    # (predicted, generated, arrival): remaining 50, 20, 50, 5 (a preempted request, 25 of 30
    # generated), 20, 1 (over its prediction: at least 1)
    queue = [
        ("a", 50, 0, 1.0),
        ("b", 20, 0, 2.0),
        ("c", 50, 0, 0.5),
        ("d", 30, 25, 3.0),
        ("e", 20, 0, 1.5),
        ("f", 10, 12, 4.0),
    ]
    ordered = sorted(queue, key=lambda q: shortest_first_key(remaining_steps(q[1], q[2]), q[3]))
    assert [q[0] for q in ordered] == ["f", "d", "e", "b", "c", "a"]
    # equal keys keep their queue order (a stable sort)
    same = [("x", 20, 0, 1.0), ("y", 20, 0, 1.0)]
    assert [q[0] for q in sorted(same, key=lambda q: shortest_first_key(q[1] - q[2], q[3]))] == ["x", "y"]


def test_admission_count_by_hand():
    # 3 blocks of 128 tokens: M = 384 tokens; every request holds its tokens + 127 (block slack).
    m = capacity_tokens(3, 128, 1.0)
    assert m == 384
    # running R: 100 tokens (held 227), 10 steps left. Waiting, in MC-SF order:
    # A prompt 10, 20 steps (base 137): demand at t=10: (227 + 10) + (137 + 10) = 384 <= 384 (just fits),
    #   at t=20: 137 + 20 = 157: admitted;
    # B prompt 1, 30 steps (base 128): at t=10: 384 + 128 + 10 = 522 > 384: stops there.
    assert mcsf_admissions([100], [10], [10, 1], [20, 30], 128, m) == 1
    assert demand_peak([100, 10], [10, 20], 128) == 384
    # one token more in R and A no longer fits
    assert mcsf_admissions([101], [10], [10, 1], [20, 30], 128, m) == 0
    # nothing running: A (157 at t=20), B (prompt 10, 30 steps: at t=20 157 + 157 = 314, at t=30
    # 167) fit; C (prompt 5, 40 steps, base 132) adds 132 + 20 = 152 at t=20: 466 > 384
    assert mcsf_admissions([], [], [10, 10, 5], [20, 30, 40], 128, m) == 2
    assert demand_peak([10, 10], [20, 30], 128) == 314
    # memory_fraction 0.5: M = 192: A alone (157) fits, A + B (314 at t=20) does not
    assert mcsf_admissions([], [], [10, 10], [20, 30], 128, capacity_tokens(3, 128, 0.5)) == 1
    # a request larger than the cache, nothing running: it goes alone (the engine says so)
    assert mcsf_admissions([], [], [1000, 10], [5, 20], 128, m) == 1
    # ... but never next to a running one
    assert mcsf_admissions([10], [5], [1000], [5], 128, m) == 0
    assert mcsf_admissions([10], [5], [], [], 128, m) == 0
    # equal ends count together: two running with 10 steps at 50 tokens: 2 * (177 + 10) = 374
    assert demand_peak([50, 50], [10, 10], 128) == 374
    assert demand_peak([], [], 128) == 0


def test_the_engine_count_equals_the_client_mcsf_decision():
    """The same state, seen by both twins, admits the same requests: 5 requests arrive together on
    an idle instance of 3 blocks of 128 tokens; the client-side mcsf dispatches those that
    mcsf_admissions admits from the shortest-first queue."""
    prompts, outputs = [10, 10, 5, 40, 3], [30, 20, 40, 10, 60]
    requests = [_request(f"r{i}", p, o, 0.0) for i, (p, o) in enumerate(zip(prompts, outputs))]
    client = MCSFPolicy(MCSFPolicy.Params(output_predictor="oracle"))
    client.start([InstanceInfo(0, 384, 128, 64)], 0.0)
    for request in requests:
        client.on_arrival(request, 0.0)
    sent = [d.request_id for d in client.decide(0.0).dispatches]
    order = sorted(range(5), key=lambda i: shortest_first_key(outputs[i], 0.0))  # r3, r1, r0, r2, r4
    count = mcsf_admissions([], [], [prompts[i] for i in order], [outputs[i] for i in order], 128, 384)
    # by hand: r3 (base 167, 10 steps) 177; r1 (137, 20) at t=10 177 + 147 = 324; r0 (137, 30) at
    # t=10 324 + 147 = 471 > 384: two
    assert count == 2
    assert sent == [f"r{i}" for i in order[:count]] == ["r3", "r1"]


def test_params_and_launch_file(tmp_path):
    assert EngineMCSFParams().memory_fraction == 1.0
    for bad in (0, 1.5):
        with pytest.raises(ValidationError, match="memory_fraction"):
            EngineMCSFParams(memory_fraction=bad)
    with pytest.raises(ValidationError, match="output_predictor"):
        EngineMCSFPolicy.Params(output_predictor="tea-leaves")  # a Literal, not any string
    params = EngineMCSFPolicy.Params(output_predictor="gaussian", memory_fraction=0.8)
    cls, env = launch_settings(in_engine_policy("engine-mcsf"), params, tmp_path)
    assert cls == ENGINE_CLASS
    # the server gets the class's own fields only (the predictor runs in the client)
    written = json.loads(Path(env["SCHEDLAB_ENGINE_PARAMS"]).read_text())
    assert written == {"memory_fraction": 0.8}
    assert EngineMCSFParams.model_validate(written).memory_fraction == 0.8


def _client_predictions(policy, requests) -> dict[str, int]:
    policy.on_workload(requests)
    policy.on_calibration({"chat": [90, 110, 250], "code": [40, 80]})
    policy.start([InstanceInfo(0, 3072, 128, 64)], 0.0)
    for request in requests:
        policy.on_arrival(request, request.arrival_s)
    return policy


def test_the_client_sends_the_same_predictions_as_the_client_mcsf():
    requests = [
        _request(f"r{i}", 20, out, 0.1 * i, task)
        for i, (out, task) in enumerate([(100, "chat"), (300, "chat"), (50, "code"), (70, "code"), (200, "chat")])
    ]
    # oracle (MC-SF's own assumption, chosen): each request's target, as an engine argument, sent on arrival
    policy = _client_predictions(make_policy("engine-mcsf", {"output_predictor": "oracle"}), requests)
    dispatches = policy.decide(0.5).dispatches
    assert [(d.request_id, d.instance, d.max_tokens) for d in dispatches] == [(r.request_id, 0, None) for r in requests]
    assert [d.engine_args for d in dispatches] == [{PREDICTED_OUTPUT_ARG: r.target_output_tokens} for r in requests]
    assert not policy.pending
    # gaussian (the default) from the calibration sample's per-task moments: the engine twin's
    # predictions are the mcsf's
    for mode in ("gaussian", "noisy-oracle"):
        params = {"output_predictor": mode, "predictor_seed": 7}
        engine = _client_predictions(make_policy("engine-mcsf", params), requests)
        client = _client_predictions(make_policy("mcsf", params), requests)
        sent = {d.request_id: d.engine_args[PREDICTED_OUTPUT_ARG] for d in engine.decide(0.5).dispatches}
        assert sent == client.predicted
        assert sent != {r.request_id: r.target_output_tokens for r in requests}  # not the oracle


# --- the real CPU vLLM ---------------------------------------------------------------------------


@needs_vllm
def test_mcsf_in_the_real_cpu_vllm(tiny_model, tmp_path):
    # MC-SF's own setting, known lengths: the oracle, chosen (the default is the leak-free Gaussian)
    config = vllm_run_config(
        tiny_model,
        "engine-mcsf",
        "engine-mcsf",
        {"memory_fraction": 1.0, "output_predictor": "oracle"},
        {"SCHEDLAB_ENGINE_DECISION_INTERVAL_S": "0"},
    )
    run, decisions, log = run_to_completion(config, tmp_path / "results", ENGINE_CLASS)
    requests = run.requests
    assert "schedlab in-engine scheduler MCSFScheduler (vLLM 0.32" in log and "M = 2944 tokens" in log

    assert decisions and all(d["block_size"] == 128 and d["total_blocks"] == 23 for d in decisions)
    assert all(d["capacity_tokens"] == 23 * 128 for d in decisions)
    # every benchmark request came with the client's prediction (the oracle: its target); the
    # requests the engine got from max_tokens alone are the launcher's warm-up, before the run
    assert decisions[-1]["predicted_from_extra_args"] == 20
    run_decisions = [d for d in decisions if d["predicted_from_extra_args"] > 0]
    assert all(d["predicted_from_max_tokens"] == decisions[-1]["predicted_from_max_tokens"] for d in run_decisions)
    targets = set(requests["target_output_tokens"].tolist())
    for d in decisions:
        # the limit applied is MC-SF's: what held a slot plus the planned requests
        assert d["limit"] == max(1, d["holding"] + d["planned"]), d
        # shortest predicted output first: the planned in order, none left out shorter than the last
        assert d["planned_first"] == sorted(d["planned_first"]), d
        if d["planned_last"] is not None and d["held_first"] is not None:
            assert d["planned_last"] <= d["held_first"], d
        # the plan fits M (no request here is larger than the cache alone: 640 + 127 tokens at most)
        assert d["demand_peak_tokens"] <= d["capacity_tokens"], d
    first = next(d for d in run_decisions if d["planned"] > 0)
    assert set(first["planned_first"]) <= targets  # oracle predictions, none generated yet
    # the KV (23 blocks) binds: MC-SF held requests back at some step, far below max_num_seqs 64
    assert any(d["held_first"] is not None for d in decisions)
    assert max(d["limit"] for d in decisions) < 64
    assert sum(d["admitted"] for d in decisions) >= 20
    leftover = subprocess.run(["pgrep", "-f", f"--model {tiny_model}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


@needs_vllm
def test_the_priority_policy_is_refused_at_start_up(tiny_model, tmp_path):
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    config = vllm_run_config(
        tiny_model,
        "engine-mcsf-priority",
        "engine-mcsf",
        requests=2,
        startup_timeout_s=300,
        scheduling_policy="priority",
    )
    outcome = execute_run(parse_config(config), tmp_path / "results")
    assert outcome.summary.status == "failed"
    assert "engine-mcsf orders vLLM's waiting queue itself" in (outcome.error or ""), outcome.error
    assert "--scheduling-policy fcfs" in outcome.error
    leftover = subprocess.run(["pgrep", "-f", f"--model {tiny_model}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
