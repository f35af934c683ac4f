"""Statistics across seeds (runners/metrics/seed_statistics.py), checked against a 5-seed example
worked by hand, and the degenerate cases: one seed, zero spread, a failed seed; the paired test
(exact sign-flip below 10 pairs, paired t from 10), Holm's correction, and the relative change's
interval (Fieller below 10 pairs, BCa from 10)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from runners.metrics.seed_statistics import (
    fieller_interval,
    holm_adjust,
    mean_interval,
    paired_comparison,
    paired_test,
    relative_change,
    summarize,
)

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


# -- relative change: a ratio, so Fieller's interval ------------------------------------------------------
def test_relative_change_point_estimate_is_the_ratio_of_means_minus_one():
    from runners.metrics.seed_statistics import relative_change

    base = {0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0, 4: 5.0}
    other = {0: 1.1, 1: 2.3, 2: 3.1, 3: 4.5, 4: 5.2}  # sum 16.2 vs 15: +8%
    result = relative_change(base, other)
    assert result.n_pairs == 5 and result.change == pytest.approx(0.08)
    assert result.ci_low < 0.08 < result.ci_high and "Fieller" in result.method
    ten_base = {seed: float(seed + 1) for seed in range(10)}
    ten_other = {seed: value * (1.1 if seed % 2 else 1.05) for seed, value in ten_base.items()}
    ten = relative_change(ten_base, ten_other)  # Fieller at every number of pairs (issue 43 item 9)
    assert ten.n_pairs == 10 and "Fieller" in ten.method and ten.ci_low < ten.change < ten.ci_high
    assert relative_change(ten_base, ten_other) == ten  # analytic: the same values, the same interval


def test_relative_change_degenerate_cases_say_why():
    from runners.metrics.seed_statistics import relative_change

    scaled = relative_change({0: 1.0, 1: 2.0, 2: 4.0}, {0: 1.5, 1: 3.0, 2: 6.0})  # every resample: ratio 1.5
    assert (scaled.change, scaled.ci_low, scaled.ci_high) == pytest.approx((0.5, 0.5, 0.5))
    zero = relative_change({0: 0.0, 1: 0.0, 2: 0.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert zero.change is None and "mean is 0" in zero.note
    two = relative_change({0: 1.0, 1: 2.0, 2: None}, {0: 2.0, 1: 2.0, 2: 5.0})  # seed 2 failed on one side
    assert two.n_pairs == 2 and two.change == pytest.approx(4.0 / 3.0 - 1.0) and two.ci_low is None
    # Fieller at 2 pairs: baseline 1, 2: mean 1.5, variance of the mean 0.5 / 2 = 0.25, t(0.975, 1)
    # = 12.706: a = 1.5^2 - 12.706^2 x 0.25 = -38.1 <= 0, the interval is unbounded
    assert "unbounded" in two.note and "Fieller" in two.method
    one = relative_change({0: 1.0, 1: None}, {0: 2.0, 1: 3.0})
    assert one.n_pairs == 1 and one.change == pytest.approx(1.0) and one.ci_low is None and "1 paired" in one.note


def test_relative_change_interval_covers_the_true_ratio_most_of_the_time():
    """200 simulated 10-seed studies with a true +20%: the 95% interval should contain 0.2 in
    roughly 95% of them (Fieller's; BCa, used before, covered about 90% at 10 seeds)."""
    from runners.metrics.seed_statistics import relative_change

    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(200):
        seed_effect = rng.normal(10.0, 2.0, 10)
        base = seed_effect + rng.normal(0.0, 0.5, 10)
        other = 1.2 * seed_effect + rng.normal(0.0, 0.5, 10)
        result = relative_change(dict(enumerate(base)), dict(enumerate(other)))
        covered += result.ci_low <= 0.2 <= result.ci_high
    assert covered >= 180  # 189 of 200 with this generator


# -- the paired test ---------------------------------------------------------------------------------
def test_exact_sign_flip_test_below_ten_pairs_by_hand():
    # d = .05 .02 .05 .10 -.01, sum .21: of the 2^5 = 32 sign assignments, |sum| >= .21 only for
    # the observed one, the one with -.01 flipped (sum .23) and their two mirror images: p = 4 / 32
    result = paired_comparison(BASE, OTHER, higher_is_better=True)
    assert result.test == "exact sign-flip" and result.p_value == pytest.approx(4 / 32)
    # three positive differences: only all-plus and all-minus reach |mean| 31/90: p = 2 / 8, the
    # smallest p three pairs can give
    assert paired_test([1.0, 1.1, 1.0]) == (pytest.approx(0.25), "exact sign-flip")
    assert paired_test([0.0, 0.0, 0.0]) == (1.0, "exact sign-flip")
    assert paired_test([0.7]) == (None, None)
    # nine pairs: every one of the 2^9 assignments counted, checked against a brute-force count
    diffs = [0.3, -0.1, 0.25, 0.4, 0.05, 0.2, -0.15, 0.35, 0.1]
    observed = abs(sum(diffs))
    hits = sum(
        1
        for signs in itertools.product((1, -1), repeat=len(diffs))
        if abs(sum(s * d for s, d in zip(signs, diffs))) >= observed - 1e-12
    )
    p, test = paired_test(diffs)
    assert test == "exact sign-flip" and p == pytest.approx(hits / 2**9)


def test_paired_t_test_from_ten_pairs_by_hand():
    diffs = [0.1, 0.3, -0.2, 0.4, 0.2, 0.0, 0.5, 0.1, 0.3, 0.3]  # mean 0.2, sum of squares about it 0.38
    s = math.sqrt(0.38 / 9)
    t = 0.2 / (s / math.sqrt(10))  # 3.0779
    p, test = paired_test(diffs)
    assert test == "paired t" and p == pytest.approx(2 * stats.t.sf(t, 9))
    assert p == pytest.approx(0.01318, abs=1e-4)
    assert paired_test([0.5] * 10) == (0.0, "paired t") and paired_test([0.0] * 12) == (1.0, "paired t")
    ten = paired_comparison(dict(enumerate([1.0] * 10)), {i: 1.0 + d for i, d in enumerate(diffs)}, True)
    assert (ten.test, ten.n_pairs) == ("paired t", 10) and ten.p_value == pytest.approx(p)


def test_holm_adjustment_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> running max
    # 0.02, 0.03, 0.06, 0.06, back in the given order
    adjusted = holm_adjust([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # None is not a member of the family: m = 2 here
    assert holm_adjust([None, 0.02, 0.6, None]) == [None, pytest.approx(0.04), pytest.approx(0.6), None]
    assert holm_adjust([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm_adjust([]) == [] and holm_adjust([0.01]) == [0.01]


# -- Fieller's interval below ten pairs ---------------------------------------------------------------
def test_fieller_interval_by_hand():
    base = [1.0, 2.0, 3.0, 4.0, 5.0]
    other = [1.1, 2.3, 3.1, 4.5, 5.2]
    # means 3 and 3.24; sample variances (n - 1) 2.5 and 2.728, covariance 10.4 / 4 = 2.6; of the
    # means (/ 5): v_bb 0.5, v_oo 0.5456, v_bo 0.52; t = t(0.975, 4)
    t2 = T_0975_4**2
    a = 3.0**2 - t2 * 0.5
    b = 3.24 * 3.0 - t2 * 0.52
    c = 3.24**2 - t2 * 0.5456
    low, high = (b - math.sqrt(b * b - a * c)) / a, (b + math.sqrt(b * b - a * c)) / a
    assert (low, high) == pytest.approx((1.01359, 1.20633), abs=1e-4)  # ratio 1.014 to 1.206
    assert fieller_interval(base, other) == pytest.approx((low, high))
    result = relative_change(dict(enumerate(base)), dict(enumerate(other)))
    assert (result.ci_low, result.ci_high) == pytest.approx((low - 1.0, high - 1.0))  # +1.4% to +20.6%
    assert result.method.startswith("Fieller") and result.note is None
    # the same set another way: at each end the paired t statistic of other - R x base is t(0.975, 4)
    for ratio in (low, high):
        d = np.asarray(other) - ratio * np.asarray(base)
        assert abs(d.mean()) / (d.std(ddof=1) / math.sqrt(5)) == pytest.approx(T_0975_4)


def test_fieller_is_unbounded_when_the_baseline_mean_is_not_significantly_nonzero():
    # baseline -1, 1, 3: mean 1, variance of the mean 4 / 3; t(0.975, 2)^2 x 4/3 = 24.7 > 1^2
    assert fieller_interval([-1.0, 1.0, 3.0], [1.0, 2.0, 3.0]) is None
    result = relative_change({0: -1.0, 1: 1.0, 2: 3.0}, {0: 1.0, 1: 2.0, 2: 3.0})
    assert result.change == pytest.approx(1.0) and result.ci_low is None and "unbounded" in result.note


def test_fieller_interval_covers_the_true_ratio_at_three_pairs():
    """200 simulated 3-seed studies with a true +20% (normal per-seed values, where Fieller's
    interval is exact): it should hold 0.2 in about 95% of them."""
    rng = np.random.default_rng(2)
    covered = bounded = 0
    for _ in range(200):
        seed_effect = rng.normal(10.0, 2.0, 3)
        base = seed_effect + rng.normal(0.0, 0.5, 3)
        other = 1.2 * seed_effect + rng.normal(0.0, 0.5, 3)
        result = relative_change(dict(enumerate(base)), dict(enumerate(other)))
        if result.ci_low is not None:
            bounded += 1
            covered += result.ci_low <= 0.2 <= result.ci_high
    assert bounded >= 190 and covered >= 0.9 * bounded
