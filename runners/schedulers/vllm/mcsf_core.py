"""engine-mcsf's decision logic without vLLM (importable by schedlab and its tests): the queue
order, the predicted output of a request, and how many waiting requests MC-SF admits.

The admission count is :func:`runners.schedulers.mcsf_kernel.admit_shortest_first`, the
function the client-side mcsf policy calls (one function, two callers), fed with the same rule
for what a request holds: its tokens plus ``block_size - 1`` (KV is allocated in blocks, so a
request can hold up to a block less one token more than it uses). Tokens are tokens, remaining
output is in decode steps (one token per step), capacities in tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from runners.schedulers.mcsf_kernel import admit_shortest_first
from runners.schedulers.vllm import PREDICTED_OUTPUT_ARG

#: Where a request's predicted output came from (decision field names end with these).
FROM_EXTRA_ARGS = "extra_args"
FROM_MAX_TOKENS = "max_tokens"


def predicted_output_tokens(extra_args: Mapping[str, Any] | None, max_tokens: int) -> tuple[int, str]:
    """(predicted output tokens >= 1, source): the client's prediction sent as
    ``extra_args[PREDICTED_OUTPUT_ARG]`` (a finite number, rounded), else the request's
    ``max_tokens`` (schedlab sends each request's target length there: the oracle, the paper's
    setting). A value that is not a finite number is not a prediction: max_tokens is used."""
    value = (extra_args or {}).get(PREDICTED_OUTPUT_ARG)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return max(1, int(round(value))), FROM_EXTRA_ARGS
    return max(1, int(max_tokens)), FROM_MAX_TOKENS


def remaining_steps(predicted: int, generated: int) -> int:
    """Predicted decode steps left (>= 1): predicted output less the tokens generated so far (as
    the client's ``predicted_remaining``)."""
    return max(1, predicted - generated)


def shortest_first_key(remaining: int, arrival_s: float) -> tuple[int, float]:
    """MC-SF's queue order: shortest predicted remaining output first, ties by arrival (the
    client's ``lexsort((arrival, ends))``); sorted() is stable, so equal keys keep their order."""
    return remaining, arrival_s


def capacity_tokens(usable_blocks: int, block_size: int, memory_fraction: float) -> float:
    """M, the KV capacity MC-SF plans for (tokens): usable blocks x block size x memory_fraction."""
    return usable_blocks * block_size * memory_fraction


def mcsf_admissions(
    running_tokens: Sequence[float],
    running_remaining: Sequence[float],
    waiting_tokens: Sequence[float],
    waiting_remaining: Sequence[float],
    block_size: int,
    capacity: float,
) -> int:
    """How many of the waiting requests (already in MC-SF order, shortest remaining first) MC-SF
    admits: the longest prefix whose KV demand stays <= ``capacity`` at every future completion
    time of the running and admitted requests (:func:`admit_shortest_first`).

    ``running_tokens``: tokens each running request holds once its current tokens are in the
    cache (prompt + output so far); ``waiting_tokens``: the tokens a waiting request prefills
    (prompt, plus its output so far when it was preempted). Both get ``block_size - 1`` of
    allocation slack, as the client adds. With nothing running at least one request is admitted
    (as the client does: one larger than the cache alone goes to the engine, which says so)."""
    if not len(waiting_tokens):
        return 0
    slack = float(block_size - 1)
    held = np.asarray(running_tokens, dtype=float) + slack
    bases = np.asarray(waiting_tokens, dtype=float) + slack
    admitted = int(
        admit_shortest_first(
            held,
            np.asarray(running_remaining, dtype=float),
            bases,
            np.asarray(waiting_remaining, dtype=float),
            float(capacity),
        )
    )
    if admitted == 0 and not len(running_tokens):
        return 1
    return admitted


def demand_peak(tokens: Sequence[float], remaining: Sequence[float], block_size: int) -> float:
    """The largest KV demand (tokens, with the block slack) of these requests over their future
    completion times: max over t in remaining of sum over requests with remaining >= t of
    (tokens + block_size - 1 + t). 0 for none. O(n log n)."""
    if not len(tokens):
        return 0.0
    ends = np.asarray(remaining, dtype=float)
    order = np.argsort(ends, kind="mergesort")
    ends = ends[order]
    bases = np.asarray(tokens, dtype=float)[order] + float(block_size - 1)
    suffix = np.cumsum(bases[::-1])[::-1]  # sum of bases from each position on
    count = len(ends) - np.arange(len(ends))
    # among equal ends, the first position counts them all
    first = np.searchsorted(ends, ends, side="left")
    return float(np.max(suffix[first] + ends * count[first]))


def warm_up() -> None:
    """Compile the numba kernel now (start-up), not in the engine's first step."""
    mcsf_admissions([10.0], [5.0], [10.0, 20.0], [3.0, 4.0], 16, 1000.0)
