"""The prefix-cache hit rate over time (runners.views.prefix_view.hit_rate_over_time, issue 31
items 4 and 7): per sample time, hits' rise over queries' rise in the trailing window, summed over
instances, in percent; a gap where nothing was looked up; nothing for a file without counters."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from runners.metrics.catalog import metric
from runners.views.prefix_view import has_prefix_counters, hit_rate_over_time, no_counters_note

NA = None


def frame() -> pd.DataFrame:
    """Two instances, samples each second; instance 1 misses its counters at t=3 (a failed scrape).

    t        0    1    2    3    4    5
    i0 q     0  100  200  300  300  300
    i0 h     0   50  100  100  100  100
    i1 q     0    0  100   -  100  100
    i1 h     0    0   60   -   60   60
    sum q    0  100  300  400  400  400   (instance 1 keeps 100 at t=3)
    sum h    0   50  160  160  160  160
    """
    rows = []
    i0 = [(0, 0), (100, 50), (200, 100), (300, 100), (300, 100), (300, 100)]
    i1 = [(0, 0), (0, 0), (100, 60), (NA, NA), (100, 60), (100, 60)]
    for t, ((q0, h0), (q1, h1)) in enumerate(zip(i0, i1)):
        rows.append({"t_s": float(t), "instance": 0, "prefix_cache_queries_tokens": q0, "prefix_cache_hits_tokens": h0})
        rows.append({"t_s": float(t), "instance": 1, "prefix_cache_queries_tokens": q1, "prefix_cache_hits_tokens": h1})
    return pd.DataFrame(rows).astype({"prefix_cache_queries_tokens": "Int64", "prefix_cache_hits_tokens": "Int64"})


def test_the_hit_rate_over_a_trailing_window_is_the_hits_rise_over_the_queries_rise():
    rate = hit_rate_over_time(frame(), window_s=2.0)
    assert list(rate.index) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # t=0: nothing looked up yet (a gap); t=1: 50/100 since the start (counters start at 0);
    # t=2: (160-0)/(300-0); t=3: from t=1, (160-50)/(400-100); t=4: from t=2, 0/100;
    # t=5: from t=3, nothing looked up (a gap)
    expected = [math.nan, 50.0, 100 * 160 / 300, 100 * 110 / 300, 0.0, math.nan]
    assert rate.to_numpy() == pytest.approx(expected, nan_ok=True)
    assert rate.iloc[2] == pytest.approx(53.333333)  # percent: the catalog's scale of the run's hit rate
    assert metric("prefix_cache_hit_rate").scale == 100.0 and metric("prefix_cache_hit_rate").unit == "%"


def test_a_window_longer_than_the_run_gives_the_hit_rate_since_the_start():
    rate = hit_rate_over_time(frame(), window_s=100.0)
    assert rate.to_numpy() == pytest.approx(
        [math.nan, 50.0, 100 * 160 / 300, 40.0, 40.0, 40.0], nan_ok=True
    )  # 160 / 400 at the end: the whole run's


def test_one_second_window_and_window_checks():
    rate = hit_rate_over_time(frame(), window_s=1.0)
    # t=2: from t=1, (160-50)/(300-100) = 55%; t=3: from t=2, 0/100
    assert rate.loc[2.0] == pytest.approx(55.0) and rate.loc[3.0] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="window_s must be positive"):
        hit_rate_over_time(frame(), window_s=0)


def test_a_time_series_without_counters_has_no_hit_rate():
    blank = frame().assign(prefix_cache_queries_tokens=pd.NA, prefix_cache_hits_tokens=pd.NA)
    assert not has_prefix_counters(blank) and has_prefix_counters(frame())
    assert hit_rate_over_time(blank).isna().all() and len(hit_rate_over_time(blank)) == 6
    older = frame().drop(columns=["prefix_cache_queries_tokens", "prefix_cache_hits_tokens"])  # schema < 7
    assert not has_prefix_counters(older) and hit_rate_over_time(older).isna().all()
    assert not has_prefix_counters(pd.DataFrame())
    assert no_counters_note([]) == ""
    assert no_counters_note(["fcfs", "sglang run"]).endswith(": fcfs, sglang run.")
