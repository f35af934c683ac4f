"""One colour per scheduler across every chart of the app (issue 27, defect 11): a scheduler keeps its
colour whatever else a chart holds and in whatever order; tasks are told apart by marker, pattern or
dash, never by a colour that could be read as a scheduler's; the G bars carry the runs' colours."""

from __future__ import annotations

import pandas as pd

from runners.store.models import StudyRecord
from runners.views.charts import (
    attainment_bars,
    g_bars,
    kv_overlay,
    latency_cdfs,
    live_instance_series,
    live_latency_scatter,
    sweep_charts,
    ttft_tpot_scatter,
)
from runners.views.colours import SCHEDULER_PALETTE, lighter, run_colours, scheduler_colour
from runners.views.study_charts import metric_bars, pooled_cdfs
from tests.integration.test_charts import make_run


def line_colours(fig) -> dict[str, str]:
    """Legend name -> line or marker colour of each trace that has a legend entry."""
    colours = {}
    for trace in fig.data:
        if trace.showlegend is False:
            continue
        line = getattr(trace, "line", None)
        colour = line.color if line is not None and line.color else trace.marker.color
        colours[trace.name] = colour
    return colours


def test_every_registered_scheduler_has_its_own_colour_and_it_never_depends_on_the_chart():
    from runners.registry import SCHEDULERS

    colours = [scheduler_colour(name) for name in SCHEDULERS]
    assert len(set(colours)) == len(colours) <= len(SCHEDULER_PALETTE)
    assert scheduler_colour("mcsf") == scheduler_colour("mcsf")
    assert scheduler_colour("my-own-policy") == scheduler_colour("my-own-policy")  # hashed, stable
    assert scheduler_colour("my-own-policy") not in colours
    # a second run of a scheduler keeps the hue, lighter; the first keeps the scheduler's colour
    first, second, other = run_colours(["mcsf", "mcsf", "fcfs"])
    assert first == scheduler_colour("mcsf") and other == scheduler_colour("fcfs")
    assert second == lighter(first, 0.4) != first
    assert lighter("#000000", 0.5) == "#808080"


def test_a_scheduler_is_one_colour_in_the_bars_the_cdfs_the_scatter_and_the_kv_chart_in_any_order():
    fcfs, mcsf, slo_sa = make_run("r-fcfs", "fcfs"), make_run("r-mcsf", "mcsf"), make_run("r-slo", "slo-sa")
    mcsf_colour = scheduler_colour("mcsf")
    for runs in ([fcfs, mcsf, slo_sa], [mcsf, slo_sa], [slo_sa, fcfs, mcsf]):
        names = {run.run_id: run.summary.scheduler for run in runs}
        summaries = [run.summary for run in runs]
        position = [run.summary.scheduler for run in runs].index("mcsf")
        for fig in (
            latency_cdfs(runs, names=names),
            kv_overlay(runs, names=names),
            ttft_tpot_scatter(runs, names=names),
        ):
            assert line_colours(fig)["mcsf"] == mcsf_colour, fig.layout.title.text
        g = g_bars(summaries, names)
        assert list(g.data[0].marker.color)[position] == mcsf_colour  # not one colour for all bars
        assert len(set(g.data[0].marker.color)) == len(runs)
        bars = attainment_bars(summaries, names)
        for trace in bars.data:  # overall, chat, code: the run's colour, the part's pattern
            assert list(trace.marker.color)[position] == mcsf_colour
        assert [trace.marker.pattern.shape for trace in bars.data] == ["", "/", "."]


def test_study_charts_and_sweeps_use_the_same_colours_as_the_comparison():
    record = StudyRecord.model_validate(
        {
            "study_id": "study",
            "schedulers": ["mcsf", "fcfs"],  # mcsf listed first here: its colour must not follow
            "baseline": "fcfs",
            "seeds": [0, 1],
            "runs": [],
            "statistics": {
                "G": {
                    "schedulers": {
                        "fcfs": {"mean": 0.02, "ci_low": 0.01, "ci_high": 0.03, "n": 2},
                        "mcsf": {"mean": 0.03, "ci_low": 0.02, "ci_high": 0.04, "n": 2},
                    }
                }
            },
        }
    )
    bars = metric_bars(record, "G")
    assert {trace.name: trace.marker.color for trace in bars.data} == {
        "fcfs": scheduler_colour("fcfs"),
        "mcsf": scheduler_colour("mcsf"),
    }
    pooled = pooled_cdfs({"mcsf": [make_run("a", "mcsf")], "fcfs": [make_run("b", "fcfs")]}, "e2e_s")
    assert {name.split(" ")[0]: colour for name, colour in line_colours(pooled).items()} == {
        "mcsf": scheduler_colour("mcsf"),
        "fcfs": scheduler_colour("fcfs"),
    }
    frame = pd.DataFrame(
        {"scheduler": ["mcsf", "fcfs"], "rate_rps": [1.0, 1.0], "slo_attainment": [0.9, 0.8], "G": [0.1, 0.1]}
        | {"run_id": ["a", "b"]}
    )
    for fig in sweep_charts(frame, 0.9).values():
        assert line_colours(fig) == {"fcfs": scheduler_colour("fcfs"), "mcsf": scheduler_colour("mcsf")}


def test_tasks_are_told_apart_by_marker_not_by_colour_in_the_live_view():
    run = make_run("r-mcsf", "mcsf")
    fig = live_latency_scatter(run.requests, scheduler="mcsf")
    traces = [trace for trace in fig.data if trace.showlegend is not False]
    assert {trace.marker.color for trace in traces} == {scheduler_colour("mcsf")}
    assert {trace.name: trace.marker.symbol for trace in traces} == {
        "chat, SLO met": "circle",
        "chat, SLO missed": "circle-open",
        "code, SLO met": "diamond",
        "code, SLO missed": "diamond-open",
    }
    series = live_instance_series(run.timeseries, scheduler="mcsf")
    assert {trace.line.color for trace in series.data} == {scheduler_colour("mcsf")}
    scatter = ttft_tpot_scatter([run], names={"r-mcsf": "mcsf"})
    assert list(scatter.data[0].marker.symbol) == ["circle", "circle", "circle", "diamond", "diamond"]
