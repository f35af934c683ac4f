"""Non-negative least squares for a handful of coefficients, with the same bits on every CPU.

The simulator's policies plan with a latency model fitted to a noisy profile
(:mod:`runners.engines.planning_model`), and their decisions follow that fit's last digits.
``numpy.linalg.lstsq`` and ``scipy.optimize.nnls`` go through the BLAS/LAPACK build's kernels,
which OpenBLAS picks by CPU (Haswell, Zen, SkylakeX, ...): the same seed fitted on two CI
machines gave coefficients one unit in the last place apart, and with ``OPENBLAS_CORETYPE``
forced to another kernel, different decisions (issue 42: the simulator's golden results moved
between machines). Here every inner product is a correctly rounded sum (:func:`math.fsum`) and
every other step plain IEEE arithmetic in a fixed order, so a seed gives one result everywhere.

Method: Householder QR of the design (numerically as sound as LAPACK's ``gelsd`` on a
well-conditioned design; no normal equations). The non-negative solution: the unconstrained one
when it has no negative coefficient; otherwise the best, by residual, of the least-squares
solutions restricted to each subset of columns that come out non-negative (the NNLS optimum is
one of them: on its support it is the restricted least-squares solution). 2^k subsets: meant for
k <= 8 columns. A column that is (numerically) a combination of earlier ones is left at 0.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

#: A column whose norm after removing the earlier columns' part is below this fraction of its own
#: norm counts as dependent on them (its coefficient is left at 0).
RANK_TOLERANCE = 1e-10
#: Most columns :func:`nonnegative_least_squares` accepts (it tries every subset).
MAX_COLUMNS = 8


def _dot(x: Sequence[float], y: Sequence[float]) -> float:
    return math.fsum(a * b for a, b in zip(x, y))


def least_squares(columns: Sequence[Sequence[float]], y: Sequence[float]) -> list[float] | None:
    """The x minimising ||sum_j x_j columns[j] - y||, by Householder QR; None when the columns are
    not linearly independent (to :data:`RANK_TOLERANCE`). ``columns``: k columns of n values."""
    n, k = len(y), len(columns)
    if k == 0:
        return []
    if n < k:
        return None
    a = [[float(v) for v in column] for column in columns]
    b = [float(v) for v in y]
    for j in range(k):
        column = a[j]
        full_norm = math.sqrt(_dot(column, column))
        norm = math.sqrt(_dot(column[j:], column[j:]))
        if full_norm == 0.0 or norm <= RANK_TOLERANCE * full_norm:
            return None
        alpha = -norm if column[j] >= 0.0 else norm
        v = column[j:]
        v[0] -= alpha
        v_norm2 = _dot(v, v)
        for target in (*a[j + 1 :], b):
            scale = 2.0 * _dot(v, target[j:]) / v_norm2
            for i in range(j, n):
                target[i] -= scale * v[i - j]
        column[j] = alpha
        for i in range(j + 1, n):
            column[i] = 0.0
    x = [0.0] * k
    for j in reversed(range(k)):
        x[j] = (b[j] - math.fsum(a[i][j] * x[i] for i in range(j + 1, k))) / a[j][j]
    return x


def _residual(columns: Sequence[Sequence[float]], x: Sequence[float], y: Sequence[float]) -> float:
    """||sum_j x_j columns[j] - y||^2, each row's prediction summed in column order."""
    return math.fsum((math.fsum(x[j] * columns[j][i] for j in range(len(columns))) - y[i]) ** 2 for i in range(len(y)))


def nonnegative_least_squares(columns: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """The x >= 0 minimising ||sum_j x_j columns[j] - y|| (module docstring); ValueError for more
    than :data:`MAX_COLUMNS` columns."""
    k = len(columns)
    if k > MAX_COLUMNS:
        raise ValueError(f"nonnegative_least_squares tries every subset of columns: at most {MAX_COLUMNS}, got {k}")
    columns = [[float(v) for v in column] for column in columns]
    y = [float(v) for v in y]
    full = least_squares(columns, y)
    if full is not None and min(full, default=0.0) >= 0.0:
        return full
    best = [0.0] * k
    best_residual = _dot(y, y)
    for size in range(k, 0, -1):
        for subset in itertools.combinations(range(k), size):
            chosen = [columns[j] for j in subset]
            x = least_squares(chosen, y)
            if x is None or min(x) < 0.0:
                continue
            residual = _residual(chosen, x, y)
            if residual < best_residual:
                best_residual = residual
                best = [0.0] * k
                for j, value in zip(subset, x):
                    best[j] = value
    return best
