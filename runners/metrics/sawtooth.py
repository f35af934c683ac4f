"""The KV-usage sawtooth of run-to-completion batching (Baton Fig. 8), counted in a time series."""

from __future__ import annotations

from typing import Any

import numpy as np


def sawtooth_cycles(kv_usage: Any, high_fraction: float = 0.6, low_fraction: float = 0.3) -> int:
    """Count rise-and-fall cycles: the series climbs above ``high_fraction`` of its 90th
    percentile, then falls below ``low_fraction`` of it (hysteresis, so noise does not count).
    The 90th percentile, not the maximum, is the reference so one outlier peak cannot hide
    the pattern. Continuous batching under steady load stays level and counts few cycles;
    static batching counts up to one per batch."""
    series = np.asarray(kv_usage, dtype=float)
    series = series[np.isfinite(series)]
    if series.size == 0 or series.max() <= 0:
        return 0
    reference = float(np.percentile(series, 90))
    high, low = high_fraction * reference, low_fraction * reference
    cycles = 0
    above = False
    for value in series:
        if not above and value >= high:
            above = True
        elif above and value <= low:
            above = False
            cycles += 1
    return cycles
