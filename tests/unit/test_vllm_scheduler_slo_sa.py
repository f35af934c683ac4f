"""engine-slo-sa (004's SA plan inside vLLM): the plan over the engine's waiting requests by hand
and against slo-sa's own path, the launcher's parameters file, the client's per-request engine
arguments without vLLM; the real CPU vLLM serving in plan order (needs ``SCHEDLAB_VLLM_PYTHON``,
under the CPU lock)."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from runners.engines.latency_model import LatencyModel, PhaseCoefficients
from runners.errors import ConfigError
from runners.registry import SCHEDULERS, in_engine_policy, make_policy
from runners.schedulers.base import InstanceInfo
from runners.schedulers.slo_aware import (
    SLOAwareParams,
    SLOPlanParams,
    plan_annealing,
    plan_exhaustive,
    plan_inputs,
    slot_wait_s,
)
from runners.schedulers.vllm import (
    E2E_SLO_ARG,
    PREDICTED_OUTPUT_ARG,
    TPOT_SLO_ARG,
    TTFT_SLO_ARG,
    EngineDynamicMemoryParams,
    EngineSLOAwareParams,
    launch_settings,
    load_params,
)
from runners.schedulers.vllm.slo_sa_plan import (
    RunningRequest,
    WaitingRequest,
    plan_waiting,
    remaining_s,
    request_args,
)
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO
from tests.real_vllm import needs_vllm, vllm_run_config

ENGINE_CLASS = "runners.schedulers.vllm.slo_sa.SLOAwareScheduler"

# prefill 0.1 s and decode 0.01 s per step whatever the batch: a request of n output tokens runs
# 0.1 + 0.01 (n - 1) seconds
FLAT = LatencyModel(
    prefill=PhaseCoefficients(alpha=0, beta=0, gamma=0, delta=0.1),
    decode=PhaseCoefficients(alpha=0, beta=0, gamma=0, delta=0.01),
)


def three_waiting(a_ttft: float = 0.15) -> list[WaitingRequest]:
    # A: 101 tokens, 1.1 s, TTFT limit 0.15 s; B: 11 tokens, 0.2 s; C: 51 tokens, 0.6 s; no other limit
    return [
        WaitingRequest("A", 10, 101, 0.0, ttft_limit=a_ttft),
        WaitingRequest("B", 10, 11, 0.0),
        WaitingRequest("C", 10, 51, 0.0),
    ]


# --- without vLLM ------------------------------------------------------------------------------


def test_registered_as_an_in_engine_twin_of_slo_sa():
    assert in_engine_policy("engine-slo-sa").engine_class == ENGINE_CLASS
    assert in_engine_policy("engine-slo-sa").twin == "slo-sa"
    assert in_engine_policy("engine-slo-sa").engine_params is EngineSLOAwareParams
    policy = SCHEDULERS["engine-slo-sa"]
    assert policy.in_engine and policy.twin == "slo-sa"
    # the plan's settings are slo-sa's own fields (one definition, SLOPlanParams)
    for model in (EngineSLOAwareParams, SLOAwareParams, policy.Params):
        assert issubclass(model, SLOPlanParams)
    # the latency model is the launcher's to fill, not the user's
    assert "prefill" not in policy.Params.model_fields


def test_the_best_order_of_three_by_hand():
    # max_batch 1, one after another. A's TTFT limit holds only if A goes first.
    #   B, C, A (shortest first): E2E 0.2 + 0.8 + 1.9 = 2.9, A misses (TTFT 0.9): G = 2 / 2.9 = 0.6897
    #   A, B, C: E2E 1.1 + 1.3 + 1.9 = 4.3, all met: G = 3 / 4.3 = 0.69767 (the best of the six)
    params = EngineSLOAwareParams(max_batch=1)
    plan = plan_waiting(three_waiting(), [], FLAT, params, 1)
    assert plan.order == ["A", "B", "C"] and plan.sizes == [1, 1, 1] and plan.batches == 3
    assert plan.predicted_g == pytest.approx(3 / 4.3) and plan.start_s == 0.0
    # without A's TTFT limit, shortest first wins: G = 3 / 2.9
    loose = plan_waiting(three_waiting(a_ttft=math.inf), [], FLAT, params, 1)
    assert loose.order == ["B", "C", "A"] and loose.predicted_g == pytest.approx(3 / 2.9)


def test_a_running_request_moves_the_start_and_flips_the_order():
    # one running request, decoding: 1 of 21 predicted tokens done, 20 steps of 0.01 s left
    running = RunningRequest(prompt_tokens=10, computed_tokens=10, produced_tokens=1, predicted_output=21)
    assert remaining_s(FLAT, 1, running) == pytest.approx(0.2)
    # not yet prefilled: its prefill (0.1 s) then 20 decode steps
    assert remaining_s(FLAT, 1, RunningRequest(10, 0, 0, 21)) == pytest.approx(0.3)
    # the single slot frees at 0.2 s: A's TTFT would be at least 0.3 > 0.15, so it misses in every
    # order and shortest first is best: E2E 0.4 + 1.0 + 2.1 = 3.5, G = 2 / 3.5 (A first: 2 / 4.9)
    plan = plan_waiting(three_waiting(), [running], FLAT, EngineSLOAwareParams(max_batch=1), 1)
    assert plan.start_s == pytest.approx(0.2)
    assert plan.order == ["B", "C", "A"] and plan.predicted_g == pytest.approx(2 / 3.5)
    # two slots: one is free now, the plan starts at once
    assert plan_waiting(three_waiting(), [running], FLAT, EngineSLOAwareParams(max_batch=2), 2).start_s == 0.0
    assert slot_wait_s([0.2, 0.5, 0.9], 2) == 0.5 and slot_wait_s([0.2], 2) == 0.0


def test_waiting_time_counts_from_arrival():
    # as the hand case, but B has waited 1 s already and must finish within 1.5 s of its arrival:
    #   A, B, C: B ends at 1 + 1.1 + 0.2 = 2.3 > 1.5, misses: G = 2 / (1.1 + 2.3 + 1.9) = 0.377
    #   B, C, A: B 1.2 met, C 0.8 met, A misses its TTFT (0.9): G = 2 / (1.2 + 0.8 + 1.9) = 0.5128, the best
    waiting = three_waiting()
    waiting[1] = WaitingRequest("B", 10, 11, 1.0, e2e_limit=1.5)
    plan = plan_waiting(waiting, [], FLAT, EngineSLOAwareParams(max_batch=1), 1)
    assert plan.order == ["B", "C", "A"] and plan.predicted_g == pytest.approx(2 / 3.9)
    # the same limit without the wait: A, B, C meets all three again (3 / 4.3)
    waiting[1] = WaitingRequest("B", 10, 11, 0.0, e2e_limit=1.5)
    plan = plan_waiting(waiting, [], FLAT, EngineSLOAwareParams(max_batch=1), 1)
    assert plan.order == ["A", "B", "C"] and plan.predicted_g == pytest.approx(3 / 4.3)


def test_the_engine_plans_with_slo_sas_own_path():
    """The same three requests through slo-sa's plan_inputs (workload Requests) and exhaustive
    search give the engine's plan: one function, two callers."""
    requests = [
        Request("A", "chat", "", 10, 101, 0.0, TaskSLO(ttft_s=0.15)),
        Request("B", "chat", "", 10, 11, 0.0, TaskSLO(e2e_s=100.0)),
        Request("C", "chat", "", 10, 51, 0.0, TaskSLO(e2e_s=100.0)),
    ]
    from runners.schedulers.predictors import LatencyPredictor

    inputs = plan_inputs(requests, [101, 11, 51], LatencyPredictor(FLAT), 1, 0.0, 0.0)
    best = plan_exhaustive(inputs, 1)
    annealed = plan_annealing(inputs, SLOAwareParams(max_batch=1))
    waiting = [
        WaitingRequest(
            r.request_id, 10, r.target_output_tokens, 0.0, r.slo.ttft_s or math.inf, math.inf, r.slo.e2e_s or math.inf
        )
        for r in requests
    ]
    engine = plan_waiting(waiting, [], FLAT, EngineSLOAwareParams(max_batch=1), 1)
    assert [requests[i].request_id for i in best[0]] == engine.order == ["A", "B", "C"]
    assert engine.predicted_g == pytest.approx(best[3]) == pytest.approx(annealed[3])
    # batches of up to 3: the engine and slo-sa still agree with the exhaustive optimum
    inputs3 = plan_inputs(requests, [101, 11, 51], LatencyPredictor(FLAT), 3, 0.0, 0.0)
    engine3 = plan_waiting(waiting, [], FLAT, EngineSLOAwareParams(max_batch=3), 3)
    assert engine3.predicted_g == pytest.approx(plan_exhaustive(inputs3, 3)[3])
    assert np.isclose(plan_annealing(inputs3, SLOAwareParams(max_batch=3))[3], engine3.predicted_g)


