"""Run-level metrics over a table of request rows (the ``requests.parquet`` columns).

- SLO attainment = requests meeting their SLO / requests that ran to an end of their own
  (completed + failed: a failure is a miss), overall and per task; requests cancelled in flight
  and requests never sent (not run) are counted apart (:mod:`runners.metrics.outcomes`);
- G = requests meeting their SLO / the time every judged request spent in the system, in 1/s
  (SLO-aware paper eq. 2-3, whose sums run over all N requests: waiting time is inside E2E, so
  holding a request lowers G). A completed request counts its E2E; a failed one is a miss in the
  numerator and counts its time from arrival to failure (``finish_s - arrival_s``) in the
  denominator, so failures never raise G (before schema 5 they were left out of both sums);
- goodput = SLO-meeting requests per second of run duration;
- request / output-token / total-token throughput per second of run duration;
- duration = last finish - first arrival, seconds;
- mean / median / p90 / p99 of TTFT, TPOT, E2E, queue time (and ITL when token gaps are given),
  with numpy's linear-interpolation percentiles as vLLM's benchmark uses.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from runners.metrics.outcomes import outcome_masks
from runners.workload.slo import TASKS

LATENCY_COLUMNS = ("ttft_s", "tpot_s", "e2e_s", "queue_s")
#: The columns of the completed rows :func:`summarize_requests` reads.
_COMPLETED_COLUMNS = ["finish_s", "output_tokens", "input_tokens", *LATENCY_COLUMNS]
#: Every ``requests.parquet`` column :func:`summarize_requests` reads (its callers may pass only these).
SUMMARY_COLUMNS: tuple[str, ...] = (
    "task",
    "arrival_s",
    "dispatch_s",
    "error",
    "slo_met",
    *_COMPLETED_COLUMNS,
)


def _finite(values: Any) -> np.ndarray:
    """The finite values as float64 (the array itself when all are finite)."""
    array = np.asarray(values, dtype=float)
    finite = np.isfinite(array)
    return array if finite.all() else array[finite]


def distribution(values: Any) -> dict[str, float | None]:
    """mean, median, p90, p99 of the finite values (seconds); None each when there are none.
    The same numbers as ``np.mean``, ``np.median`` and ``np.percentile`` (linear), with one
    partition of the values for all three order statistics."""
    array = _finite(values)
    count = int(array.size)
    if count == 0:
        return {"mean": None, "median": None, "p90": None, "p99": None}
    half = count // 2
    wanted = {half, max(half - 1, 0), count - 1}
    for percent in (90, 99):
        virtual = (count - 1) * (percent / 100)
        wanted.update((min(math.floor(virtual), count - 1), min(math.floor(virtual) + 1, count - 1)))
    part = np.partition(array, sorted(wanted))

    def value_at(index: int) -> float:
        return float(part[index])

    return {
        "mean": float(np.mean(array)),
        "median": value_at(half) if count % 2 else (value_at(half - 1) + value_at(half)) / 2,
        "p90": _lerp_percentile(value_at, count, 90),
        "p99": _lerp_percentile(value_at, count, 99),
    }


def _lerp_percentile(value_at: Any, count: int, percent: int) -> float:
    """numpy's linear-interpolation percentile (the same float operations as
    ``np.percentile(values, percent)``) of ``count`` sorted values, ``value_at(k)`` the k-th."""
    quantile = percent / 100
    virtual = (count - 1) * quantile
    if virtual >= count - 1:
        return value_at(count - 1)
    previous = math.floor(virtual)
    gamma = virtual - previous
    low, high = value_at(previous), value_at(previous + 1)
    diff = high - low
    return high - diff * (1 - gamma) if gamma >= 0.5 else low + diff * gamma


def weighted_distribution(values: Any, counts: Any, mean_of: Any = None) -> dict[str, float | None]:
    """:func:`distribution` of the list holding each of ``values`` ``counts`` times, without
    sorting it: the same median, p90 and p99 bit for bit (order statistics, from the few distinct
    values instead of a partition of the whole list). The mean: ``np.mean`` of the finite values
    of ``mean_of`` (that list, in its order), as :func:`distribution` gives it bit for bit, when
    given; else summed exactly (``math.fsum``) where numpy sums pairwise, so it can differ from
    :func:`distribution`'s in the last bits."""
    array = np.asarray(values, dtype=float)
    weights = np.asarray(counts, dtype=np.int64)
    keep = np.isfinite(array) & (weights > 0)
    array, weights = array[keep], weights[keep]
    total = int(weights.sum())
    if total == 0:
        return {"mean": None, "median": None, "p90": None, "p99": None}
    order = np.argsort(array, kind="stable")
    array, weights = array[order], weights[order]
    cumulative = np.cumsum(weights)

    def value_at(index: int) -> float:
        return float(array[int(np.searchsorted(cumulative, index, side="right"))])

    half = total // 2
    median = value_at(half) if total % 2 else (value_at(half - 1) + value_at(half)) / 2
    mean = math.fsum((array * weights).tolist()) / total if mean_of is None else float(np.mean(_finite(mean_of)))
    return {
        "mean": mean,
        "median": median,
        "p90": _lerp_percentile(value_at, total, 90),
        "p99": _lerp_percentile(value_at, total, 99),
    }


