"""The prefix cache's hit rate over time, from a run's time series (issue 31 items 4 and 7).

``timeseries.parquet`` (schema 7+) holds, per instance and sample, the prefix cache's counters since
the run's start (:data:`runners.store.timeseries.PREFIX_CACHE_NAMES`: prompt tokens looked up, and
found cached); they are null where the engine does not report them (SGLang, LMDeploy, fake servers,
imported runs, runs of older schema versions). The hit rate over a stretch of run time is the
hits' rise over the queries' rise in it (tokens / tokens); :func:`hit_rate_over_time` gives it at
every sample over a trailing window, in the catalog's display unit of the run's hit rate (%,
:func:`runners.metrics.catalog.metric` ``prefix_cache_hit_rate``). No streamlit here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from runners.metrics.catalog import Metric, metric

QUERIES = "prefix_cache_queries_tokens"
HITS = "prefix_cache_hits_tokens"
#: The trailing window of the hit rate over time, seconds of run time (simulated on the simulator).
HIT_RATE_WINDOW_S = 5.0


def hit_rate_entry() -> Metric:
    """The catalog entry of the prefix-cache hit rate (label, unit %, scale): the run's whole-run
    value and its value over time read alike."""
    return metric("prefix_cache_hit_rate")


def has_prefix_counters(timeseries: pd.DataFrame | None) -> bool:
    """Whether ``timeseries`` (a run's ``timeseries.parquet`` frame) holds prefix-cache counters:
    both columns present with some non-null value."""
    if timeseries is None or not len(timeseries):
        return False
    return all(column in timeseries.columns and bool(timeseries[column].notna().any()) for column in (QUERIES, HITS))


def hit_rate_over_time(timeseries: pd.DataFrame, window_s: float = HIT_RATE_WINDOW_S) -> pd.Series:
    """The prefix-cache hit rate at each sample time of ``timeseries`` (seconds of run time, the
    index ``t_s``), in % (the catalog's display unit): over the trailing ``window_s`` seconds,

        (hits(t) - hits(t - window_s)) / (queries(t) - queries(t - window_s))

    with hits and queries summed over instances (tokens, counters since the run's start). A
    counter at ``t - window_s`` is its value at the latest sample at or before that time (0 before
    the first sample: counters start at the run's start); an instance's missing sample keeps its
    last value. NaN where no token was looked up in the window (a gap in a chart), and where the
    file has no counters. Exact: no smoothing beyond the window."""
    if window_s <= 0:
        raise ValueError(f"window_s must be positive, got {window_s}")
    if not has_prefix_counters(timeseries):
        known = timeseries is not None and "t_s" in timeseries
        times: np.ndarray = np.sort(timeseries["t_s"].unique()) if known else np.asarray([], dtype=float)
        return pd.Series(np.nan, index=pd.Index(times, name="t_s", dtype=float), dtype=float, name=HITS)
    counters: list[pd.Series] = []
    for column in (QUERIES, HITS):
        values = pd.to_numeric(timeseries[column], errors="coerce").astype(float)
        wide = values.groupby([timeseries["t_s"], timeseries["instance"]]).last().unstack("instance")
        counters.append(wide.sort_index().ffill().sum(axis=1, min_count=1))
    queries, hits = counters
    times = queries.index.to_numpy(dtype=float)
    # the sample at or before t - window (position -1: none yet, the counters' 0 at the start)
    before = np.searchsorted(times, times - window_s, side="right") - 1
    q, h = queries.to_numpy(), hits.to_numpy()
    q_then = np.where(before >= 0, q[np.clip(before, 0, None)], 0.0)
    h_then = np.where(before >= 0, h[np.clip(before, 0, None)], 0.0)
    looked_up, found = q - q_then, h - h_then
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(looked_up > 0, found / looked_up, np.nan)
    entry = hit_rate_entry()
    return pd.Series(rate * entry.scale, index=pd.Index(times, name="t_s"), name=HITS)


def runs_without_counters(runs: Sequence[Any]) -> list[Any]:
    """The runs of ``runs`` (each with a ``timeseries`` frame) that hold no prefix-cache counters."""
    return [run for run in runs if not has_prefix_counters(getattr(run, "timeseries", None))]


#: What the hit-rate chart's caption says (Results page and live view).
HIT_RATE_CAPTION = (
    f"Share of the prompt tokens looked up in the prefix cache that were found cached, over the last "
    f"{HIT_RATE_WINDOW_S:g} s of run time, summed over instances (a gap: nothing looked up then)."
)


def no_counters_note(names: Sequence[str]) -> str:
    """The sentence naming the compared runs (``names``: their display names) whose time series
    has no prefix-cache counters, so no line in the chart; empty when there are none."""
    if not names:
        return ""
    return (
        "No prefix-cache counters, so not drawn (the engine does not report them: SGLang, LMDeploy, a fake "
        f"server; or an imported or older run): {', '.join(names)}."
    )
