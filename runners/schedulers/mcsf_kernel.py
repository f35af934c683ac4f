"""MC-SF's admission rule (Jaillet et al., 003), compiled with numba: how many of the waiting
requests, sorted by predicted output, fit the KV cache at every future completion time
(:class:`runners.schedulers.memory_constrained.MCSFPolicy`, and engine-mcsf inside vLLM through
:mod:`runners.schedulers.vllm.mcsf_core`). Apart from the policy's module so that listing or
configuring the schedulers does not import numba (issue 42)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit


@njit(cache=True)
def admit_shortest_first_reference(
    running_base: Any, running_end: Any, candidate_base: Any, candidate_end: Any, capacity: float
) -> int:
    """How many of the candidates (sorted by predicted output) MC-SF admits: the longest prefix
    whose KV demand stays <= capacity at every completion time. Bases in tokens, ends in steps.

    The rule as written, O(n^2): every admission re-checks every completion time.
    :func:`admit_shortest_first` gives the same answer (tests/unit/test_scheduler_fast_paths.py)."""
    total = running_base.shape[0] + candidate_base.shape[0]
    ends = np.empty(total)
    bases = np.empty(total)
    demand = np.empty(total)  # KV demand at each member's completion time
    count = running_base.shape[0]
    ends[:count] = running_end
    bases[:count] = running_base
    for k in range(count):
        value = 0.0
        for q in range(count):
            if ends[q] >= ends[k]:
                value += bases[q] + ends[k]
        demand[k] = value
    for k in range(count):
        if demand[k] > capacity:
            return 0
    admitted = 0
    for c in range(candidate_base.shape[0]):
        base, end = candidate_base[c], candidate_end[c]
        own = base + end
        for q in range(count):
            if ends[q] >= end:
                own += bases[q] + end
        if own > capacity:
            return admitted
        feasible = True
        for k in range(count):
            if ends[k] <= end and demand[k] + base + ends[k] > capacity:
                feasible = False
                break
        if not feasible:
            return admitted
        for k in range(count):
            if ends[k] <= end:
                demand[k] += base + ends[k]
        ends[count] = end
        bases[count] = base
        demand[count] = own
        count += 1
        admitted += 1
    return admitted


@njit(cache=True)
def admit_shortest_first(
    running_base: Any, running_end: Any, candidate_base: Any, candidate_end: Any, capacity: float
) -> int:
    """:func:`admit_shortest_first_reference`'s answer without re-checking every completion time
    for every candidate. Candidates must come sorted by end (as MC-SF sorts them); otherwise this
    falls back to the reference. Inputs are whole numbers of tokens and steps, so every sum below
    is exact in float64 and the order of summation does not change a comparison.

    With D(t) the demand at a completion time t, admitting a candidate (base b, end e) adds b + t
    to D(t) for every t <= e, and needs D(t) + b + t <= capacity there and at e itself. Since the
    ends come in increasing order, every completion time already at or before the current end
    (the "region") gets every later admission, so its demand is lazily

        D(t) = a_t + t * admitted + admitted_bases   (a_t fixed when t joined the region),

    and the check is max_t (a_t + t * (admitted + 1)) + admitted_bases + b <= capacity. The
    maximum is kept as an upper bound that grows by the region's largest end per admission (no t
    grows faster) and is recomputed exactly only when the bound says no: O(n log n) when memory
    is plentiful; at worst O(n^2), like the reference, when it binds."""
    n_run = running_base.shape[0]
    n_cand = candidate_base.shape[0]
    for c in range(1, n_cand):
        if candidate_end[c] < candidate_end[c - 1]:
            return admit_shortest_first_reference(running_base, running_end, candidate_base, candidate_end, capacity)
    # running requests by end; D0 at each one's end: sum over ends >= it of (base + that end)
    by_end = np.argsort(running_end, kind="mergesort")
    run_end = running_end[by_end]
    run_base = running_base[by_end]
    suffix = np.zeros(n_run + 1)  # suffix[j] = sum of run_base[j:]
    for j in range(n_run - 1, -1, -1):
        suffix[j] = suffix[j + 1] + run_base[j]
    run_demand = np.empty(n_run)
    group = 0  # first index with the same end
    for j in range(n_run):
        if run_end[j] != run_end[group]:
            group = j
        run_demand[j] = suffix[group] + run_end[j] * (n_run - group)
        if run_demand[j] > capacity:
            return 0
    # the region: a_t and t of every completion time at or before the current end
    region_offset = np.empty(n_run + n_cand)
    region_time = np.empty(n_run + n_cand)
    size = 0
    largest_end = 0.0
    bound = -np.inf  # >= max over the region of a_t + t * (admitted + 1)
    admitted_bases = 0.0
    admitted = 0
    joined = 0  # running requests in the region (run_end[:joined])
    at_least = 0  # first running request with end >= the current candidate's
    tie_end = -1.0
    tie_bases = 0.0
    tie_count = 0
    for c in range(n_cand):
        base = candidate_base[c]
        end = candidate_end[c]
        while joined < n_run and run_end[joined] <= end:  # a running completion joins the region
            t = run_end[joined]
            a = run_demand[joined] - admitted_bases - t * admitted
            region_offset[size] = a
            region_time[size] = t
            size += 1
            largest_end = max(largest_end, t)
            bound = max(bound, a + t * (admitted + 1))
            joined += 1
        while at_least < n_run and run_end[at_least] < end:
            at_least += 1
        if end != tie_end:
            tie_end = end
            tie_bases = 0.0
            tie_count = 0
        # demand at the candidate's own completion: itself, running ones ending no earlier, ties
        own = base + end + suffix[at_least] + end * (n_run - at_least) + tie_bases + end * tie_count
        if own > capacity:
            return admitted
        if bound + admitted_bases + base > capacity:  # the bound says no: check exactly
            exact = -np.inf
            for k in range(size):
                exact = max(exact, region_offset[k] + region_time[k] * (admitted + 1))
            bound = exact
            if exact + admitted_bases + base > capacity:
                return admitted
        # admit: every region time gains base + t (bound: at most the largest end more)
        admitted_bases += base
        admitted += 1
        bound += largest_end
        tie_bases += base
        tie_count += 1
        a = own - admitted_bases - end * admitted
        region_offset[size] = a
        region_time[size] = end
        size += 1
        largest_end = max(largest_end, end)
        bound = max(bound, a + end * (admitted + 1))
    return admitted
