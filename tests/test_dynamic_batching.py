"""Dynamic batch size (000): Alg. 1's CLT memory bound, Alg. 2's window moves, whole runs."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm

from runners.benchmark import execute_run
from runners.config import parse_config
from runners.schedulers.dynamic_batching import SLAWindow, clamp_batch, memory_batch_size, sla_window_update


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
    config = {"workload": {"requests": 300, "seed": 5, "arrival": {"process": "all-at-once"}},
              "engine": {"kv_capacity_tokens": 60_000, **engine}, "scheduler": scheduler}
    return execute_run(parse_config(config), results).summary


def test_dynamic_mem_avoids_preemption_that_a_bigger_static_cap_causes(results_dir):
    greedy = run(results_dir, {"name": "fcfs"})
    dynamic = run(results_dir, {"name": "dynamic-mem"})
    assert greedy["preemptions"] > 0
    assert dynamic["preemptions"] < greedy["preemptions"]
    assert dynamic["completed"] == 300


def test_dynamic_sla_keeps_tpot_near_its_target(results_dir):
    loose = run(results_dir, {"name": "fcfs"}, kv_capacity_tokens=800_000)
    sla = run(results_dir, {"name": "dynamic-sla", "params": {"d_sla_s": 0.030}}, kv_capacity_tokens=800_000)
    assert loose["tpot_s"]["mean"] > 0.035
    assert sla["tpot_s"]["median"] < loose["tpot_s"]["median"]
    assert sla["completed"] == 300
