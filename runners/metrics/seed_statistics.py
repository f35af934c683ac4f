"""Statistics across seeds, for comparing schedulers without concluding from one seed.

A study runs every scheduler on the same workload and arrival times at each seed (a paired
design). For one metric:

- per scheduler, over its n per-seed values x_1..x_n: mean, median, and the 95% Student t
  interval mean +- t(0.975, n-1) * s / sqrt(n), with s the sample standard deviation (n - 1 in
  the denominator). n = 1 has no interval (said in ``note``); zero spread gives [mean, mean];
- against the baseline, over the seeds where both have a value (a failed seed is dropped from
  the pair, and ``dropped`` counts it): d_i = x_i(scheduler) - x_i(baseline), its mean and 95%
  Student t interval as above, ``wins`` = seeds where the scheduler is strictly better (the
  metric's direction decides what better means), and the verdict: ``better`` or ``worse`` when
  the interval excludes 0 on that side, else ``no difference``. With fewer than two pairs there
  is no interval and the verdict is ``no difference``, with a note saying why;
- the same paired differences get a two-sided test of "no difference" (``p_value``, ``test``):
  from :data:`PAIRED_T_MIN_PAIRS` (10) pairs up the paired Student t test (t = mean(d) / (s /
  sqrt(n)), n - 1 degrees of freedom); from 2 to 9 pairs the exact sign-flip permutation test
  of mean(d): under no difference each d_i is as likely +|d_i| as -|d_i|, so p is the share of
  all 2^n sign assignments whose |mean| is at least the observed |mean| (every assignment
  enumerated, none sampled). With n pairs the smallest p it can give is 2 / 2^n (0.25 at 3
  pairs, 0.0625 at 5, 0.031 at 6): below 6 pairs no difference is significant at 5%. Below 10
  pairs the t interval and the exact test can disagree (the t interval assumes normal
  differences, the test does not); the verdict above is the interval's. Zero spread: p = 1 when
  every d_i is 0; for the t test p = 0 when they are all the same non-zero value;
- :func:`holm_adjust`: Holm's step-down correction of a family of p values (for many
  comparisons read together: the chance that any of them is a false positive stays <= 5%).

The relative change against the baseline is a ratio, whose Student t interval would be wrong:
over the n paired seeds, change = mean(scheduler) / mean(baseline) - 1, and its 95% interval is
Fieller's for the ratio R = mean(o) / mean(b) of two paired means, at every number of pairs:
with t = t(0.975, n-1) and v_bb, v_oo, v_bo the variances and covariance of the two means
(sample (co)variances, n - 1 in the denominator, divided by n), the R with
(mean(o) - R mean(b))^2 <= t^2 (v_oo - 2 R v_bo + R^2 v_bb), i.e. the roots of
a R^2 - 2 b R + c = 0 with a = mean(b)^2 - t^2 v_bb, b = mean(o) mean(b) - t^2 v_bo,
c = mean(o)^2 - t^2 v_oo: R in [(b - sqrt(b^2 - a c)) / a, (b + sqrt(b^2 - a c)) / a], minus 1.
When a <= 0 (the baseline's mean is not significantly different from 0) the set is unbounded:
no interval, with a note. It is analytic: the same per-seed values give the same interval and
so the same verdict, with no random resampling. (Until issue 43 a bootstrap BCa interval was
used from 10 pairs: resampled from the committed reproduction data it covered about 90% at 10
seeds where 95% is claimed, and a verdict at a range's edge depended on its random seed.)

One pair, a baseline mean of 0, or resamples that do not vary give no interval, with a note;
values that are an exact multiple of the baseline's at every seed give [change, change].

Values are in the metric's stored unit (seconds, fractions, 1/s); None and non-finite values are
missing values. p values and relative changes are fractions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

CONFIDENCE = 0.95
#: From this many pairs the paired test is Student's t; below it the exact sign-flip test.
PAIRED_T_MIN_PAIRS = 10
PAIRED_T_TEST = "paired t"
SIGN_FLIP_TEST = "exact sign-flip"
FIELLER_TEXT = "Fieller (ratio of paired means, t with n - 1 df)"
#: How every relative change's interval is made, in the words the pages and tables use.
RELATIVE_INTERVAL_NOTE = "Fieller's interval for a ratio of paired means (analytic: no resampling)"
#: What every comparison of one seed says in place of an interval.
SINGLE_SEED_NOTE = "1 seed: no interval; differences this size can flip with the seed"
Verdict = Literal["better", "worse", "no difference"]


@dataclass(frozen=True)
class SeedSummary:
    """One scheduler's metric over seeds: ``n`` values, their mean and median, the 95% interval
    of the mean (None when n < 2), and a note when the interval is missing."""

    n: int
    mean: float | None
    median: float | None
    ci_low: float | None
    ci_high: float | None
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PairedComparison:
    """A scheduler against the baseline over the seeds both have (``n_pairs``; ``dropped`` seeds
    had a value on one side only): mean paired difference (scheduler - baseline, stored unit), its
    95% interval, seeds won, the verdict at 95% (from the interval), and the two-sided test of no
    difference: ``p_value`` (a fraction; None with fewer than two pairs) and ``test`` (its name,
    :data:`PAIRED_T_TEST` or :data:`SIGN_FLIP_TEST`)."""

    n_pairs: int
    dropped: int
    diff_mean: float | None
    ci_low: float | None
    ci_high: float | None
    wins: int
    verdict: Verdict
    note: str | None = None
    p_value: float | None = None
    test: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The Student t interval of the mean of ``values`` (at least two); [mean, mean] when they do
    not vary; None for fewer than two values."""
    from scipy import stats  # imported where used: 1 s of imports a single run never needs

    array = np.asarray(values, dtype=float)
    if array.size < 2:
        return None
    mean = float(array.mean())
    spread = float(array.std(ddof=1))
    if spread == 0.0:
        return mean, mean
    half = float(stats.t.ppf(0.5 + confidence / 2, array.size - 1)) * spread / math.sqrt(array.size)
    return mean - half, mean + half


