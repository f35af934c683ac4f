"""Latency model, KV arithmetic, profiles and the simulated engine's iteration-level behaviour."""

from __future__ import annotations

import json

import pytest

from runners.engines.kv_cache import GPUBudget, ModelShape, kv_capacity_tokens
from runners.engines.latency_model import LatencyModel, PhaseCoefficients
from runners.engines.profile import QWEN25_7B_2XV100, load_profile
from runners.engines.sim_config import SimulatorConfig
from runners.engines.simulator import SimulatedInstance, SimulationError
from runners.errors import ConfigError

TABLE2 = QWEN25_7B_2XV100.latency_model()


def test_table2_coefficients_in_seconds():
    assert TABLE2.prefill_time(1, 100) == pytest.approx((0.1 * 100 + 5.7 + 0.01 * 100 + 43.67) / 1000)
    assert TABLE2.decode_step_time(8, 500) == pytest.approx(
        (0.0002 * 8 * 500 + 0.275 * 8 + 0.00088 * 500 + 15.85) / 1000
    )


def test_step_time_reduces_to_eq14_and_eq15():
    # pure prefill of b equal prompts, pure decode of b requests at one context length
    assert TABLE2.step_time(4, 4 * 300, 0, 0) == pytest.approx(TABLE2.prefill_time(4, 300))
    assert TABLE2.step_time(0, 0, 16, 16 * 700) == pytest.approx(TABLE2.decode_step_time(16, 700))
    assert TABLE2.step_time(0, 0, 0, 0) == 0.0


def test_alone_latency_closed_form_equals_the_sum():
    ttft, e2e = TABLE2.alone_latency(119, 465)
    by_hand = TABLE2.prefill_time(1, 119) + sum(TABLE2.decode_step_time(1, 119 + k) for k in range(1, 465))
    assert ttft == pytest.approx(TABLE2.prefill_time(1, 119))
    assert e2e == pytest.approx(by_hand)


def test_qwen_preset_kv_capacity_from_shape():
    shape = QWEN25_7B_2XV100.model
    assert shape.kv_bytes_per_token == 2 * 28 * 4 * 128 * 2 == 57344
    expected = int((2 * 32 * 1024**3 * 0.9 - 7.61e9 * 2) // 57344) // 16 * 16
    assert QWEN25_7B_2XV100.capacity_tokens() == expected == 813104


def test_capacity_with_weights_too_big_is_an_error():
    config = SimulatorConfig(gpu=GPUBudget(gpus=1, gpu_memory_gib=8, memory_fraction=0.9))
    with pytest.raises(ConfigError, match="engine.gpu"):
        config.resolve()
    small = ModelShape(layers=2, kv_heads=1, head_dim=64, dtype_bytes=2, weight_bytes=0)
    assert kv_capacity_tokens(small, GPUBudget(gpu_memory_gib=1, memory_fraction=0.5), 16) == (2**29 // 512) // 16 * 16


def test_profile_file_roundtrip_and_errors(tmp_path):
    path = QWEN25_7B_2XV100.to_file(tmp_path / "p.yaml")
    assert load_profile(path).latency_model() == TABLE2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "prefill": {"alpha": 1}, "decode": {}, "kv_capacity_tokens": 10}))
    with pytest.raises(ConfigError, match="engine.profile: .*bad.json: prefill.beta: Field required"):
        load_profile(bad)
    with pytest.raises(ConfigError, match="engine.preset: unknown preset 'nope'"):
        SimulatorConfig(preset="nope").resolve()


# -- the simulated engine -------------------------------------------------------------------------
UNIT = LatencyModel(
    prefill=PhaseCoefficients(alpha=0, beta=0, gamma=0, delta=1.0),  # every prefill step: 1 s
    decode=PhaseCoefficients(alpha=0, beta=0, gamma=0, delta=0.1),  # every decode step: 0.1 s
)


def run_until_idle(instance: SimulatedInstance, now: float = 0.0, max_steps: int = 10_000):
    finished, kv = [], []
    for _ in range(max_steps):
        duration = instance.start_step()
        if duration is None:
            break
        now += duration
        outcome = instance.finish_step(now)
        finished.extend(outcome.finished)
        kv.append(instance.used_blocks)
    return now, finished, kv


def test_one_request_prefill_then_decode():
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=1024, block_size=16)
    seq = instance.add("r", prompt_tokens=40, max_tokens=5)
    end, finished, _ = run_until_idle(instance)
    assert finished == [seq]
    assert seq.token_times == pytest.approx([1.0, 1.1, 1.2, 1.3, 1.4])  # first token from prefill
    assert instance.free_blocks == instance.total_blocks


def test_chunked_prefill_respects_token_budget():
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=4096, max_num_batched_tokens=512)
    seq = instance.add("r", prompt_tokens=1200, max_tokens=2)
    run_until_idle(instance)
    assert seq.token_times == pytest.approx([3.0, 3.1])  # 512 + 512 + 176 prompt tokens: 3 prefill steps


def test_max_num_seqs_caps_the_batch():
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=100_000, max_num_seqs=2)
    for i in range(3):
        instance.add(f"r{i}", 10, 3)
    instance.start_step()
    assert len(instance.running) == 2 and instance.waiting_count == 1


def test_preemption_when_kv_runs_out_and_everything_still_finishes():
    # 8 blocks of 16 tokens = 128 tokens; three requests of 32 prompt + 40 output cannot all fit
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=128, block_size=16)
    seqs = [instance.add(f"r{i}", 32, 40) for i in range(3)]
    _, finished, kv = run_until_idle(instance)
    assert sorted(s.request_id for s in finished) == ["r0", "r1", "r2"]
    assert all(s.generated == 40 for s in seqs)
    assert instance.preemptions_total >= 1
    assert seqs[2].preemptions >= 1 and seqs[0].preemptions == 0  # FCFS preempts the latest
    assert max(kv) <= 8 and instance.free_blocks == 8


def test_priority_mode_admits_lowest_priority_value_first():
    instance = SimulatedInstance(
        instance_id=0, latency=UNIT, kv_capacity_tokens=10_000, max_num_seqs=1, scheduling_policy="priority"
    )
    instance.add("late", 10, 1, priority=5)
    instance.add("urgent", 10, 1, priority=0)
    _, finished, _ = run_until_idle(instance)
    assert [s.request_id for s in finished] == ["urgent", "late"]


def test_run_to_completion_holds_kv_until_the_batch_ends():
    instance = SimulatedInstance(
        instance_id=0, latency=UNIT, kv_capacity_tokens=10_000, block_size=16, run_to_completion=True
    )
    short = instance.add("short", 16, 2)
    instance.add("long", 16, 20)
    duration = instance.start_step()
    now = duration
    instance.finish_step(now)
    late = instance.add("late", 16, 2)  # arrives after the batch left its prefill: must wait
    held_after_short_finished = None
    while instance.running:
        now += instance.start_step()
        instance.finish_step(now)
        if short.generated == 2 and held_after_short_finished is None and instance.running:
            held_after_short_finished = instance.used_blocks
    assert held_after_short_finished is not None and held_after_short_finished >= 3  # short's block is still held
    assert late.generated == 0 and instance.used_blocks == 0  # batch over: everything freed
    run_until_idle(instance, now)
    assert late.generated == 2


def test_request_larger_than_cache_is_refused():
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=64)
    with pytest.raises(SimulationError, match="needs 100 KV tokens"):
        instance.add("huge", 90, 10)
