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

Speed (``bench/scheduler_overhead.py``): a move only changes the plan from one batch on, so the
annealer keeps the clock, E2E sum and SLO count at the start of every batch and re-scores a
move from its first changed batch, continuing the same sums in the same order, so the G it gets
is bit-identical to scoring the whole plan and a seed gives the same plan as before. Short plans
are scored without a branch per request (which requests meet their SLO is hard to predict
there); long ones with it (most miss, and the branch skips loads). Both chains and the start
points run in one compiled call (:func:`search`). What is left at 10 requests with max batch 1
is mostly numba's np.random draws (the Mersenne Twister, rejection-sampled), which fix the moves
tried and so are kept. ``tests/unit/test_scheduler_fast_paths.py`` checks all of it against the
annealer as first written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba.extending import register_jitable

from runners.engines.latency_model import decode_seconds, mean_decode_context, phase_seconds

BRANCHLESS_UP_TO = 64  # plans of at most this many requests are scored without a branch per SLO test

# Every kernel below takes the problem as one tuple ``tables`` (numba passes it as a struct and
# unpacking it is free), built by :attr:`runners.schedulers.slo_aware.PlanInputs.tables`:
#     (exec_s, prefill_s, tpot_s, waited_s, ttft_limit, tpot_limit, e2e_limit)
# the first three [request, batch size - 1] tables, the rest per request (seconds, limits inf when
# unset). A plan's running sums at the start of each batch k (and after the last) are one tuple
# ``state`` = (clock_at, total_at, met_at, start_at): clock (s), E2E sum (s), requests meeting their
# SLO, first position of batch k.


@njit(cache=True)
def _new_state(length):
    """A zeroed ``state`` tuple of ``length`` entries per array."""
    return (
        np.zeros(length),
        np.zeros(length),
        np.zeros(length, dtype=np.int64),
        np.zeros(length, dtype=np.int64),
    )


# -- scoring ------------------------------------------------------------------------------------
# Three versions of one sum, kept apart for speed (the SLO test is the innermost loop's body):
# _score_from tests the SLO with a branch (short-circuit: a request that misses its E2E limit loads
# nothing more), _score_from_branchless adds the test's 0/1 (no mispredicted branch on short plans),
# _score_from_singles drops the batch loop for max_batch 1. One function with a flag would put a
# branch in that loop. All three add in the same order, so they give the same G to the bit.
@njit(cache=True)
def _score_from(k0, order, sizes, batches, tables, state, new_state):
    """G of a plan that equals the current one before batch ``k0``: continue the plan's sums
    from ``state`` at the start of batch k0, writing the state at later batches to ``new_state``.
    Same sum as :func:`_score_from_branchless` and :func:`_score_from_singles` (see above)."""
    exec_s, prefill_s, tpot_s, waited_s, ttft_limit, tpot_limit, e2e_limit = tables
    clock_at, total_at, met_at, start_at = state
    new_clock, new_total, new_met, new_start = new_state
    clock = clock_at[k0]
    total = total_at[k0]
    met = met_at[k0]
    position = start_at[k0]
    for k in range(k0, batches):
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
            if (
                e2e <= e2e_limit[i]
                and wait + prefill_s[i, column] <= ttft_limit[i]
                and tpot_s[i, column] <= tpot_limit[i]
            ):
                met += 1
        clock += duration
        position += size
        new_clock[k + 1] = clock
        new_total[k + 1] = total
        new_met[k + 1] = met
        new_start[k + 1] = position
    if total <= 0.0:
        return 0.0
    return met / total


@njit(cache=True)
def evaluate_plan(order, sizes, batches, tables, base_s):
    """(G in 1/s, number meeting their SLO) of a plan: _score_from the first batch."""
    state = _new_state(batches + 1)
    state[0][0] = base_s
    g = _score_from(0, order, sizes, batches, tables, state, state)
    return g, state[2][batches]


@njit(cache=True)
def full_batches(n, max_batch):
    """(sizes, batches): n requests in full batches of ``max_batch`` (the last may be short);
    ``sizes`` has room for n + 1 batches, as the annealing moves need."""
    sizes = np.zeros(n + 1, dtype=np.int64)
    batches = 0
    remaining = n
    while remaining > 0:
        sizes[batches] = min(max_batch, remaining)
        remaining -= sizes[batches]
        batches += 1
    return sizes, batches


