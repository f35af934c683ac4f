"""The step model's prefill-context term (issue 31 item 3): a chunk computed after tokens already in
its request's KV (a cached prefix, earlier chunks) costs per_prefill_context_token_s x chunk x those
tokens more; the simulator charges it where it plans a step, the profiler fits it, and a profile
or a samples file without it still loads (0, the model as it was)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from runners.app.profiler import (
    PREFIX_SIGNAL,
    StepSample,
    _phase_model,
    fit_step_model,
    read_step_samples,
    write_step_samples,
)
from runners.engines.latency_model import STEP_TERMS, LatencyModel, LinearStepModel
from runners.engines.profile import load_profile
from runners.engines.simulator import SimulatedInstance

BASE = dict(
    fixed_s=0.001,
    per_prefill_token_s=2e-5,
    per_decode_request_s=5e-5,
    per_context_token_s=2e-7,
    per_request_cpu_s=1e-4,
    idle_start_s=0.002,
)
CONTEXT_S = 1e-8  # seconds per (chunk token x KV token)
STEP = LinearStepModel(**BASE, per_prefill_context_token_s=CONTEXT_S)
OLD_STEP = LinearStepModel(**BASE)
SYSTEM = (7, 1024)  # a 1024-token system prompt: 8 blocks of 128


def test_a_chunk_after_1024_cached_tokens_costs_chunk_x_context_more_by_hand():
    # 1 prompt computing 128 tokens after 1024 in its KV, beside 2 decodes at 300 tokens of context
    plain = 0.001 + 2e-5 * 128 + 5e-5 * 2 + 2e-7 * 600 + 1e-4 * 3
    assert STEP.step_time(1, 128, 2, 600) == pytest.approx(plain, rel=1e-12)
    assert STEP.step_time(1, 128, 2, 600, prefill_context=128 * 1024) == pytest.approx(
        plain + 1e-8 * 128 * 1024, rel=1e-12
    )  # 0.00408 + 0.00131072 s
    assert STEP.step_time(1, 128, 2, 600, prefill_context=128 * 1024) == pytest.approx(0.00539072, rel=1e-12)
    # the latency model passes it through; the phase view (eq. 14) has no such term
    model = LatencyModel.of_step(STEP)
    assert model.prefill_context_s == CONTEXT_S
    assert model.step_time(1, 128, 0, 0, 128 * 1024) - model.step_time(1, 128, 0, 0) == pytest.approx(
        1e-8 * 131072, rel=1e-9
    )
    assert STEP_TERMS[-1] == "per_prefill_context_token_s"


def test_without_the_term_a_step_costs_exactly_what_it_did():
    # a profile written before the term: 0, and the step time is bit for bit the old sum
    assert OLD_STEP.per_prefill_context_token_s == 0.0
    old_sum = 0.001 + 2e-5 * 128 + 5e-5 * 2 + 2e-7 * 600 + 1e-4 * 3 + 0.002 * 0
    assert OLD_STEP.step_time(1, 128, 2, 600) == old_sum
    assert OLD_STEP.step_time(1, 128, 2, 600, prefill_context=10**6) == old_sum


def _prefill_step_after_a_cached_prefix(step: LinearStepModel) -> tuple[float, float, SimulatedInstance]:
    """(the first request's prefill step, the second's, the instance): two prompts of the same
    1024-token system prompt + 100 tokens of their own, the second sent after the first finished."""
    instance = SimulatedInstance(
        instance_id=0, latency=LatencyModel.of_step(step), kv_capacity_tokens=16384, block_size=128
    )
    instance.add("a", 1124, 1, segments=(SYSTEM, (101, 100)))
    first = instance.start_step()
    instance.finish_step(first)
    assert instance.start_step() is None
    instance.add("b", 1124, 1, segments=(SYSTEM, (102, 100)))
    second = instance.start_step()
    assert instance._chunks == [100]  # 1024 tokens found in the cache
    instance.finish_step(first + second)
    return first, second, instance


def test_the_simulator_charges_a_chunk_after_a_cached_prefix_for_the_context():
    first, second, instance = _prefill_step_after_a_cached_prefix(STEP)
    assert instance.prefix_hits == 1024
    # first: 1124 tokens computed from nothing (idle start): no context
    assert first == pytest.approx(0.001 + 2e-5 * 1124 + 1e-4 + 0.002, rel=1e-12)
    # second: 100 tokens after 1024 cached: + 1e-8 x 100 x 1024 = 1.024 ms
    assert second == pytest.approx(0.001 + 2e-5 * 100 + 1e-4 + 0.002 + 1e-8 * 100 * 1024, rel=1e-12)
    # with the term at 0 the same step costs the computed tokens only, as before
    _, old_second, _ = _prefill_step_after_a_cached_prefix(OLD_STEP)
    assert old_second == 0.001 + 2e-5 * 100 + 1e-4 + 0.002
    assert second - old_second == pytest.approx(0.001024, rel=1e-9)


def test_a_second_chunk_of_a_long_prompt_attends_over_the_first():
    instance = SimulatedInstance(
        instance_id=0,
        latency=LatencyModel.of_step(STEP),
        kv_capacity_tokens=16384,
        block_size=128,
        max_num_batched_tokens=2048,
    )
    instance.add("long", 3000, 1)
    first = instance.start_step()
    assert instance._chunks == [2048]
    instance.finish_step(first)
    second = instance.start_step()
    assert instance._chunks == [952]
    # chunk 2: 952 tokens after the 2048 computed in chunk 1; not an idle start
    assert second == pytest.approx(0.001 + 2e-5 * 952 + 1e-4 + 1e-8 * 952 * 2048, rel=1e-12)


def _synthetic_samples(truth: LinearStepModel, noise: float, seed: int = 0) -> list[StepSample]:
    rng = np.random.default_rng(seed)
    samples = []

    def add(kind, p, t, d, c, signal="synthetic", context=0):
        seconds = truth.step_time(p, t, d, c, idle_start=kind == "prefill", prefill_context=context)
        samples.append(StepSample(kind, p, t, d, c, seconds * (1 + rng.normal(0, noise)), signal, 1, context))

    for tokens in (16, 64, 128, 256, 512, 768, 1024, 1200):
        for _ in range(3):
            add("prefill", 1, tokens, 0, 0)
    for batch in (1, 2, 4, 8, 16, 32, 64):
        for context in (20, 300):
            add("decode", 0, 0, batch, batch * context)
    for decodes in (1, 4, 16, 48):
        for prefills, tokens in ((1, 64), (2, 256), (4, 448)):
            add("mixed", prefills, prefills * tokens, decodes, decodes * 100)
    for cached in (256, 512, 1024, 1536):
        for new in (16, 128, 512):
            computed = new + 1  # as the profiler reads it: counted - hits
            add("prefill", 1, computed, 0, 0, PREFIX_SIGNAL, computed * cached)
    return samples


def test_the_fit_recovers_a_known_prefill_context_coefficient():
    fitted = fit_step_model(_synthetic_samples(STEP, noise=0.0)).model
    assert fitted.per_prefill_context_token_s == pytest.approx(CONTEXT_S, rel=1e-6)
    assert fitted.per_prefill_token_s == pytest.approx(2e-5, rel=1e-6)
    noisy = fit_step_model(_synthetic_samples(STEP, noise=0.03, seed=4)).model
    assert noisy.per_prefill_context_token_s == pytest.approx(CONTEXT_S, rel=0.25)
    # no context cost in the engine: the fit finds none (non-negative), not a negative one
    none = fit_step_model(_synthetic_samples(OLD_STEP, noise=0.0)).model
    assert none.per_prefill_context_token_s == pytest.approx(0.0, abs=1e-13)
    # the samples after a cached prefix are no eq. 14 points: the phase model is fitted without them
    with_prefix = _phase_model(_synthetic_samples(STEP, noise=0.0))
    without = _phase_model([s for s in _synthetic_samples(STEP, noise=0.0) if not s.prefill_context])
    assert with_prefix.prefill == without.prefill


def test_samples_files_and_profiles_without_the_term_still_load(tmp_path):
    samples = _synthetic_samples(STEP, noise=0.0)
    path = write_step_samples(samples, tmp_path / "samples.csv")
    assert read_step_samples(path) == samples
    # a file written before the prefix phase: no prefill_context column, read as 0
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    with (tmp_path / "old.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[name for name in rows[0] if name != "prefill_context"])
        writer.writeheader()
        writer.writerows({k: v for k, v in row.items() if k != "prefill_context"} for row in rows)
    assert "prefill_context" not in (tmp_path / "old.csv").read_text()
    assert {s.prefill_context for s in read_step_samples(tmp_path / "old.csv")} == {0}
    profile = tmp_path / "old.yaml"
    profile.write_text(
        "name: old\nkv_capacity_tokens: 4096\nstep_model:\n  kind: linear-step\n"
        + "".join(f"  {term}: {value}\n" for term, value in BASE.items())
        + "fit:\n  points: 18\n"
    )
    assert load_profile(profile).step_model == OLD_STEP


def test_a_step_planned_request_by_request_charges_the_prefill_chunk_and_not_the_decode():
    # a decoder and a 5000-token prompt: once the prompt's rest exceeds the token budget the step
    # is planned request by request (the decoder first, then the prompt's next chunk)
    instance = SimulatedInstance(
        instance_id=0,
        latency=LatencyModel.of_step(STEP),
        kv_capacity_tokens=65536,
        block_size=128,
        max_num_batched_tokens=2048,
    )
    instance.add("decoder", 10, 50)
    now = instance.start_step()
    instance.finish_step(now)  # its prefill: 10 tokens, first token out
    instance.add("long", 5000, 1)
    now += instance.start_step()
    assert instance._chunks == [2047]  # beside the decoder's token, within 2048
    instance.finish_step(now)
    step = instance.start_step()
    assert [seq.request_id for seq in instance._scheduled] == ["decoder", "long"]
    assert instance._chunks == [1, 2047]
    # the decoder at context 12 (10 + 1 computed, + this token); the chunk after 2047 computed tokens
    expected = 0.001 + 2e-5 * 2047 + 5e-5 * 1 + 2e-7 * 12 + 1e-4 * 2 + 1e-8 * 2047 * 2047
    assert step == pytest.approx(expected, rel=1e-12)