def summarize(values: Sequence[Any], confidence: float = CONFIDENCE) -> SeedSummary:
    """Mean, median and interval of the finite values among ``values`` (one per seed)."""
    kept = [number for value in values if (number := _finite(value)) is not None]
    if not kept:
        return SeedSummary(0, None, None, None, None, "no seed has a value")
    interval = mean_interval(kept, confidence)
    note = None if interval is not None else SINGLE_SEED_NOTE
    low, high = interval if interval is not None else (None, None)
    return SeedSummary(len(kept), float(np.mean(kept)), float(np.median(kept)), low, high, note)


def _mean_along(values: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(values, axis=axis)


def paired_test(differences: Sequence[float]) -> tuple[float | None, str | None]:
    """The two-sided p value of "the mean paired difference is 0" and the test's name (see the
    module docstring): paired Student t from :data:`PAIRED_T_MIN_PAIRS` differences up, the exact
    sign-flip permutation test below; (None, None) for fewer than two differences."""
    from scipy import stats  # imported where used: 1 s of imports a single run never needs

    array = np.asarray(differences, dtype=float)
    if array.size < 2:
        return None, None
    if array.size >= PAIRED_T_MIN_PAIRS:
        if float(array.std(ddof=1)) == 0.0:  # t is 0 / 0 or +-infinity
            return (1.0 if float(array.mean()) == 0.0 else 0.0), PAIRED_T_TEST
        return float(stats.ttest_1samp(array, 0.0).pvalue), PAIRED_T_TEST
    if not array.any():
        return 1.0, SIGN_FLIP_TEST
    # one sample with permutation_type "samples": the signs of the observations are permuted;
    # n_resamples=inf enumerates all 2^n assignments (exact), ties within scipy's relative tolerance
    result = stats.permutation_test(
        (array,),
        _mean_along,
        permutation_type="samples",
        vectorized=True,
        n_resamples=np.inf,
        alternative="two-sided",
    )
    return min(1.0, float(result.pvalue)), SIGN_FLIP_TEST


def holm_adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p values, in their order. With the m values that
    are not None sorted p_(1) <= ... <= p_(m), the i-th adjusted value is
    max over j <= i of min(1, (m - j + 1) * p_(j)); None stays None and does not count in m. A
    family-wise 5% test rejects where the adjusted p < 0.05. Example: 0.01, 0.04, 0.03, 0.005 ->
    0.03, 0.06, 0.06, 0.02."""
    present = sorted((p, index) for index, p in enumerate(p_values) if p is not None)
    m = len(present)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(present):  # rank 0 is the smallest: multiplier m
        running = max(running, min(1.0, (m - rank) * float(p)))
        adjusted[index] = running
    return adjusted


def paired_comparison(
    baseline: Mapping[Any, Any], other: Mapping[Any, Any], higher_is_better: bool, confidence: float = CONFIDENCE
) -> PairedComparison:
    """``other`` against ``baseline``, both mapping seed -> value, paired by seed."""
    seeds = sorted(set(baseline) | set(other), key=str)
    pairs = [
        (b, o)
        for seed in seeds
        if (b := _finite(baseline.get(seed))) is not None and (o := _finite(other.get(seed))) is not None
    ]
    dropped = len(seeds) - len(pairs)
    if not pairs:
        return PairedComparison(0, dropped, None, None, None, 0, "no difference", "no seed has both values")
    diffs = [o - b for b, o in pairs]
    wins = sum(1 for d in diffs if (d > 0 if higher_is_better else d < 0))
    interval = mean_interval(diffs, confidence)
    diff_mean = float(np.mean(diffs))
    if interval is None:
        return PairedComparison(
            len(pairs),
            dropped,
            diff_mean,
            None,
            None,
            wins,
            "no difference",
            "1 paired seed: no interval, no verdict; differences this size can flip with the seed",
        )
    low, high = interval
    if low > 0:
        verdict: Verdict = "better" if higher_is_better else "worse"
    elif high < 0:
        verdict = "worse" if higher_is_better else "better"
    else:
        verdict = "no difference"
    note = f"{dropped} seed(s) without a value on one side dropped" if dropped else None
    p_value, test = paired_test(diffs)
    return PairedComparison(len(pairs), dropped, diff_mean, low, high, wins, verdict, note, p_value, test)


@dataclass(frozen=True)
class RelativeChange:
    """mean(scheduler) / mean(baseline) - 1 over ``n_pairs`` paired seeds (a fraction: 0.1 is
    10% more), with its 95% interval (None when there is none, said in ``note``); ``method``:
    how the interval was computed (:data:`FIELLER_TEXT`; ``none`` without an interval to compute)."""

    n_pairs: int
    change: float | None
    ci_low: float | None
    ci_high: float | None
    method: str = FIELLER_TEXT
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ratio_of_means(base: np.ndarray, other: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mean(other, axis=axis) / np.mean(base, axis=axis) - 1.0


def fieller_interval(
    base: Sequence[float] | np.ndarray, other: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float] | None:
    """Fieller's interval for mean(other) / mean(base) over paired values (at least two pairs;
    the ratio itself, not minus 1), see the module docstring; None when it is unbounded (the
    base's mean is not significantly different from 0 at ``confidence``)."""
    from scipy import stats  # imported where used: 1 s of imports a single run never needs

    b = np.asarray(base, dtype=float)
    o = np.asarray(other, dtype=float)
    n = b.size
    if n < 2 or o.size != n:
        raise ValueError("Fieller's interval needs at least two pairs of values")
    t = float(stats.t.ppf(0.5 + confidence / 2, n - 1))
    covariance = np.cov(np.vstack([b, o]), ddof=1) / n  # of the two means
    v_bb, v_bo, v_oo = float(covariance[0, 0]), float(covariance[0, 1]), float(covariance[1, 1])
    mean_b, mean_o = float(b.mean()), float(o.mean())
    a = mean_b**2 - t**2 * v_bb
    if a <= 0.0:
        return None
    half_b = mean_o * mean_b - t**2 * v_bo
    c = mean_o**2 - t**2 * v_oo
    root = math.sqrt(max(half_b**2 - a * c, 0.0))  # >= 0 when a > 0: the ratio itself is inside
    return (half_b - root) / a, (half_b + root) / a


def relative_change(
    baseline: Mapping[Any, Any],
    other: Mapping[Any, Any],
    confidence: float = CONFIDENCE,
) -> RelativeChange:
    """``other`` relative to ``baseline`` (both seed -> value, paired by seed), with Fieller's
    interval at every number of pairs (see the module docstring): analytic, so the verdict that
    reads it is a deterministic function of the per-seed values (issue 43 items 5 and 9)."""
    seeds = sorted(set(baseline) & set(other), key=str)
    pairs = [
        (b, o)
        for seed in seeds
        if (b := _finite(baseline.get(seed))) is not None and (o := _finite(other.get(seed))) is not None
    ]
    if not pairs:
        return RelativeChange(0, None, None, None, "none", note="no seed has both values")
    base = np.array([b for b, _ in pairs])
    mine = np.array([o for _, o in pairs])
    n = len(pairs)
    if float(base.mean()) == 0.0:
        return RelativeChange(n, None, None, None, "none", note="the baseline's mean is 0: no relative change")
    change = float(_ratio_of_means(base, mine))
    if n < 2:
        return RelativeChange(n, change, None, None, "none", note="1 paired seed: no interval")
    method = FIELLER_TEXT
    if np.allclose(mine, base * (1.0 + change), rtol=1e-12, atol=0.0):  # the same ratio at every seed
        return RelativeChange(n, change, change, change, method)
    interval = fieller_interval(base, mine, confidence)
    if interval is None:
        return RelativeChange(
            n,
            change,
            None,
            None,
            method,
            note="Fieller's interval is unbounded: the baseline's mean is not significantly different from 0",
        )
    return RelativeChange(n, change, interval[0] - 1.0, interval[1] - 1.0, method)
