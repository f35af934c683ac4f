"""The closed-form latency formula (SLO-aware paper eq. 14-16, SCLS eq. 1-4), written once in
runners/engines/latency_model.py: its scalar and numpy forms, the line-in-N form SCLS batches
with, and the compiled slo-sa tables, all against numbers worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from runners.engines.latency_model import (
    LatencyModel,
    PhaseCoefficients,
    decode_seconds,
    mean_decode_context,
    phase_seconds,
)
from runners.schedulers.slo_aware import latency_tables

# Round coefficients, seconds: prefill alpha 1e-3, beta 2e-2, gamma 3e-4, delta 0.5;
# decode alpha 1e-5, beta 1e-3, gamma 2e-5, delta 0.01.
PREFILL = PhaseCoefficients(alpha=1e-3, beta=2e-2, gamma=3e-4, delta=0.5)
DECODE = PhaseCoefficients(alpha=1e-5, beta=1e-3, gamma=2e-5, delta=0.01)
MODEL = LatencyModel(prefill=PREFILL, decode=DECODE)

# Prefill of 4 prompts of 100 tokens: 1e-3 * 400 + 2e-2 * 4 + 3e-4 * 100 + 0.5 = 0.4 + 0.08 + 0.03 + 0.5.
PREFILL_4_100 = 1.01
# 9 decode steps after a 100-token prompt (10 output tokens) in a batch of 4: the steps attend over
# 101..109 tokens, mean 105; one step at 105 = 1e-5 * 4 * 105 + 1e-3 * 4 + 2e-5 * 105 + 0.01
# = 0.0042 + 0.004 + 0.0021 + 0.01 = 0.0203 s; nine of them 0.1827 s.
DECODE_4_100_9 = 0.1827


def test_phase_time_scalar_and_array():
    assert phase_seconds(1e-3, 2e-2, 3e-4, 0.5, 4, 100) == pytest.approx(PREFILL_4_100, abs=1e-12)
    assert PREFILL.at(4, 100) == pytest.approx(PREFILL_4_100, abs=1e-12)
    assert MODEL.prefill_time(4, 100) == pytest.approx(PREFILL_4_100, abs=1e-12)
    # batch 1 and 2 at 100 tokens: 0.1 + 0.02 + 0.03 + 0.5 = 0.65; 0.2 + 0.04 + 0.03 + 0.5 = 0.77
    assert PREFILL.at(np.array([1.0, 2.0, 4.0]), 100) == pytest.approx([0.65, 0.77, PREFILL_4_100], abs=1e-12)


def test_decode_closed_form_equals_the_sum_of_steps():
    assert mean_decode_context(100, 9) == 105.0
    assert decode_seconds(1e-5, 1e-3, 2e-5, 0.01, 4, 100, 9) == pytest.approx(DECODE_4_100_9, abs=1e-12)
    step_by_step = sum(DECODE.at(4, 100 + k) for k in range(1, 10))
    assert step_by_step == pytest.approx(DECODE_4_100_9, abs=1e-12)
    assert MODEL.decode_time(4, 100, 10) == pytest.approx(DECODE_4_100_9, abs=1e-12)
    assert MODEL.decode_time(4, 100, 1) == 0.0  # the one token comes out of the prefill step
    assert MODEL.decode_time(4, 100, 0) == 0.0


def test_serve_time_scalar_array_and_line_agree():
    total = PREFILL_4_100 + DECODE_4_100_9  # 1.1927 s
    assert MODEL.serve_time(4, 100, 10) == pytest.approx(total, abs=1e-12)
    # batch 1 at 100 tokens, 10 outputs: prefill 0.65 + 9 * (1e-5 * 105 + 1e-3 + 2e-5 * 105 + 0.01)
    # = 0.65 + 9 * 0.01415 = 0.77735
    sizes = np.array([1.0, 4.0])
    assert MODEL.serve_time(sizes, 100, 10) == pytest.approx([0.77735, total], abs=1e-12)
    # one output token: the prefill alone
    assert MODEL.serve_time(4, 100, 1) == pytest.approx(PREFILL_4_100, abs=1e-12)
    # as a line in N at 100 tokens: slope 1e-3 * 100 + 2e-2 + 9 * (1e-5 * 105 + 1e-3) = 0.13845,
    # intercept 3e-4 * 100 + 0.5 + 9 * (2e-5 * 105 + 0.01) = 0.6389; 4 * 0.13845 + 0.6389 = 1.1927
    slope, intercept = MODEL.serve_line(np.array([100.0, 100.0]), 10)
    assert slope == pytest.approx([0.13845, 0.13845], abs=1e-12)
    assert intercept == pytest.approx([0.6389, 0.6389], abs=1e-12)
    assert slope[0] * 4 + intercept[0] == pytest.approx(total, abs=1e-12)


def test_compiled_tables_are_the_latency_model():
    # slo-sa's tables for one 100-token request with 10 outputs (9 steps), batch sizes 1..4
    exec_s, prefill_s, tpot_s = latency_tables(
        np.array([100.0]), np.array([100.0]), np.array([10.0]), 4, PREFILL.as_tuple(), DECODE.as_tuple()
    )
    assert exec_s[0, 3] == pytest.approx(PREFILL_4_100 + DECODE_4_100_9, abs=1e-12)
    assert prefill_s[0, 3] == pytest.approx(PREFILL_4_100, abs=1e-12)
    assert tpot_s[0, 3] == pytest.approx(0.0203, abs=1e-12)
    # bit for bit the numpy form of the same functions, at every batch size
    sizes = np.arange(1.0, 5.0)
    assert np.array_equal(prefill_s[0], PREFILL.at(sizes, 100.0))
    assert np.array_equal(exec_s[0], MODEL.serve_time(sizes, 100.0, 10.0))
    # no decode step (one output token): prefill only, TPOT 0
    exec_1, _, tpot_1 = latency_tables(
        np.array([100.0]), np.array([100.0]), np.array([1.0]), 1, PREFILL.as_tuple(), DECODE.as_tuple()
    )
    assert exec_1[0, 0] == pytest.approx(0.65, abs=1e-12) and tpot_1[0, 0] == 0.0
    # 64 of the 100 prompt tokens expected in the prefix cache: the prefill computes 36, the
    # decode still attends over all 100
    cached, cached_prefill, cached_tpot = latency_tables(
        np.array([100.0]), np.array([36.0]), np.array([10.0]), 4, PREFILL.as_tuple(), DECODE.as_tuple()
    )
    assert np.array_equal(cached_prefill[0], PREFILL.at(sizes, 36.0)) and np.array_equal(cached_tpot, tpot_s)
    assert cached[0, 3] == pytest.approx(float(PREFILL.at(4.0, 36.0)) + DECODE_4_100_9, abs=1e-12)