@njit(cache=True)
def _score_from_branchless(k0, order, sizes, batches, tables, state, new_state):
    """:func:`_score_from` without a branch per request: faster for short plans, where which requests
    meet their SLO is hard to predict; slower for long ones (most miss, and the branch skips loads)."""
    exec_s, prefill_s, tpot_s, waited_s, ttft_limit, tpot_limit, e2e_limit = tables
    clock_at, total_at, met_at, start_at = state
    new_clock, new_total, new_met, new_start = new_state
    clock = clock_at[k0]
    total = total_at[k0]
    met = met_at[k0]
    position = start_at[k0]
    for k in range(k0, batches):
        size = sizes[k]
        column = size - 1
        duration = 0.0
        for q in range(position, position + size):
            i = order[q]
            execution = exec_s[i, column]
            duration = max(duration, execution)
            wait = waited_s[i] + clock
            e2e = wait + execution
            total += e2e
            met += (
                (e2e <= e2e_limit[i])
                & (wait + prefill_s[i, column] <= ttft_limit[i])
                & (tpot_s[i, column] <= tpot_limit[i])
            )
        clock += duration
        position += size
        new_clock[k + 1] = clock
        new_total[k + 1] = total
        new_met[k + 1] = met
        new_start[k + 1] = position
    if total <= 0.0:
        return 0.0
    return met / total


@njit(cache=True)
def _score_from_singles(k0, order, tables, state, new_state):
    """:func:`_score_from_branchless` when every batch holds one request (max_batch 1: batch =
    position; start_at is not read or written)."""
    exec_s, prefill_s, tpot_s, waited_s, ttft_limit, tpot_limit, e2e_limit = tables
    clock_at, total_at, met_at, _ = state
    new_clock, new_total, new_met, _ = new_state
    clock = clock_at[k0]
    total = total_at[k0]
    met = met_at[k0]
    for k in range(k0, order.shape[0]):
        i = order[k]
        execution = exec_s[i, 0]
        wait = waited_s[i] + clock
        e2e = wait + execution
        total += e2e
        met += (e2e <= e2e_limit[i]) & (wait + prefill_s[i, 0] <= ttft_limit[i]) & (tpot_s[i, 0] <= tpot_limit[i])
        clock += max(0.0, execution)
        new_clock[k + 1] = clock
        new_total[k + 1] = total
        new_met[k + 1] = met
    if total <= 0.0:
        return 0.0
    return met / total


@njit(cache=True)
def _remove_empty(sizes, batches, k):
    for j in range(k, batches - 1):
        sizes[j] = sizes[j + 1]
    sizes[batches - 1] = 0
    return batches - 1


@njit(cache=True)
def anneal(order0, sizes0, batches0, tables, base_s, max_batch, t0, t_threshold, iterations, decay, seed, g_upper):
    """Simulated annealing from a start plan; returns (order, sizes, batches, G) of the best plan seen.

    Random draws (numba's np.random, seeded here), in order, per iteration: the move
    (randint(3)), a position (randint(n)), for a swap the second position (randint(n)), and for
    a worse plan the acceptance test (random()).

    Its plain reference is ``reference_anneal`` in ``tests/unit/test_scheduler_fast_paths.py``
    (the annealer as first written, re-scoring the whole plan per move); the moves are written
    alike in both on purpose, and kept apart so that test can check this one plans the same.
    """
    np.random.seed(seed)
    n = order0.shape[0]
    order = order0.copy()
    sizes = np.zeros(n + 1, dtype=np.int64)
    sizes[:batches0] = sizes0[:batches0]
    batches = batches0
    # state at the start of each batch (index k) and after the last one (index batches)
    state = _new_state(n + 2)
    new_state = _new_state(n + 2)
    clock_at, total_at, met_at, start_at = state
    new_clock, new_total, new_met, new_start = new_state
    batch_at = np.zeros(n, dtype=np.int64)  # batch of each position
    clock_at[0] = base_s
    branchless = n <= BRANCHLESS_UP_TO
    g = _score_from(0, order, sizes, batches, tables, state, state)
    for k in range(batches):
        batch_at[start_at[k] : start_at[k + 1]] = k
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
            old_batches = batches
            if move == 2:  # swap two requests
                swapped_with = np.random.randint(n)
                if swapped_with == q:
                    continue
                first = min(batch_at[q], batch_at[swapped_with])
            elif max_batch == 1:  # every batch is full: nothing to squeeze or delay
                continue
            else:
                k = batch_at[q]
                start = start_at[k]
                if move == 0:  # squeeze into the previous batch
                    if k == 0 or sizes[k - 1] >= max_batch:
                        continue
                    saved_sizes[: batches + 1] = sizes[: batches + 1]
                    swapped_with = start
                    sizes[k - 1] += 1
                    sizes[k] -= 1
                    if sizes[k] == 0:
                        batches = _remove_empty(sizes, batches, k)
                    first = k - 1
                else:  # delay into the next batch, or a new last one
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
                    first = k
            order[q], order[swapped_with] = order[swapped_with], order[q]
            if max_batch == 1:
                new_g = _score_from_singles(first, order, tables, state, new_state)
            elif branchless:
                new_g = _score_from_branchless(first, order, sizes, batches, tables, state, new_state)
            else:
                new_g = _score_from(first, order, sizes, batches, tables, state, new_state)
            delta = (new_g - g) * scale
            if delta >= 0.0 or np.random.random() < np.exp(delta / temperature):
                g = new_g
                for b in range(first + 1, batches + 1):
                    clock_at[b] = new_clock[b]
                    total_at[b] = new_total[b]
                    met_at[b] = new_met[b]
                if move != 2:  # the batch boundaries moved from batch `first` on
                    for b in range(first + 1, batches + 1):
                        start_at[b] = new_start[b]
                    for b in range(first, batches):
                        for position in range(start_at[b], start_at[b + 1]):
                            batch_at[position] = b
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


