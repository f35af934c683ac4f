"""SCLS's batch split (Alg. 1 of the slice-level scheduling paper), compiled with numba, for
:class:`runners.schedulers.slice_level.SCLSPolicy`. Apart from the policy's module so that listing
or configuring the schedulers does not import numba (issue 42)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit


@njit(cache=True)
def dp_batches_linear(lengths: Any, slope: Any, intercept: Any, limits: Any) -> Any:
    """SCLS Alg. 1 when serving time is linear in the batch size for a given longest prompt:
    T_serve(N, L_i) = slope[i] * N + intercept[i] (true of the latency model of eq. 1-4).
    Returns (previous-index array, total seconds). Kernel/reference pair: its reference, the
    recurrence written plainly over any serving-time function, is ``dp_batches`` in
    tests/unit/test_scls.py."""
    n = lengths.shape[0]
    total = np.zeros(n + 1)
    previous = np.zeros(n + 1, dtype=np.int64)
    for i in range(1, n + 1):
        limit = min(i, limits[i - 1])
        best = total[i - 1] + slope[i - 1] + intercept[i - 1]
        best_size = 1
        for size in range(2, limit + 1):
            candidate = total[i - size] + slope[i - 1] * size + intercept[i - 1]
            if candidate < best:
                best = candidate
                best_size = size
        total[i] = best
        previous[i] = i - best_size
    return previous, total[n]