def test_request_args_read_from_extra_args():
    assert request_args({PREDICTED_OUTPUT_ARG: 37.4, TTFT_SLO_ARG: 0.5, TPOT_SLO_ARG: 0.05, E2E_SLO_ARG: 9}, 200) == (
        37,
        0.5,
        0.05,
        9.0,
    )
    # nothing sent: max_tokens, no limits; nonsense (negative, text, a bool) counts as not sent
    assert request_args(None, 200) == (200, math.inf, math.inf, math.inf)
    assert request_args({PREDICTED_OUTPUT_ARG: -3, TTFT_SLO_ARG: "soon", TPOT_SLO_ARG: True}, 64) == (
        64,
        math.inf,
        math.inf,
        math.inf,
    )


def test_the_launcher_writes_the_latency_model_and_refuses_without_one(tmp_path):
    policy = make_policy("engine-slo-sa", {"max_batch": 4, "seed": 3, "output_predictor": "oracle"})
    cls, env = launch_settings(in_engine_policy("engine-slo-sa"), policy.params, tmp_path / "a", FLAT)
    assert cls == ENGINE_CLASS
    written = json.loads(Path(env["SCHEDLAB_ENGINE_PARAMS"]).read_text())
    assert written["max_batch"] == 4 and written["seed"] == 3 and "output_predictor" not in written
    assert written["prefill"]["delta"] == 0.1 and written["decode"]["delta"] == 0.01
    loaded = load_params(EngineSLOAwareParams, env)
    assert loaded.prefill == FLAT.prefill and loaded.decode == FLAT.decode and loaded.max_batch == 4
    with pytest.raises(ConfigError, match="engine.profile"):
        launch_settings(in_engine_policy("engine-slo-sa"), policy.params, tmp_path / "b", None)
    with pytest.raises(ConfigError, match="engine.scheduling_policy.*'fcfs'"):
        launch_settings(in_engine_policy("engine-slo-sa"), policy.params, tmp_path / "c", FLAT, "priority")
    # engine-dynamic-mem's file is as before: its own fields, no latency model
    dynamic = make_policy("engine-dynamic-mem", {"eps_m": 0.1})
    _, env = launch_settings(in_engine_policy("engine-dynamic-mem"), dynamic.params, tmp_path / "d", FLAT)
    written = json.loads(Path(env["SCHEDLAB_ENGINE_PARAMS"]).read_text())
    assert written == EngineDynamicMemoryParams(eps_m=0.1).model_dump(mode="json")
    # a half model is refused with the field named
    with pytest.raises(ValueError, match="decode"):
        EngineSLOAwareParams(prefill=FLAT.prefill)