@njit(cache=True)
def search(tables, base_s, t0, t_threshold, iterations, decay, seed, chains, g_upper):
    """Algorithm 1 in one call: the two start points (order by predicted latency, arrival order;
    full batches of the tables' width), the latency order returned at once if it meets every SLO,
    then annealing from the better start point (chains = 1, the paper) or from both (chains = 2,
    keeping the better result; ties go to the first). ``g_upper`` is the bound G is normalised by
    (numpy's pairwise sum, so it comes from the caller). Returns (order, sizes, batches, G)."""
    exec_s = tables[0]
    n = tables[3].shape[0]  # waited_s
    max_batch = exec_s.shape[1]
    sizes, batches = full_batches(n, max_batch)
    by_latency = np.argsort(exec_s[:, max_batch - 1], kind="mergesort").astype(np.int64)
    arrival = np.arange(n, dtype=np.int64)
    g_latency, met_latency = evaluate_plan(by_latency, sizes, batches, tables, base_s)
    if met_latency == n or n <= 1:
        return by_latency, sizes, batches, g_latency
    g_arrival, _ = evaluate_plan(arrival, sizes, batches, tables, base_s)
    if chains == 1:  # the paper: only the better start point (the latency order on a tie)
        start = by_latency if g_latency >= g_arrival else arrival
        return anneal(
            start, sizes, batches, tables, base_s, max_batch, t0, t_threshold, iterations, decay, seed, g_upper
        )
    best = anneal(
        by_latency, sizes, batches, tables, base_s, max_batch, t0, t_threshold, iterations, decay, seed, g_upper
    )
    other = anneal(
        arrival, sizes, batches, tables, base_s, max_batch, t0, t_threshold, iterations, decay, seed + 7919, g_upper
    )
    if other[3] > best[3]:
        return other
    return best


# The latency model's eq. 14/15 (one implementation, in runners.engines.latency_model), made
# callable from the compiled kernel below; plain Python everywhere else.
register_jitable(phase_seconds)
register_jitable(mean_decode_context)
register_jitable(decode_seconds)


@njit(cache=True)
def latency_tables(inputs: Any, computed: Any, produced: Any, width: int, prefill_coef: Any, decode_coef: Any) -> Any:
    """(execution, prefill, TPOT) tables [request, batch size - 1], seconds, from the latency
    model's prefill and decode coefficients (alpha, beta, gamma, delta) - eq. 14/15, with the
    decode context averaged over the steps (closed form of eq. 16); the prefill of the prompt
    tokens ``computed`` (the prompt less what the prefix cache is expected to hold), the decode
    over the whole prompt ``inputs``: the latency model's
    :func:`~runners.engines.latency_model.phase_seconds` and ``decode_seconds``, compiled. numba
    caches this kernel by this file only: after editing those functions, clear ``__pycache__``
    (tests/unit/test_latency_formula.py compares the kernel with them)."""
    n = inputs.shape[0]
    exec_s = np.empty((n, width))
    prefill_s = np.empty((n, width))
    tpot_s = np.empty((n, width))
    pa, pb, pg, pd = prefill_coef
    da, db, dg, dd = decode_coef
    for i in range(n):
        tokens = inputs[i]
        steps = max(produced[i] - 1.0, 0.0)
        for column in range(width):
            batch = column + 1.0
            prefill = phase_seconds(pa, pb, pg, pd, batch, computed[i])
            decode = decode_seconds(da, db, dg, dd, batch, tokens, steps)
            prefill_s[i, column] = prefill
            exec_s[i, column] = prefill + decode
            tpot_s[i, column] = decode / max(steps, 1.0) if steps > 0 else 0.0
    return exec_s, prefill_s, tpot_s
