"""Dynamic batch size (000): Alg. 1's CLT memory bound, Alg. 2's window moves, whole runs."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError
from scipy.stats import norm

from runners.drivers.virtual_time import VirtualTimeDriver
from runners.engines.latency_model import LatencyModel, PhaseCoefficients
from runners.engines.simulator import SimulatedInstance
from runners.errors import ConfigError
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.schedulers.base import Completion, InstanceInfo, TelemetrySample
from runners.schedulers.dynamic_batching import (
    DynamicMemoryParams,
    DynamicMemoryPolicy,
    DynamicSLAParams,
    DynamicSLAPolicy,
    SLAWindow,
    block_footprint,
    clamp_batch,
    default_alpha,
    memory_batch_size,
    mixture_moments,
    resolve_b_max,
    sla_window_update,
)
from runners.schedulers.fcfs import FCFSPolicy
from runners.schedulers.predictors import RunningMoments
from runners.store.recording import RunRecorder
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO


def test_memory_batch_size_by_hand():
    # eta = 100,000 tokens, per-request mean 500 and std 300, eps_M = 0.05:
    # theta = 1.64485; b* = ((sqrt((300 theta)^2 + 4 * 500 * 1e5) - 300 theta) / 1000)^2 = 186.52
    size, buffer = memory_batch_size(100_000, 500, 300, 0.05)
    theta = norm.ppf(0.95)
    b_star = ((math.sqrt((300 * theta) ** 2 + 4 * 500 * 100_000) - 300 * theta) / 1000) ** 2
    assert b_star == pytest.approx(186.52, abs=0.01)
    assert buffer == pytest.approx(theta * 300 * math.sqrt(b_star)) == pytest.approx(6739.27, abs=0.01)
    assert size == 186
    # the bound holds: P(S > eta) at b = 186 is at most eps_M
    assert 1 - norm.cdf((100_000 - 186 * 500) / (300 * math.sqrt(186))) <= 0.05
    assert memory_batch_size(100_000, 500, 0, 0.05)[0] == 200  # no variance: no buffer


def test_sla_window_moves():
    # B_min 1, B_max 256, alpha 8, delta 2, D_SLA 50 ms, eps 5 ms, 40 requests decoding
    args = dict(d_sla_s=0.050, eps_s=0.005, alpha=8, delta=2, b_min=1, b_max=256)
    window = SLAWindow(1, 256)
    window = sla_window_update(window, 0.060, 120, **args)  # too slow: the top comes down to b
    assert window == SLAWindow(1, 120) and clamp_batch((window.low + window.high) // 2, 40, 256) == 60
    window = sla_window_update(window, 0.030, 60, **args)  # fast: the bottom comes up to b
    assert window == SLAWindow(60, 122) and (window.low + window.high) // 2 == 91
    window = sla_window_update(window, 0.050, 91, **args)  # on target: a window of alpha around b
    assert window == SLAWindow(87, 95) and (window.low + window.high) // 2 == 91
    assert clamp_batch(10, 40, 256) == 40 and clamp_batch(300, 40, 256) == 256


def run(results, scheduler, **engine):
    config = {
        "workload": {"requests": 300, "seed": 5, "arrival": {"process": "all-at-once"}},
        "engine": {"kv_capacity_tokens": 60_000, **engine},
        "scheduler": scheduler,
    }
    return execute_run(parse_config(config), results).summary


def test_dynamic_mem_avoids_preemption_that_a_bigger_static_cap_causes(results_dir):
    greedy = run(results_dir, {"name": "fcfs"})
    dynamic = run(results_dir, {"name": "dynamic-mem"})
    assert greedy.preemptions > 0
    assert dynamic.preemptions < greedy.preemptions
    assert dynamic.completed == 300


def test_dynamic_sla_keeps_tpot_near_its_target(results_dir):
    loose = run(results_dir, {"name": "fcfs"}, kv_capacity_tokens=800_000)
    sla = run(results_dir, {"name": "dynamic-sla", "params": {"d_sla_s": 0.030}}, kv_capacity_tokens=800_000)
    assert loose.tpot_s.mean > 0.035
    assert sla.tpot_s.median < loose.tpot_s.median
    assert sla.completed == 300


# -- where Alg. 1's numbers come from: warm prior, blocks, B_max ---------------------------------
def request(rid: str, output: int, task: str = "chat", prompt: int = 100) -> Request:
    return Request(rid, task, "x", prompt, output, 0.0, TaskSLO(tpot_s=1.0))


def started(policy, kv=16_000, block=16, slots=256, requests=(), calibration=None):
    policy.on_workload(list(requests))
    policy.on_calibration(calibration or {})
    policy.start([InstanceInfo(0, kv, block, slots)], 0.0)
    for r in requests:
        policy.on_arrival(r, 0.0)
    return policy


def test_block_footprint_and_task_mixture_by_hand():
    # a request of mean 500 tokens, variance 90,000, in blocks of 16: + 7.5 tokens, + (256 - 1) / 12
    assert block_footprint(500, 90_000, 16) == (507.5, pytest.approx(90_021.25))
    assert block_footprint(500, 90_000, None) == (500, 90_000)
    # 3 chat (mean 100, var 400) and 1 code (mean 300, var 900): mean 150,
    # variance 0.75 (400 + 100^2) + 0.25 (900 + 300^2) - 150^2 = 8,025
    moments = {"chat": RunningMoments(3, 100.0, 800.0), "code": RunningMoments(3, 300.0, 1800.0)}
    assert mixture_moments({"chat": 3, "code": 1}, moments, 256) == (150.0, pytest.approx(8025.0))
    assert mixture_moments({"new": 2}, moments, 256) == (256.0, 0.0)  # a task with no prior: the fallback


def test_warm_prior_not_the_first_finished_request():
    # four requests at once, 100-token prompts, outputs 5, 295, 500, 800; the calibration sample
    # (outside the run) has the same lengths: mean 400, sample variance 337,050 / 3 = 112,350;
    # KV 16,000 tokens in blocks of 16; eps_M 0.05
    workload = [request(f"r{i}", out) for i, out in enumerate((5, 295, 500, 800))]
    policy = started(DynamicMemoryPolicy(), requests=workload, calibration={"chat": [5, 295, 500, 800]})
    assert policy.expected_output() == (400.0, pytest.approx(112_350.0))
    # per request: mean 100 + 400 + 7.5 = 507.5 tokens, std sqrt(112,350 + 21.25) = 335.22:
    # b* = 25.99, L0 = theta sigma sqrt(b*) = 2,810.9, b = floor((16,000 - 2,810.9) / 507.5) = 25
    assert policy.memory_cap(0) == 25
    policy.decide(0.0)
    policy.on_first_token("r0", 0, 0.5)
    policy.on_completion(Completion("r0", 0, 5, 5, True), 1.0)
    # the 5-token request is pooled into the prior (5, 5, 295, 500, 800: mean 321, variance 115,467.5),
    # not taken alone (the old rule: E[l_out] = 5, no variance, cap floor(16,000 / 105) = 152)
    assert policy.expected_output() == (321.0, pytest.approx(115_467.5))
    assert policy.memory_cap(0) == 30
    cold = started(DynamicMemoryPolicy(DynamicMemoryParams(output_prior="cold")), requests=workload)
    assert cold.expected_output() == (256.0, 0.0)  # prior_output_tokens until a request finishes


def test_b_max_follows_the_engine_and_is_refused_above_it():
    info = InstanceInfo(0, 100_000, 16, 2048)
    assert resolve_b_max(None, info) == 2048  # an engine configured for 2,048 running requests
    assert resolve_b_max(None, InstanceInfo(0, 100_000, 16, None)) == 256  # unknown: vLLM's default
    assert resolve_b_max(512, InstanceInfo(0, 100_000, 16, None)) == 512
    assert resolve_b_max(128, InstanceInfo(0, 100_000, 16, 256)) == 128
    with pytest.raises(ConfigError, match=r"scheduler.params.b_max: 512 is more than .* \(max_num_seqs 256\)"):
        resolve_b_max(512, InstanceInfo(0, 100_000, 16, 256))
    policy = started(DynamicMemoryPolicy(), kv=10_000_000, slots=2048, requests=[request("a", 100)])
    policy.decide(0.0)
    assert policy.b_max[0] == 2048 and policy.cap[0] == 2048  # the memory bound is far above: B_max caps


def test_parameters_outside_the_papers_meaning_are_refused():
    with pytest.raises(ValidationError, match="eps_s\n  must be smaller than d_sla_s"):
        DynamicSLAParams(d_sla_s=0.05, eps_s=0.05)
    with pytest.raises(ValidationError, match=r"alpha\n  must be smaller than the window B_max - B_min = 16 - 1 = 15"):
        DynamicSLAParams(b_max=16, alpha=15)
    with pytest.raises(ValidationError, match="b_min\n  must be at most B_max"):
        DynamicSLAParams(b_max=16, b_min=17)
    for eps in (0.0, 1.0):
        with pytest.raises(ValidationError, match="eps_m"):
            DynamicMemoryParams(eps_m=eps)
    with pytest.raises(ValidationError, match="output_history\n  output_prior 'history' needs"):
        DynamicMemoryParams(output_prior="history")
    # alpha against B_max from the engine: checked at start
    with pytest.raises(ConfigError, match=r"scheduler.params.alpha: must be smaller than the window .* = 15"):
        started(DynamicSLAPolicy(DynamicSLAParams(alpha=15)), slots=16)
    with pytest.raises(ConfigError, match=r"scheduler.params.b_min: must be at most B_max \(16\)"):
        started(DynamicSLAPolicy(DynamicSLAParams(b_min=20)), slots=16)


def test_alpha_scaled_to_the_window():
    assert default_alpha(1, 256) == 8 and default_alpha(1, 2048) == 64
    assert default_alpha(1, 16) == 2  # at least 2: a window of 1 either side of b on target
    assert default_alpha(1, 2) == 1 and default_alpha(5, 6) == 1  # never wider than the window
    # B_max 16, D_SLA 50 ms, latency far under: the window climbs to [14, 16], cap 15
    # (with alpha 8 it could reach no more than [8, 16], cap 12)
    window = SLAWindow(1, 16)
    for _ in range(5):
        window = sla_window_update(window, 0.020, 16, 0.050, 0.005, 2, 2, 1, 16)
    assert window == SLAWindow(14, 16) and (window.low + window.high) // 2 == 15
    assert sla_window_update(SLAWindow(1, 16), 0.020, 16, 0.050, 0.005, 8, 2, 1, 16) == SLAWindow(8, 16)
    # the window keeps to [B_min, B_max]: few in flight and fast, or many and slow
    assert sla_window_update(SLAWindow(1, 16), 0.020, 0, 0.050, 0.005, 2, 2, 1, 16) == SLAWindow(1, 16)
    assert sla_window_update(SLAWindow(4, 16), 0.090, 20, 0.050, 0.005, 2, 2, 1, 16) == SLAWindow(2, 16)


# -- Alg. 2's latency signal ---------------------------------------------------------------------
def test_engine_step_latency_drives_the_window_not_the_lagging_tpot():
    workload = [request(f"r{i}", 100) for i in range(20)]
    policy = started(
        DynamicSLAPolicy(DynamicSLAParams(d_sla_s=0.050, memory_cap=False)), kv=10_000_000, slots=16, requests=workload
    )
    policy.decide(0.0)  # 16 in flight
    assert policy.latency_source[0] == "tpot" and policy.alpha[0] == 2
    policy.on_telemetry(TelemetrySample(0, 0.25, 0.1, 16, 0, 0, None), 0.25)  # no decode step yet: nothing
    assert policy.windows[0] == SLAWindow(1, 16)
    # steps of 80 ms at 16 in flight: too slow, b_high = max(16, 1 + 2) = 16, b_low = max(1 - 2, 1) = 1
    # then 80 and 20 ms (mean 50 ms, on target): window b -/+ 1 = [15, 17 -> 16], cap 15
    policy.on_telemetry(TelemetrySample(0, 0.5, 0.1, 16, 0, 0, 0.080), 0.5)
    assert policy.latency_source[0] == "engine" and policy.windows[0] == SLAWindow(1, 16)
    policy.on_telemetry(TelemetrySample(0, 0.75, 0.1, 16, 0, 0, 0.020), 0.75)
    assert policy.windows[0] == SLAWindow(15, 16) and policy.sla_cap[0] == 15
    # a finished request's TPOT (here 1 s per token) no longer moves it
    policy.on_first_token("r0", 0, 0.1)
    policy.on_completion(Completion("r0", 0, 11, 11, True), 10.1)
    assert policy.windows[0] == SLAWindow(15, 16) and not policy.recent_tpot[0]
    tpot = started(DynamicSLAPolicy(DynamicSLAParams(latency_signal="tpot")), slots=16, requests=workload)
    tpot.on_telemetry(TelemetrySample(0, 0.5, 0.1, 16, 0, 0, 0.080), 0.5)
    assert tpot.latency_source[0] == "tpot" and tpot.windows[0] == SLAWindow(1, 16)


class TelemetryLog(FCFSPolicy):
    def on_telemetry(self, sample, now):
        self.samples = getattr(self, "samples", []) + [(round(sample.t_s, 6), sample.decode_step_s)]


def test_virtual_time_samples_carry_the_mean_decode_step():
    # prefill 1 s; a decode step 0.1 s + 1 ms per context token: one request, 40-token prompt, 5
    # tokens: steps end at 1.141, 1.283, 1.426, 1.570 (contexts 41..44)
    model = LatencyModel(
        prefill=PhaseCoefficients(alpha=0, beta=0, gamma=0, delta=1.0),
        decode=PhaseCoefficients(alpha=0, beta=0, gamma=0.001, delta=0.1),
    )
    requests = [Request("r", "chat", "x", 40, 5, 0.0, TaskSLO(tpot_s=1.0))]
    policy = TelemetryLog()
    VirtualTimeDriver(
        instances=[SimulatedInstance(instance_id=0, latency=model, kv_capacity_tokens=1024, block_size=16)],
        policy=policy,
        requests=requests,
        recorder=RunRecorder(requests),
    ).run()
    samples = dict(policy.samples)
    assert all(samples[t] is None for t in (0.0, 0.25, 0.5, 0.75, 1.0))  # the prefill step decodes nothing
    assert samples[1.25] == pytest.approx(0.141)  # the step ending at 1.141
    assert samples[1.5] == pytest.approx((0.142 + 0.143) / 2)
    assert samples[1.57] == pytest.approx(0.144)  # the last sample, at the end of the run
