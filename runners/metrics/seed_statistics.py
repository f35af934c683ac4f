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
  is no interval and the verdict is ``no difference``, with a note saying why.

The relative change against the baseline is a ratio, whose Student t interval would be wrong:
over the n paired seeds, change = mean(scheduler) / mean(baseline) - 1, and its 95% interval is
a bootstrap one (BCa, :data:`BOOTSTRAP_RESAMPLES` resamples of whole seeds, so pairs stay
together; scipy.stats.bootstrap with a fixed random state, so the same values give the same
interval). Fewer than 3 pairs, a baseline mean of 0, or resamples that do not vary give no
interval, with a note.

Values are in the metric's stored unit (seconds, fractions, 1/s); None and non-finite values are
missing values.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 9_999
BOOTSTRAP_METHOD = "BCa"
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
    95% interval, seeds won, and the verdict at 95%."""

    n_pairs: int
    dropped: int
    diff_mean: float | None
    ci_low: float | None
    ci_high: float | None
    wins: int
    verdict: Verdict
    note: str | None = None

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
    return PairedComparison(len(pairs), dropped, diff_mean, low, high, wins, verdict, note)


@dataclass(frozen=True)
class RelativeChange:
    """mean(scheduler) / mean(baseline) - 1 over ``n_pairs`` paired seeds (a fraction: 0.1 is
    10% more), with its 95% bootstrap interval (None when there is none, said in ``note``)."""

    n_pairs: int
    change: float | None
    ci_low: float | None
    ci_high: float | None
    method: str = f"bootstrap {BOOTSTRAP_METHOD}, {BOOTSTRAP_RESAMPLES} resamples of paired seeds"
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ratio_of_means(base: np.ndarray, other: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.mean(other, axis=axis) / np.mean(base, axis=axis) - 1.0


def relative_change(
    baseline: Mapping[Any, Any],
    other: Mapping[Any, Any],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> RelativeChange:
    """``other`` relative to ``baseline`` (both seed -> value, paired by seed), see the module
    docstring."""
    seeds = sorted(set(baseline) & set(other), key=str)
    pairs = [
        (b, o)
        for seed in seeds
        if (b := _finite(baseline.get(seed))) is not None and (o := _finite(other.get(seed))) is not None
    ]
    if not pairs:
        return RelativeChange(0, None, None, None, note="no seed has both values")
    base = np.array([b for b, _ in pairs])
    mine = np.array([o for _, o in pairs])
    if float(base.mean()) == 0.0:
        return RelativeChange(len(pairs), None, None, None, note="the baseline's mean is 0: no relative change")
    change = float(_ratio_of_means(base, mine))
    if len(pairs) < 3:
        return RelativeChange(
            len(pairs), change, None, None, note=f"{len(pairs)} paired seed(s): too few for a bootstrap interval"
        )
    if np.allclose(mine, base * (1.0 + change), rtol=1e-12, atol=0.0):  # every resample gives the same ratio
        return RelativeChange(len(pairs), change, change, change)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples give nan, handled below
        result = stats.bootstrap(
            (base, mine),
            _ratio_of_means,
            paired=True,
            vectorized=True,
            n_resamples=resamples,
            confidence_level=confidence,
            method=BOOTSTRAP_METHOD,
            random_state=np.random.default_rng(0),
        )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return RelativeChange(
            len(pairs),
            change,
            None,
            None,
            note="the bootstrap resamples give no finite interval (a resampled baseline mean of 0?)",
        )
    return RelativeChange(len(pairs), change, low, high)
