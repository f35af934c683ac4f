"""The SLO-aware paper's (004) priority-mapping search, compiled with numba.

A plan is an order of the waiting requests (``order``, indices into the tables) split into
consecutive batches (``sizes[:batches]``, each at most ``max_batch``). Batches run one after
another on the instance; a batch lasts as long as its slowest member (eq. 11). For request i in
a batch of size b (tables are indexed [i, b - 1], seconds):

    wait_i = waited_i + base + (durations of the earlier batches)   # from ARRIVAL (eq. 4, 8)
    TTFT_i = wait_i + prefill[i, b-1];  E2E_i = wait_i + exec[i, b-1];  TPOT_i = tpot[i, b-1]
    G = (requests meeting every SLO limit) / sum_i E2E_i            # eq. 2-3, 1/s

``waited_i`` is the time the request has already spent waiting, so holding a request can only
make its predicted latency worse. The annealer uses the paper's three moves - squeeze a request
into the previous batch, delay one into the next (or a new last) batch, swap two - and keeps the
best plan seen.

Normalisation: the annealer works on f = 10,000 * G / G_upper, where G_upper = n / sum of every
request's latency alone on an idle instance (an upper bound on G). One unit is a basis point of
that bound, so the paper's temperatures mean something: at T0 = 500 a move that loses 1% of
G_upper is accepted with probability exp(-100/500) = 0.82, at the threshold T = 20 with
exp(-100/20) = 0.007.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, fastmath=True)
def evaluate_plan(order, sizes, batches, exec_s, prefill_s, tpot_s, waited_s, base_s, ttft_limit, tpot_limit,
                  e2e_limit):
    """(G in 1/s, number meeting their SLO) of a plan."""
    clock = base_s
    total = 0.0
    met = 0
    position = 0
    for k in range(batches):
        size = sizes[k]
        column = size - 1
        duration = 0.0
        for q in range(position, position + size):
            i = order[q]
            execution = exec_s[i, column]
            if execution > duration:
                duration = execution
            wait = waited_s[i] + clock
            e2e = wait + execution
            total += e2e
            if e2e <= e2e_limit[i] and wait + prefill_s[i, column] <= ttft_limit[i] and tpot_s[i, column] <= tpot_limit[i]:
                met += 1
        clock += duration
        position += size
    if total <= 0.0:
        return 0.0, met
    return met / total, met


@njit(cache=True, fastmath=True)
def _batch_of(sizes, batches, position):
    start = 0
    for k in range(batches):
        if position < start + sizes[k]:
            return k, start
        start += sizes[k]
    return batches - 1, start - sizes[batches - 1]


@njit(cache=True, fastmath=True)
def _remove_empty(sizes, batches, k):
    for j in range(k, batches - 1):
        sizes[j] = sizes[j + 1]
    sizes[batches - 1] = 0
    return batches - 1


@njit(cache=True, fastmath=True)
def anneal(order0, sizes0, batches0, exec_s, prefill_s, tpot_s, waited_s, base_s, ttft_limit, tpot_limit, e2e_limit,
           max_batch, t0, t_threshold, iterations, decay, seed, g_upper):
    """Simulated annealing from a start plan; returns (order, sizes, batches, G) of the best plan seen."""
    np.random.seed(seed)
    n = order0.shape[0]
    order = order0.copy()
    sizes = np.zeros(n + 1, dtype=np.int64)
    sizes[:batches0] = sizes0[:batches0]
    batches = batches0
    g, _ = evaluate_plan(order, sizes, batches, exec_s, prefill_s, tpot_s, waited_s, base_s, ttft_limit, tpot_limit,
                         e2e_limit)
    best_order = order.copy()
    best_sizes = sizes.copy()
    best_batches = batches
    best_g = g
    scale = 10000.0 / g_upper if g_upper > 0 else 1.0
    saved_sizes = sizes.copy()
    temperature = t0
    while temperature >= t_threshold and n > 1:
        for _ in range(iterations):
            # moves are applied in place and undone when rejected (no O(n) copies per move)
            move = np.random.randint(3)
            q = np.random.randint(n)
            k, start = _batch_of(sizes, batches, q)
            old_batches = batches
            swapped_with = -1
            if move == 0:  # squeeze into the previous batch
                if k == 0 or sizes[k - 1] >= max_batch:
                    continue
                saved_sizes[: batches + 1] = sizes[: batches + 1]
                swapped_with = start
                sizes[k - 1] += 1
                sizes[k] -= 1
                if sizes[k] == 0:
                    batches = _remove_empty(sizes, batches, k)
            elif move == 1:  # delay into the next batch, or a new last one
                last = start + sizes[k] - 1
                if k == batches - 1:
                    if sizes[k] == 1:
                        continue
                    saved_sizes[: batches + 1] = sizes[: batches + 1]
                    swapped_with = last
                    sizes[k] -= 1
                    sizes[batches] = 1
                    batches += 1
                else:
                    if sizes[k + 1] >= max_batch:
                        continue
                    saved_sizes[: batches + 1] = sizes[: batches + 1]
                    swapped_with = last
                    sizes[k] -= 1
                    sizes[k + 1] += 1
                    if sizes[k] == 0:
                        batches = _remove_empty(sizes, batches, k)
            else:  # swap two requests
                swapped_with = np.random.randint(n)
                if swapped_with == q:
                    continue
            order[q], order[swapped_with] = order[swapped_with], order[q]
            new_g, _ = evaluate_plan(order, sizes, batches, exec_s, prefill_s, tpot_s, waited_s, base_s, ttft_limit,
                                     tpot_limit, e2e_limit)
            delta = (new_g - g) * scale
            if delta >= 0.0 or np.random.random() < np.exp(delta / temperature):
                g = new_g
                if g > best_g:
                    best_g = g
                    best_order[:] = order
                    best_sizes[:] = sizes
                    best_batches = batches
            else:  # undo
                order[q], order[swapped_with] = order[swapped_with], order[q]
                if move != 2:  # every size the move touched lies in [0, old_batches]
                    sizes[: old_batches + 1] = saved_sizes[: old_batches + 1]
                    batches = old_batches
        temperature *= decay
    return best_order, best_sizes, best_batches, best_g
