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

Values are in the metric's stored unit (seconds, fractions, 1/s); None and non-finite values are
missing values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
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
    pairs = [(b, o) for seed in seeds
             if (b := _finite(baseline.get(seed))) is not None and (o := _finite(other.get(seed))) is not None]
    dropped = len(seeds) - len(pairs)
    if not pairs:
        return PairedComparison(0, dropped, None, None, None, 0, "no difference", "no seed has both values")
    diffs = [o - b for b, o in pairs]
    wins = sum(1 for d in diffs if (d > 0 if higher_is_better else d < 0))
    interval = mean_interval(diffs, confidence)
    diff_mean = float(np.mean(diffs))
    if interval is None:
        return PairedComparison(len(pairs), dropped, diff_mean, None, None, wins, "no difference",
                                "1 paired seed: no interval, no verdict; differences this size can flip with the seed")
    low, high = interval
    if low > 0:
        verdict: Verdict = "better" if higher_is_better else "worse"
    elif high < 0:
        verdict = "worse" if higher_is_better else "better"
    else:
        verdict = "no difference"
    note = f"{dropped} seed(s) without a value on one side dropped" if dropped else None
    return PairedComparison(len(pairs), dropped, diff_mean, low, high, wins, verdict, note)
