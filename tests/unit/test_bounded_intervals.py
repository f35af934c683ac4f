"""Intervals never past what a quantity can be (issue 27 defect 3): a share's interval stays within
0-100% (its change within -100 to +100 pts), a time, rate or count's above 0; a cut interval is
marked * and the footnote says why the cut keeps the 95% coverage; charts draw the cut interval."""

from __future__ import annotations

import pytest

from runners.metrics.catalog import CUT_NOTE, metric
from runners.store.models import MetricStatistics, SeedSummary, StudyRecord
from runners.views.demo import SchedulerResult, card_interval
from runners.views.study_charts import metric_bars


def test_a_share_interval_is_cut_at_100_and_0_and_marked():
    attainment = metric("slo_attainment")
    # the example: 84.0 [63.4, 104.6]
    assert attainment.format_interval(0.634, 1.046) == "[63.4, 100.0]*"
    assert attainment.format_interval(-0.05, 0.30) == "[0.0, 30.0]*"
    assert attainment.format_interval(0.144, 0.208) == "[14.4, 20.8]"  # inside: as before, unmarked
    assert attainment.value_interval(0.4, 1.108) == (0.4, 1.0, True)
    # a change of a share: -100 to +100 pts
    assert attainment.format_change_interval(-1.2, 0.5) == "[-100.0, 50.0]*"
    assert attainment.format_change_interval(-0.2, 0.5) == "[-20.0, 50.0]"


def test_times_and_rates_are_cut_at_0_and_their_changes_are_not():
    ttft = metric("ttft_s.mean")
    assert ttft.format_interval(-0.012, 0.2) == "[0.000, 0.200]*"
    assert ttft.format_change_interval(-0.5, 0.2) == "[-0.500, 0.200]"  # a difference can be negative
    assert metric("G").value_interval(-1.0, 3.0) == (0.0, 3.0, True)
    assert ttft.format_interval(None, 0.2) == "[no interval]"
    assert "keeps its 95% coverage" in CUT_NOTE


def test_the_demo_card_says_the_cut_interval_not_a_symmetric_plus_minus():
    result = SchedulerResult("slo-sa", 5, 0.84, 0.634, 1.046, None)
    assert card_interval("slo_attainment", result) == "95% interval 63.4 to 100.0%*"
    inside = SchedulerResult("slo-sa", 5, 0.84, 0.80, 0.88, None)
    assert card_interval("slo_attainment", inside).startswith("± 4.0 (95% interval 80.0 to 88.0%)")


def test_a_bar_chart_never_draws_an_interval_past_100_percent():
    stats = {"schedulers": {"fcfs": SeedSummary(n=5, mean=0.84, ci_low=0.634, ci_high=1.046)}, "vs_baseline": {}}
    record = StudyRecord(
        study_id="s",
        baseline="fcfs",
        schedulers=["fcfs"],
        seeds=[0, 1, 2, 3, 4],
        runs=[],
        statistics={"slo_attainment": MetricStatistics.model_validate(stats)},
    )
    bar = metric_bars(record, "slo_attainment").data[0]
    assert bar.y[0] == pytest.approx(84.0)
    assert bar.y[0] + bar.error_y.array[0] == pytest.approx(100.0)  # not 104.6
    assert "cut at the possible range" in str(bar.to_plotly_json())  # the hover says so: not silent


def test_a_relative_change_never_falls_below_minus_100_percent():
    """A Fieller interval of a ratio can reach below -100% (-138% here); a quantity that is never
    negative cannot fall by more than all of it, so the text cuts it there and marks it."""
    from runners.store.models import RelativeChange
    from runners.study.runner import relative_text

    relative = RelativeChange(n_pairs=3, change=-0.60, ci_low=-1.38, ci_high=-0.205, method="fieller")
    assert relative_text(relative, metric("G")) == "-60.0% [-100.0, -20.5]*"
    assert relative_text(relative) == "-60.0% [-138.0, -20.5]"  # no metric: no range known, as stored
    inside = RelativeChange(n_pairs=3, change=-0.10, ci_low=-0.30, ci_high=0.10, method="fieller")
    assert relative_text(inside, metric("G")) == "-10.0% [-30.0, +10.0]"
    assert metric("tpot_s.mean").relative_interval(-1.5, 4.0) == (-1.0, 4.0, True)  # the high end is open
    assert "-100% upward for a relative change" in CUT_NOTE
