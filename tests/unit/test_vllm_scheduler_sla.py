"""engine-dynamic-sla (000 Alg. 2 inside vLLM): the engine's step timing and window moves on
hand-computed step times, the parameters shared with the client-side dynamic-sla, and one function
moving the window for both twins, without vLLM; the real CPU vLLM running it through execute_run
(needs ``SCHEDLAB_VLLM_PYTHON``, under the CPU lock).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from pydantic import ValidationError

from runners.registry import in_engine_policy
from runners.schedulers import dynamic_batching, dynamic_batching_core
from runners.schedulers.dynamic_batching import DynamicSLAParams
from runners.schedulers.dynamic_batching_core import (
    SLAWindow,
    StepLatencyMeter,
    StepSLAController,
    sla_batch_size,
    sla_window_update,
)
from runners.schedulers.vllm import (
    EngineDynamicSLAParams,
    SLAWindowParams,
    load_params,
)
from tests.real_vllm import needs_vllm, run_to_completion, vllm_run_config

ENGINE_CLASS = "runners.schedulers.vllm.dynamic_mem.DynamicSLAScheduler"


# --- without vLLM ------------------------------------------------------------------------------


def test_registered_with_its_client_twin():
    assert in_engine_policy("engine-dynamic-sla").engine_class == ENGINE_CLASS
    assert in_engine_policy("engine-dynamic-sla").twin == "dynamic-sla"
    assert in_engine_policy("engine-dynamic-sla").engine_params is EngineDynamicSLAParams
    from runners.schedulers.in_engine import EngineDynamicSLAPolicy

    assert EngineDynamicSLAPolicy.name == "engine-dynamic-sla" and EngineDynamicSLAPolicy.twin == "dynamic-sla"
    assert EngineDynamicSLAPolicy.in_engine and EngineDynamicSLAPolicy.Params.max_in_flight is None


def test_the_step_meter_times_decode_steps_only_by_hand():
    meter = StepLatencyMeter(samples=3)
    meter.scheduled("prefill", 0.000, batch=4, decoding=0)  # prefills alone: no decode latency, not timed
    assert meter.finished("prefill", 0.050) is None and meter.steps == 0
    meter.scheduled("b", 0.100, batch=4, decoding=4)
    assert meter.finished("b", 0.120) == pytest.approx((0.020, 4.0))
    # 0.120 -> 0.300 the engine was idle; a step is timed from its own scheduling, so the gap is not in tau
    meter.scheduled("c", 0.300, batch=6, decoding=4)
    assert meter.finished("c", 0.340) == pytest.approx(((0.020 + 0.040) / 2, 5.0))
    # a pipeline: e is scheduled before d's output is back; each step is timed from its own scheduling
    meter.scheduled("d", 0.400, batch=8, decoding=8)
    meter.scheduled("e", 0.410, batch=8, decoding=8)
    assert meter.finished("d", 0.450) == pytest.approx(((0.020 + 0.040 + 0.050) / 3, 6.0))
    # the last 3: 40, 50, 80 ms at 6, 8, 8 running
    assert meter.finished("e", 0.490) == pytest.approx(((0.040 + 0.050 + 0.080) / 3, 22 / 3))
    assert meter.finished("e", 0.600) is None and meter.finished("never", 0.600) is None
    assert meter.steps == 4
    # an output that never comes back is dropped oldest first
    small = StepLatencyMeter(samples=2, max_pending=2)
    for key, started in (("x", 0.0), ("y", 0.1), ("z", 0.2)):
        small.scheduled(key, started, batch=1, decoding=1)
    assert small.finished("x", 0.3) is None and small.finished("y", 0.3) == pytest.approx((0.2, 1.0))


def test_the_window_moves_with_the_measured_steps_by_hand():
    # D_SLA 30 ms, eps 5 ms, alpha 2, delta 2, B_min 1, B_max 16, tau over the last 3 decode steps
    sla = StepSLAController(d_sla_s=0.030, eps_s=0.005, alpha=2, delta=2, b_min=1, b_max=16, samples=3)
    assert sla.window == SLAWindow(1, 16) and sla.limit(0) == 8 and sla.tau_s is None
    sla.step_scheduled("p", 0.000, batch=4, decoding=0)
    assert not sla.step_finished("p", 0.060) and sla.window == SLAWindow(1, 16)  # a prefill step moves nothing
    # tau 20 ms < 25 ms, b 4: b_low = min(4, 16 - 2) = 4, b_high = min(16 + 2, 16) = 16; limit 10
    sla.step_scheduled("b", 0.100, batch=4, decoding=4)
    assert sla.step_finished("b", 0.120)
    assert sla.window == SLAWindow(4, 16) and sla.limit(4) == 10
    # tau (20 + 40) / 2 = 30 ms, on target, b 5: [5 - 1, 5 + 1] = [4, 6]; limit 5
    sla.step_scheduled("c", 0.300, batch=6, decoding=4)
    assert sla.step_finished("c", 0.340)
    assert sla.window == SLAWindow(4, 6) and sla.limit(4) == 5
    # tau (20 + 40 + 50) / 3 = 36.7 ms > 35 ms, b 6: b_high = max(6, 4 + 2) = 6, b_low = max(4 - 2, 1) = 2;
    # limit floor(8 / 2) = 4, never below the 8 decoding (vLLM would not preempt them for it)
    sla.step_scheduled("d", 0.400, batch=8, decoding=8)
    assert sla.step_finished("d", 0.450)
    assert sla.window == SLAWindow(2, 6) and sla.limit(3) == 4 and sla.limit(8) == 8
    # tau (40 + 50 + 80) / 3 = 56.7 ms, b 7.33 -> 7: b_high = max(7, 2 + 2) = 7, b_low = max(2 - 2, 1) = 1
    sla.step_scheduled("e", 0.500, batch=8, decoding=8)
    assert sla.step_finished("e", 0.580)
    assert sla.window == SLAWindow(1, 7) and sla.limit(0) == 4
    assert sla.tau_s == pytest.approx(0.170 / 3) and sla.batch_mean == pytest.approx(22 / 3)


def test_the_client_and_the_engine_move_the_window_with_one_function(monkeypatch):
    assert dynamic_batching.sla_window_update is dynamic_batching_core.sla_window_update
    assert dynamic_batching.sla_batch_size is dynamic_batching_core.sla_batch_size
    assert dynamic_batching.RecentMeans is dynamic_batching_core.RecentMeans
    calls = []

    def recorded(*args):
        calls.append(args)
        return sla_window_update(*args)

    monkeypatch.setattr(dynamic_batching_core, "sla_window_update", recorded)
    sla = StepSLAController(d_sla_s=0.030, eps_s=0.005, alpha=2, delta=2, b_min=1, b_max=16, samples=3)
    sla.step_scheduled(1, 0.0, batch=5, decoding=5)
    sla.step_finished(1, 0.1)
    assert calls == [(SLAWindow(1, 16), pytest.approx(0.1), 5.0, 0.030, 0.005, 2, 2, 1, 16)]
    assert sla_batch_size(SLAWindow(2, 7), 0, 16) == 4 and sla_batch_size(SLAWindow(2, 7), 6, 5) == 5


def test_the_window_parameters_are_one_definition_for_both_twins():
    shared = set(SLAWindowParams.model_fields)
    assert shared == {"d_sla_s", "eps_s", "alpha", "delta", "b_min", "memory_cap"}
    for name in shared:
        client, engine = DynamicSLAParams.model_fields[name], EngineDynamicSLAParams.model_fields[name]
        assert (client.default, client.description, client.metadata) == (
            engine.default,
            engine.description,
            engine.metadata,
        ), name
    assert issubclass(DynamicSLAParams, SLAWindowParams) and issubclass(EngineDynamicSLAParams, SLAWindowParams)
    # the engine measures tau itself: no latency_signal / window; samples counts engine steps
    assert "latency_signal" not in EngineDynamicSLAParams.model_fields
    samples = EngineDynamicSLAParams.model_fields["samples"]
    assert samples.default == 16 and "steps" in samples.description


def test_engine_parameters_outside_the_papers_meaning_are_refused(tmp_path):
    with pytest.raises(ValidationError, match="eps_s\n  must be smaller than d_sla_s"):
        EngineDynamicSLAParams(d_sla_s=0.01, eps_s=0.01)
    with pytest.raises(ValidationError, match=r"alpha\n  must be smaller than the window B_max - B_min = 16 - 1 = 15"):
        EngineDynamicSLAParams(b_max=16, alpha=15)
    with pytest.raises(ValidationError, match=r"b_min\n  must be at most B_max \(16\)"):
        EngineDynamicSLAParams(b_max=16, b_min=17)
    with pytest.raises(ValidationError, match="samples"):
        EngineDynamicSLAParams(samples=0)
    path = tmp_path / "params.json"
    path.write_text(json.dumps({"d_sla_s": 0.002, "eps_s": 0.0005, "memory_cap": False, "samples": 8}))
    params = load_params(EngineDynamicSLAParams, {"SCHEDLAB_ENGINE_PARAMS": str(path)})
    assert (params.d_sla_s, params.eps_s, params.memory_cap, params.samples, params.eps_m) == (
        0.002,
        0.0005,
        False,
        8,
        0.05,
    )
    path.write_text(json.dumps({"d_sla_s": 0.002, "latency_signal": "tpot"}))  # a client-only field
    with pytest.raises(ValueError, match="latency_signal"):
        load_params(EngineDynamicSLAParams, {"SCHEDLAB_ENGINE_PARAMS": str(path)})


# --- the real CPU vLLM ---------------------------------------------------------------------------


@needs_vllm
def test_dynamic_sla_in_the_real_cpu_vllm(tiny_model, tmp_path):
    # The tiny model's CPU steps take about 2 to 3 ms (a decisions file of engine-dynamic-mem, every
    # step recorded: ~2.1 ms at 1-4 running, ~2.6 ms at 8, ~3 ms at 12). A 1 ms target is below every
    # step, so it binds whatever the machine's load (a busier machine only makes steps longer): the
    # window must close in from B_max 64. memory_cap off, so the limit is Alg. 2's alone.
    params = {"d_sla_s": 0.001, "eps_s": 0.0002, "alpha": 2, "delta": 2, "b_min": 1, "samples": 4, "memory_cap": False}
    config = vllm_run_config(
        tiny_model,
        "engine-dynamic-sla",
        "engine-dynamic-sla",
        params,
        {"SCHEDLAB_ENGINE_DECISION_INTERVAL_S": "0"},
        num_gpu_blocks_override=None,
    )
    run, decisions, log = run_to_completion(config, tmp_path / "results", ENGINE_CLASS)
    written = json.loads((run.folder / "engine-scheduler-params.json").read_text())
    assert {k: written[k] for k in params} == params
    assert "schedlab in-engine scheduler DynamicSLAScheduler (vLLM 0.32" in log and ", sync)" in log

    assert decisions and all(d["b_max"] == 64 and d["memory_limit"] is None for d in decisions)
    timed = [d for d in decisions if d["tau_s"] is not None]
    assert timed and all(d["tau_s"] > 0 and d["batch_mean"] >= 1 for d in timed)
    # every step with requests left is recorded (interval 0): where two consecutive decisions are one
    # timed step apart, the window moved once, by the shared function on the tau and batch recorded
    moves = 0
    for before, after in zip(decisions, decisions[1:]):
        window = SLAWindow(after["window_low"], after["window_high"])
        if after["timed_steps"] == before["timed_steps"]:
            assert window == SLAWindow(before["window_low"], before["window_high"])
        if after["timed_steps"] != before["timed_steps"] + 1:
            continue
        assert window == sla_window_update(
            SLAWindow(before["window_low"], before["window_high"]),
            after["tau_s"],
            after["batch_mean"],
            0.001,
            0.0002,
            2,
            2,
            1,
            64,
        ), (before, after)
        moves += 1
    assert moves >= 20
    for d in decisions:  # the limit applied is the window's middle, never below the decoding requests
        assert d["sla_limit"] == sla_batch_size(SLAWindow(d["window_low"], d["window_high"]), d["decoding"], 64)
        assert d["limit"] == max(1, d["sla_limit"])
    # the target binds: the window closes in from [1, 64], and the limit moves well below B_max
    assert decisions[0]["window_high"] == 64 and min(d["window_high"] for d in decisions) < 64
    limits = {d["limit"] for d in decisions}
    assert len(limits) > 1 and min(limits) < 20
    assert any(d["held_back"] > 0 for d in decisions)
    assert all(d["running"] <= d["limit"] for d in decisions if d["admitted"] > 0)
    leftover = subprocess.run(["pgrep", "-f", f"--model {tiny_model}"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