def g_metric(slo_met: Any, e2e_s: Any) -> float | None:
    """G = number meeting SLO / sum of E2E latencies (1/s); None when no latency was measured."""
    met = np.asarray(slo_met, dtype=bool)
    latencies = np.asarray(e2e_s, dtype=float)
    total = float(np.nansum(latencies))
    if total <= 0:
        return None
    return float(met.sum()) / total


def _time_in_system(rows: pd.DataFrame, completed: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """Seconds each judged request spent in the system, in row order of the judged rows: E2E of
    a completed request, arrival to failure (``finish_s - arrival_s``) of a failed one."""
    if not len(rows):
        return np.zeros(0)
    spent = rows["e2e_s"].to_numpy(dtype=float, na_value=np.nan).copy()
    until_failure = (rows["finish_s"] - rows["arrival_s"]).to_numpy(dtype=float, na_value=np.nan)
    spent[failed] = until_failure[failed]
    return spent[completed | failed]


def summarize_requests(
    rows: pd.DataFrame, preemptions: int = 0, itl_gaps_s: np.ndarray | None = None
) -> dict[str, Any]:
    """The metric fields of ``summary.json`` computed from request rows."""
    total = int(len(rows))
    outcomes = outcome_masks(rows)
    completed_mask = outcomes["completed"]
    judged = completed_mask | outcomes["failed"]  # ran to an end of their own: attainment's denominator
    # the columns read below, not a copy of every column (a million rows in a big run)
    completed = rows.loc[completed_mask, _COMPLETED_COLUMNS] if total else rows
    met = rows["slo_met"].fillna(False).astype(bool).to_numpy() & completed_mask if total else np.zeros(0, bool)
    n_met = int(met.sum())
    n_judged = int(judged.sum())
    if len(completed):
        start = float(rows["arrival_s"].min())
        duration = float(completed["finish_s"].max()) - start
    else:
        duration = 0.0
    per_second = (lambda x: x / duration) if duration > 0 else (lambda x: None)
    by_task: dict[str, float | None] = {}
    for task in TASKS:
        task_rows = (rows["task"] == task).to_numpy() & judged if total else np.zeros(0, bool)
        count = int(task_rows.sum())
        by_task[task] = float(met[task_rows].sum()) / count if count else None
    output_tokens = float(completed["output_tokens"].sum()) if len(completed) else 0.0
    input_tokens = float(completed["input_tokens"].sum()) if len(completed) else 0.0
    summary: dict[str, Any] = {
        "requests": total,
        "completed": int(len(completed)),
        "failed": int(outcomes["failed"].sum()),
        "cancelled": int(outcomes["cancelled"].sum()),  # in flight when the run was cancelled
        "not_run": int(outcomes["not_run"].sum()),  # never sent: the run ended first
        "duration_s": duration,
        "slo_attainment": (n_met / n_judged) if n_judged else None,
        "slo_attainment_by_task": by_task,
        "slo_met": n_met,
        "G": g_metric(met[judged] if total else [], _time_in_system(rows, completed_mask, outcomes["failed"])),
        "goodput_rps": per_second(n_met),
        "request_throughput_rps": per_second(len(completed)),
        "output_throughput_tps": per_second(output_tokens),
        "total_throughput_tps": per_second(output_tokens + input_tokens),
        "preemptions": int(preemptions),
    }
    for column in LATENCY_COLUMNS:
        summary[column] = distribution(completed[column] if len(completed) else [])
    summary["itl_s"] = distribution(itl_gaps_s if itl_gaps_s is not None else [])
    return summary
