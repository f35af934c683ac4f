"""Statistics across seeds (runners/metrics/seed_statistics.py), checked against a 5-seed example
worked by hand, and the degenerate cases: one seed, zero spread, a failed seed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runners.metrics.seed_statistics import mean_interval, paired_comparison, summarize

BASE = {0: 0.80, 1: 0.70, 2: 0.90, 3: 0.60, 4: 0.75}  # e.g. SLO attainment of the baseline per seed
OTHER = {0: 0.85, 1: 0.72, 2: 0.95, 3: 0.70, 4: 0.74}
T_0975_4 = 2.7764451051977987  # Student t, 97.5% quantile, 4 degrees of freedom (tables: 2.776)


def test_summary_of_five_seeds_by_hand():
    # mean 0.75; squared deviations .0025 .0025 .0225 .0225 0 -> s^2 = .05 / 4 = .0125, s = .111803
    # standard error s / sqrt(5) = .05; half width 2.776445 x .05 = .138822
    summary = summarize(list(BASE.values()))
    assert summary.n == 5 and summary.mean == pytest.approx(0.75) and summary.median == pytest.approx(0.75)
    assert summary.ci_low == pytest.approx(0.75 - T_0975_4 * 0.05)
    assert summary.ci_high == pytest.approx(0.75 + T_0975_4 * 0.05)
    assert summary.ci_low == pytest.approx(0.611178, abs=1e-6) and summary.note is None


def test_paired_difference_of_five_seeds_by_hand_wins_four_but_is_no_difference():
    # d = .05 .02 .05 .10 -.01: mean .042; squared deviations .000064 .000484 .000064 .003364
    # .002704 -> s^2 = .00668 / 4 = .00167; se = sqrt(.00167 / 5) = .0182757; half = .0507413
    result = paired_comparison(BASE, OTHER, higher_is_better=True)
    assert result.n_pairs == 5 and result.dropped == 0 and result.wins == 4
    assert result.diff_mean == pytest.approx(0.042)
    half = T_0975_4 * math.sqrt(0.00167 / 5)
    assert result.ci_low == pytest.approx(0.042 - half) and result.ci_high == pytest.approx(0.042 + half)
    assert result.ci_low == pytest.approx(-0.0087413, abs=1e-6)
    assert result.verdict == "no difference"  # 4 of 5 wins, yet the interval holds 0


def test_direction_comes_from_the_metric():
    slower = {seed: value + 1.0 + 0.01 * seed for seed, value in BASE.items()}  # e.g. E2E, seconds
    assert paired_comparison(BASE, slower, higher_is_better=False).verdict == "worse"
    assert paired_comparison(BASE, slower, higher_is_better=True).verdict == "better"
    assert paired_comparison(slower, BASE, higher_is_better=False).wins == 5


def test_one_seed_has_no_interval_and_says_so():
    summary = summarize([0.9])
    assert summary.n == 1 and summary.mean == 0.9 and summary.ci_low is None and summary.ci_high is None
    assert "1 seed: no interval" in summary.note
    result = paired_comparison({0: 0.5}, {0: 0.9}, higher_is_better=True)
    assert result.n_pairs == 1 and result.wins == 1 and result.verdict == "no difference"
    assert result.ci_low is None and "no interval" in result.note


def test_zero_spread_gives_a_point_interval_and_a_verdict():
    assert mean_interval([2.0, 2.0, 2.0]) == (2.0, 2.0)
    result = paired_comparison({0: 1.0, 1: 2.0, 2: 3.0}, {0: 1.5, 1: 2.5, 2: 3.5}, higher_is_better=True)
    assert (result.ci_low, result.ci_high, result.verdict) == (0.5, 0.5, "better")


def test_a_failed_seed_is_dropped_pairwise_and_counted():
    other = {**OTHER, 3: None}  # seed 3's run failed: no value
    result = paired_comparison(BASE, other, higher_is_better=True)
    assert result.n_pairs == 4 and result.dropped == 1 and "1 seed(s)" in result.note
    assert result.diff_mean == pytest.approx((0.05 + 0.02 + 0.05 - 0.01) / 4)
    assert summarize([0.1, None, float("nan"), 0.3]).n == 2
    assert summarize([]).n == 0 and summarize([]).mean is None


# -- relative change: a ratio, so a bootstrap interval ------------------------------------------------
def test_relative_change_point_estimate_is_the_ratio_of_means_minus_one():
    from runners.metrics.seed_statistics import relative_change

    base = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0, 4: 5.0}
    other = {0: 1.1, 1: 2.3, 2: 3.1, 3: 4.5, 4: 5.2}  # sum 16.2 vs 15: +8%
    result = relative_change(base, other)
    assert result.n_pairs == 5 and result.change == pytest.approx(0.08)
    assert result.ci_low < 0.08 < result.ci_high and "bootstrap" in result.method
    assert relative_change(base, other) == result  # fixed random state: the same values, the same interval


def test_relative_change_degenerate_cases_say_why():
    from runners.metrics.seed_statistics import relative_change

    scaled = relative_change({0: 1.0, 1: 2.0, 2: 4.0}, {0: 1.5, 1: 3.0, 2: 6.0})  # every resample: ratio 1.5
    assert (scaled.change, scaled.ci_low, scaled.ci_high) == pytest.approx((0.5, 0.5, 0.5))
    zero = relative_change({0: 0.0, 1: 0.0, 2: 0.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert zero.change is None and "mean is 0" in zero.note
    two = relative_change({0: 1.0, 1: 2.0, 2: None}, {0: 2.0, 1: 2.0, 2: 5.0})  # seed 2 failed on one side
    assert two.n_pairs == 2 and two.change == pytest.approx(4.0 / 3.0 - 1.0) and two.ci_low is None
    assert "too few" in two.note


def test_relative_change_interval_covers_the_true_ratio_most_of_the_time():
    """200 simulated 10-seed studies with a true +20%: the 95% interval should contain 0.2 in
    roughly 95% of them (BCa on 10 seeds is a little liberal; at least 85% is required)."""
    from runners.metrics.seed_statistics import relative_change

    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(200):
        seed_effect = rng.normal(10.0, 2.0, 10)
        base = seed_effect + rng.normal(0.0, 0.5, 10)
        other = 1.2 * seed_effect + rng.normal(0.0, 0.5, 10)
        result = relative_change(dict(enumerate(base)), dict(enumerate(other)), resamples=1999)
        covered += result.ci_low <= 0.2 <= result.ci_high
    assert covered >= 170