def test_the_client_sends_each_request_with_its_prediction_and_slos():
    policy = make_policy("engine-slo-sa", {"output_predictor": "oracle"})
    requests = [
        Request("r0", "chat", "", 50, 120, 0.0, TaskSLO(ttft_s=0.5, tpot_s=0.05)),
        Request("r1", "code", "", 80, 40, 0.0, TaskSLO(e2e_s=3.0)),
    ]
    policy.on_workload(requests)
    policy.start([InstanceInfo(0, 3072, 128, 64, FLAT)], 0.0)
    for request in requests:
        policy.on_arrival(request, 0.0)
    dispatches = policy.decide(0.0).dispatches
    assert [d.request_id for d in dispatches] == ["r0", "r1"]  # on arrival, no cap: the engine orders
    assert dispatches[0].engine_args == {PREDICTED_OUTPUT_ARG: 120, TTFT_SLO_ARG: 0.5, TPOT_SLO_ARG: 0.05}
    assert dispatches[1].engine_args == {PREDICTED_OUTPUT_ARG: 40, E2E_SLO_ARG: 3.0}
    # gaussian (slo-sa's default): the prediction of the task's Gaussian warmed from the calibration
    # sample (one chat length, 120: std 0), a whole number
    gaussian = make_policy("engine-slo-sa")
    gaussian.on_workload(requests)
    gaussian.on_calibration({"chat": [120]})
    gaussian.start([InstanceInfo(0, 3072, 128, 64, FLAT)], 0.0)
    gaussian.on_arrival(requests[0], 0.0)
    assert gaussian.decide(0.0).dispatches[0].engine_args[PREDICTED_OUTPUT_ARG] == 120  # one chat request: std 0


