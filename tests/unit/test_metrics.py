"""Metric definitions against hand-computed values, including the SLO-aware paper's Fig. 3."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from runners.metrics.request_metrics import inter_token_latencies, request_latencies
from runners.metrics.run_metrics import distribution, g_metric, summarize_requests
from runners.metrics.sawtooth import sawtooth_cycles
from runners.store.result_store import REQUEST_COLUMNS
from runners.workload.slo import TaskSLO


def test_request_latencies_count_from_arrival_not_dispatch():
    # arrived at 1.0, held by the scheduler until 3.0, first token 3.5, last token 5.5, 5 tokens
    latencies = request_latencies(arrival_s=1.0, dispatch_s=3.0, first_token_s=3.5, finish_s=5.5, output_tokens=5)
    assert latencies.ttft_s == pytest.approx(2.5)
    assert latencies.e2e_s == pytest.approx(4.5)
    assert latencies.tpot_s == pytest.approx((4.5 - 2.5) / 4)  # 0.5 s per token after the first
    assert latencies.queue_s == pytest.approx(2.0)


def test_tpot_undefined_for_one_token_and_slo_ignores_it():
    latencies = request_latencies(0.0, 0.0, 0.2, 0.2, 1)
    assert latencies.tpot_s is None
    assert TaskSLO(ttft_s=1.0, tpot_s=0.05).is_met(latencies.ttft_s, latencies.tpot_s, latencies.e2e_s)


def test_itl_is_gaps_between_chunks():
    np.testing.assert_allclose(inter_token_latencies([1.0, 1.1, 1.3, 1.6]), [0.1, 0.2, 0.3])
    assert inter_token_latencies([2.0]).size == 0


def test_distribution_matches_numpy_linear_percentiles():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    stats = distribution(values)
    assert stats["mean"] == pytest.approx(4.0)
    assert stats["median"] == pytest.approx(3.0)
    assert stats["p90"] == pytest.approx(4.0 + 0.6 * 6.0)  # linear between 4 and 10 at rank 3.6
    assert stats["p99"] == pytest.approx(4.0 + 0.96 * 6.0)
    assert distribution([])["mean"] is None
    assert distribution([float("nan"), 2.0])["mean"] == 2.0


# SLO-aware paper (004) Fig. 3, batch size 1, three jobs arriving together with e2e SLOs.
# The caption gives: order by expected execution time -> 2 of 3 meet, total latency 2,700 ms,
# G = 0.74 req/s; SLO-aware order (job 2 before job 1) -> 3 of 3, 2,900 ms, G = 1.03 req/s.
# Execution times 300 / 500 / 800 ms reproduce both totals (3*300 + 2*500 + 800 = 2,700;
# 3*500 + 2*300 + 800 = 2,900); SLOs 1,000 / 600 / 2,000 ms make job 2 miss only in order B.
FIG3_EXEC_S = {"job1": 0.3, "job2": 0.5, "job3": 0.8}
FIG3_SLO_S = {"job1": 1.0, "job2": 0.6, "job3": 2.0}


def _serve_in_order(order):
    clock, e2e, met = 0.0, [], []
    for job in order:
        clock += FIG3_EXEC_S[job]
        e2e.append(clock)
        met.append(TaskSLO(e2e_s=FIG3_SLO_S[job]).is_met(clock, None, clock))
    return met, e2e


def test_g_figure3_order_changes_g():
    met_b, e2e_b = _serve_in_order(["job1", "job2", "job3"])
    met_c, e2e_c = _serve_in_order(["job2", "job1", "job3"])
    assert sum(e2e_b) == pytest.approx(2.7) and sum(met_b) == 2
    assert sum(e2e_c) == pytest.approx(2.9) and sum(met_c) == 3
    assert g_metric(met_b, e2e_b) == pytest.approx(2 / 2.7)
    assert round(g_metric(met_b, e2e_b), 2) == 0.74
    assert round(g_metric(met_c, e2e_c), 2) == 1.03


def _rows(rows):
    frame = pd.DataFrame(rows)
    for column in REQUEST_COLUMNS:
        if column not in frame:
            frame[column] = None
    return frame[list(REQUEST_COLUMNS)]


#: The hand-computed requests of test_summary_hand_computed, one tuple per request.
HAND_COLUMNS = (
    "request_id", "task", "arrival_s", "dispatch_s", "first_token_s", "finish_s",
    "input_tokens", "output_tokens", "ttft_s", "tpot_s", "e2e_s", "queue_s", "slo_met", "error",
)  # fmt: skip
HAND_ROWS = [
    # chat met, code met, chat missed (slow TTFT), code failed
    ("a", "chat", 0.0, 0.0, 1.0, 3.0, 10, 5, 1.0, 0.5, 3.0, 0.0, True, None),
    ("b", "code", 1.0, 1.0, 2.0, 5.0, 20, 10, 1.0, 3 / 9, 4.0, 0.0, True, None),
    ("c", "chat", 2.0, 4.0, 6.0, 7.0, 30, 3, 4.0, 0.5, 5.0, 2.0, False, None),
    ("d", "code", 3.0, 3.0, None, 6.0, 40, 0, None, None, None, None, False, "http 500"),
]


def test_summary_hand_computed():
    rows = _rows([dict(zip(HAND_COLUMNS, row)) for row in HAND_ROWS])
    summary = summarize_requests(rows, preemptions=3)
    assert summary["requests"] == 4 and summary["completed"] == 3 and summary["failed"] == 1
    assert summary["duration_s"] == pytest.approx(7.0)  # first arrival 0 to last finish 7
    assert summary["slo_attainment"] == pytest.approx(0.5)
    assert summary["slo_attainment_by_task"] == {"chat": 0.5, "code": 0.5}
    # G over every judged request (004 eq. 2-3): the failed "d" is a miss whose 3 s from arrival
    # (3) to failure (6) count beside the completed requests' E2E
    assert summary["G"] == pytest.approx(2 / (3.0 + 4.0 + 5.0 + 3.0))
    assert summary["goodput_rps"] == pytest.approx(2 / 7)
    assert summary["request_throughput_rps"] == pytest.approx(3 / 7)
    assert summary["output_throughput_tps"] == pytest.approx(18 / 7)
    assert summary["total_throughput_tps"] == pytest.approx((18 + 60) / 7)
    assert summary["ttft_s"]["mean"] == pytest.approx(2.0)
    assert summary["e2e_s"]["median"] == pytest.approx(4.0)
    assert summary["queue_s"]["mean"] == pytest.approx(2 / 3)
    assert summary["preemptions"] == 3
    assert summary["itl_s"]["mean"] is None


def test_failures_never_raise_g():
    # "a" meets its SLO in 3 s; "d" fails after 30 s in the system. Leaving "d" out of both sums
    # (before schema 5) gave G = 1/3, as if it had never come; now it is a miss that cost 30 s.
    met = ("a", "chat", 0.0, 0.0, 1.0, 3.0, 10, 5, 1.0, 0.5, 3.0, 0.0, True, None)
    failed = ("d", "code", 0.0, 0.0, None, 30.0, 40, 0, None, None, None, None, False, "http 500")
    alone = summarize_requests(_rows([dict(zip(HAND_COLUMNS, met))]))
    both = summarize_requests(_rows([dict(zip(HAND_COLUMNS, row)) for row in (met, failed)]))
    assert alone["G"] == pytest.approx(1 / 3.0)
    assert both["G"] == pytest.approx(1 / 33.0) and both["G"] < alone["G"]
    assert both["slo_attainment"] == pytest.approx(0.5)


def test_summary_of_nothing_is_empty_not_an_error():
    summary = summarize_requests(_rows([]).iloc[0:0])
    assert summary["requests"] == 0 and summary["G"] is None and summary["slo_attainment"] is None


def test_sawtooth_counts_cycles_not_noise():
    saw = [0, 0.2, 0.4, 0.6, 0.8, 1.0, 0.05] * 5
    steady = [0.5 + 0.02 * math.sin(i) for i in range(35)]
    assert sawtooth_cycles(saw) == 5
    assert sawtooth_cycles(steady) == 0
    assert sawtooth_cycles([]) == 0
