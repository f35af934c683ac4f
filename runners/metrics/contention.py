"""How contended a run was, and whether compared runs could have differed at all.

Contention is read from the time-series samples (``timeseries.parquet`` rows: ``t_s``,
``instance``, ``waiting``, ``gateway_pending``). At each sample time the number of requests
waiting is

    waiting(t) = sum over instances of the engine's waiting queue  +  requests the scheduler holds

``gateway_pending`` is one gateway-wide count that every instance's row repeats, so it is taken
once per sample time, not summed. An engine that did not answer a scrape (``waiting`` missing)
adds nothing at that time. From ``waiting(t)`` at sample times t_0 < ... < t_k:

- ``waiting_peak`` = max waiting(t_i), requests;
- ``waiting_mean`` = time average with each sample held until the next one:
  sum_i waiting(t_i) (t_{i+1} - t_i) / (t_k - t_0), requests (the one value when k = 0);
- ``queued_share`` = the same time average of [waiting(t_i) >= 1], a fraction 0-1;
- ``samples`` = k + 1, the number of sample times.

Schedulers only differ when requests wait: with no queue every policy dispatches each request
on arrival and the runs make identical decisions. :func:`identical_decisions` checks that on the
request tables and :func:`identical_decisions_message` says it in words.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from runners.json_values import dotted_value

DECISION_COLUMNS = ("dispatch_s", "first_token_s", "finish_s")
DECISION_TOLERANCE_S = 1e-9
CONTENTION_HINT = "create contention with a higher rate, fewer slots (engine.max_num_seqs) or less KV"


def contention(samples: pd.DataFrame | Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{waiting_peak, waiting_mean, queued_share, samples}`` of time-series rows (see the
    module docstring); the three values are None when there are no samples."""
    frame = samples if isinstance(samples, pd.DataFrame) else pd.DataFrame(list(samples))
    if frame.empty or "t_s" not in frame:
        return {"waiting_peak": None, "waiting_mean": None, "queued_share": None, "samples": 0}
    frame = frame.assign(
        instance=frame["instance"] if "instance" in frame else 0,
        waiting=pd.to_numeric(frame["waiting"], errors="coerce") if "waiting" in frame else np.nan,
        gateway_pending=(
            pd.to_numeric(frame["gateway_pending"], errors="coerce") if "gateway_pending" in frame else np.nan
        ),
    )
    # a final sample at the same instant as a regular one: the later row of an instance counts
    frame = frame.drop_duplicates(subset=["t_s", "instance"], keep="last")
    by_time = frame.groupby("t_s", sort=True)
    engine = by_time["waiting"].sum(min_count=0).fillna(0.0)
    gateway = by_time["gateway_pending"].max().fillna(0.0)
    waiting = (engine + gateway).to_numpy(dtype=float)
    times = engine.index.to_numpy(dtype=float)
    span = float(times[-1] - times[0])
    if span > 0:
        weights = np.diff(times, append=times[-1]) / span
    else:
        weights = np.zeros(times.size)
        weights[-1] = 1.0
    return {
        "waiting_peak": int(waiting.max()),
        "waiting_mean": _weighted_sum(waiting, weights),
        "queued_share": _weighted_sum((waiting >= 1).astype(float), weights),
        "samples": int(times.size),
    }


def _weighted_sum(values: np.ndarray, weights: np.ndarray) -> float:
    """sum(values * weights), correctly rounded (math.fsum of the exact products' roundings): the
    same bits on every CPU. np.dot goes through the BLAS build's SIMD kernel, whose summation order
    differs between machines (a golden summary's last digits moved between two CI machines)."""
    return math.fsum((values * weights).tolist())


def identical_decisions(request_tables: Sequence[pd.DataFrame], tolerance_s: float = DECISION_TOLERANCE_S) -> bool:
    """True when every table (``requests.parquet`` rows) holds the same request ids with the same
    ``dispatch_s``, ``first_token_s`` and ``finish_s`` (seconds) within ``tolerance_s``; a value
    missing in one run must be missing in the others. Fewer than two tables: False (nothing to
    compare)."""
    if len(request_tables) < 2:
        return False
    columns = list(DECISION_COLUMNS)

    def decisions(table: pd.DataFrame) -> pd.DataFrame:
        return table.set_index("request_id")[columns].apply(pd.to_numeric, errors="coerce").sort_index()

    first = decisions(request_tables[0])
    if not first.index.is_unique:
        return False
    for table in request_tables[1:]:
        other = decisions(table)
        if not other.index.equals(first.index):
            return False
        a, b = first.to_numpy(dtype=float), other.to_numpy(dtype=float)
        same_missing = np.isnan(a) == np.isnan(b)
        close = np.isnan(a) | (np.abs(a - b) <= tolerance_s)
        if not (same_missing.all() and close.all()):
            return False
    return True


def identical_decisions_message(summaries: Sequence[Any], identical: bool) -> str | None:
    """The plain sentence to show when compared runs made identical decisions (None otherwise):
    why (how much anything waited, from each summary's ``contention``) and what would create
    contention. ``summaries``: run summaries (runners.store.models.RunSummary, or mappings of the
    same shape)."""
    if not identical:
        return None
    peak = _largest(summaries, "waiting_peak")
    share = _largest(summaries, "queued_share")
    if peak is None:
        reason = "the runs do not record how many requests waited"
    elif peak == 0:
        reason = "the engine never had a queue (max waiting 0)"
    else:
        queued = "" if share is None else f", a queue {share * 100:.1f}% of the time"
        reason = (
            f"requests waited only briefly (max waiting {peak:.0f}{queued}) "
            "and every scheduler served them in the same order"
        )
    return f"these runs made identical decisions: {reason}; {CONTENTION_HINT}"


def _largest(summaries: Sequence[Any], key: str) -> float | None:
    """The largest finite ``contention.<key>`` over the summaries; None when none has it."""
    values = []
    for summary in summaries:
        value = dotted_value(summary, f"contention.{key}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
            values.append(float(value))
    return max(values) if values else None