# --- the real CPU vLLM ---------------------------------------------------------------------------


def tiny_profile(folder: Path) -> Path:
    """A phase-model profile for the tiny CPU model (hand-set coefficients, seconds: the plan
    needs a latency model; these numbers are not a measurement). Alike in shape to the fuzz
    seed's profile_data (tests/fuzzing/seeds.py), a different profile: kept apart."""
    path = folder / "tiny-profile.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "tiny-hand",
                "source": "hand-set for the engine-slo-sa test",
                "prefill": {"alpha": 1e-6, "beta": 1e-3, "gamma": 1e-5, "delta": 0.004},
                "decode": {"alpha": 1e-7, "beta": 2e-4, "gamma": 1e-6, "delta": 0.003},
                "kv_capacity_tokens": 2944,
                "block_size": 128,
                "max_num_seqs": 64,
                "max_num_batched_tokens": 2048,
            }
        )
    )
    return path


@needs_vllm
def test_slo_sa_in_the_real_cpu_vllm_serves_in_plan_order(tiny_model, tmp_path):
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config
    from runners.store.result_store import load_run

    config = vllm_run_config(
        tiny_model,
        "engine-slo-sa",
        "engine-slo-sa",
        {"max_batch": 4},
        {"SCHEDLAB_ENGINE_DECISION_INTERVAL_S": "0"},
        profile=str(tiny_profile(tmp_path)),
    )
    execute_run(parse_config(config), tmp_path / "results")
    run = load_run(tmp_path / "results", "engine-slo-sa")
    assert run.summary.status == "done", run.summary.error
    requests = run.requests
    assert len(requests) == 20 and requests["error"].isna().all()
    assert (requests["output_tokens"] == requests["target_output_tokens"]).all()
    written = json.loads((run.folder / "engine-scheduler-params.json").read_text())
    assert written["max_batch"] == 4 and written["decode"]["delta"] == 0.003
    command = json.loads((run.folder / "engine.json").read_text())["instances"][0]["command"]
    assert command[command.index("--scheduler-cls") + 1] == ENGINE_CLASS
    log = (run.folder / "server-0.log").read_text(errors="replace")
    assert "schedlab in-engine scheduler SLOAwareScheduler (vLLM 0.32" in log and ", sync)" in log
    assert "engine-slo-sa: max_batch 4, annealer compiled in" in log  # the warm-up plan at start-up

    decisions = [json.loads(line) for line in (run.folder / "engine-decisions-0.jsonl").read_text().splitlines()]
    planned = [d for d in decisions if d["planned"]]
    assert planned and decisions[-1]["plans"] >= len(planned)
    for d in planned:  # (the engine also plans the driver's warm-up requests, sent before the run's 20)
        assert d["plan_size"] >= 1 and d["plan_ms"] >= 0 and d["predicted_g"] > 0
        assert math.ceil(d["plan_size"] / 4) <= d["batches"] <= d["plan_size"]
        assert len(d["plan_head"]) == min(d["plan_size"], 32)
    # the running limit is the plan's batch cap, and the engine admits no one past it
    assert all(d["limit"] == 4 and d["running"] <= 4 for d in decisions)
    # served in plan order: every step's admissions are the head of the latest plan, in order
    admitted = [d for d in decisions if d["admitted_ids"]]
    assert sum(len(d["admitted_ids"]) for d in admitted) >= 20
    for d in admitted:
        assert d["admitted_ids"] == d["plan_head"][: len(d["admitted_ids"])], d
    # every request was planned: its engine id is in some plan's head
    planned_ids = {rid for d in planned for rid in d["plan_head"]}
    assert {rid for d in admitted for rid in d["admitted_ids"]} <= planned_ids
    assert decisions[-1]["plan_ms_total"] >= sum(d["plan_ms"] for d in planned) - 1e-3 * len(planned)
    leftover = subprocess.run(["pgrep", "-f", f"--model {tiny_model}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
