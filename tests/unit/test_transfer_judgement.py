"""bench/transfer.py's judgement of one cell, by hand: the real value of a seed is the mean of its
two runs, the spread the mean relative difference between them, and a change within the spread
or with an interval holding 0 is unresolvable."""

from __future__ import annotations

import pytest

from bench.transfer import judge_cell, totals


def test_a_clear_difference_is_resolvable_and_its_ratio_is_sim_over_real():
    # A: 10 and 10.2 at each seed (spread 2/101 = 1.98%); B: 12 and 12 -> +18.8% at each seed
    real = {"a": {s: [10.0, 10.2] for s in range(4)}, "b": {s: [12.0 + 0.01 * s, 12.0 + 0.01 * s] for s in range(4)}}
    sim = {"a": {s: 10.0 for s in range(4)}, "b": {s: 11.0 for s in range(4)}}
    cell = judge_cell(real, sim, "a", "b")
    assert cell["seeds"] == 4 and cell["verdict"] == "resolvable" and cell["sign_agrees"]
    assert cell["spread"] == pytest.approx((0.2 / 10.1) / 2)  # half the spreads are B's zeros
    real_change = (12.0 + 0.015) / 10.1 - 1
    assert cell["real"]["change"] == pytest.approx(real_change)
    assert cell["ratio"] == pytest.approx(0.1 / real_change)
    assert cell["ratio_interval"][0] <= cell["ratio"] <= cell["ratio_interval"][1]
    assert not cell["ratio_within"]  # 0.53: the simulator says half the real effect


def test_a_change_within_the_engines_own_spread_is_unresolvable():
    # A's two runs differ by 40%, B is 5% above A: not resolvable, whatever the interval says
    real = {"a": {s: [8.0, 12.0] for s in range(3)}, "b": {s: [10.5, 10.5] for s in range(3)}}
    sim = {"a": {s: 10.0 for s in range(3)}, "b": {s: 9.0 for s in range(3)}}
    cell = judge_cell(real, sim, "a", "b")
    assert cell["verdict"] == "unresolvable" and "sign_agrees" not in cell
    assert totals([{"metrics": {"G": cell}}]) == {"cells": 1, "resolvable": 0, "sign_agrees": 0, "ratio_within": 0}
