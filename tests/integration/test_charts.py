"""The comparison, study, sweep and live charts as Plotly figure objects (issue 15, charts): runs
named by display name with the run id on hover, tooltips with the catalog's units, CDFs with a
log x option and each task's SLO drawn, the TTFT-vs-TPOT SLO regions, legends that clear the
axis at many runs, percent axes 0-100, chart titles for the PNG picker; and the Results page's
wiring of them (log-x toggle, full-width single chart, PNG picker by title) under AppTest."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from runners.metrics.catalog import metric, timeseries_metric
from runners.store.models import RunEntry, StudyRecord
from runners.store.result_store import RunData
from runners.views.charts import (
    AXIS_BLOCK_PX,
    COMPARISON_CHARTS,
    LEGEND_ROW_PX,
    TOP_PX,
    attainment_bars,
    chart_title,
    comparison_chart,
    kv_overlay,
    latency_cdfs,
    legend_rows,
    live_instance_series,
    live_latency_scatter,
    sweep_charts,
    ttft_tpot_scatter,
)
from runners.views.study_charts import pooled_cdfs

PAPER_SLOS = {"chat": {"ttft_s": 10.0, "tpot_s": 0.05}, "code": {"e2e_s": 30.0}}


def make_run(run_id: str, scheduler: str, seed: int = 1, slos: dict | None = None, kv=(0.006, 0.012)) -> RunData:
    """A saved run with 3 chat and 2 code requests (seconds) and two telemetry samples."""
    requests = pd.DataFrame(
        {
            "task": ["chat", "chat", "chat", "code", "code"],
            "ttft_s": [0.5, 1.0, 2.0, 1.0, 3.0],
            "tpot_s": [0.02, 0.04, 0.08, 0.01, 0.03],
            "e2e_s": [4.0, 8.0, 16.0, 10.0, 40.0],
            "queue_s": [0.0, 0.1, 0.2, 0.0, 0.5],
            "finish_s": [4.0, 9.0, 18.0, 11.0, 41.0],
            "slo_met": [True, True, False, True, False],
        }
    )
    timeseries = pd.DataFrame(
        {
            "t_s": [0.25, 0.5],
            "instance": [0, 0],
            "kv_usage": list(kv),
            "running": [3, 4],
            "tokens_per_s": [100.0, 200.0],
        }
    )
    summary = {
        "run_id": run_id,
        "scheduler": scheduler,
        "engine": "sim",
        "arrival_rate_rps": 4.0,
        "slo_attainment": 0.6,
        "slo_attainment_by_task": {"chat": 2 / 3, "code": 0.5},
        "G": 0.05,
    }
    config = {"config": {"workload": {"seed": seed}}, "resolved": {"slos": slos or PAPER_SLOS}}
    return RunData(
        run_id, Path("/nonexistent") / run_id, config, RunEntry.model_validate(summary), requests, timeseries
    )


@pytest.fixture
def runs() -> list[RunData]:
    return [
        make_run("20261122-232748-fcfs-sim-4ac5-01", "fcfs"),
        make_run("20261122-232749-static-sim-4ac5-02", "static"),
        make_run("20261122-232750-slo-sa-sim-4ac5-03", "slo-sa"),
    ]


def legend_names(fig) -> list[str]:
    return [trace.name for trace in fig.data if trace.showlegend is not False]


# -- names --------------------------------------------------------------------------------------
def test_runs_are_named_by_scheduler_with_the_run_id_on_hover(runs):
    ids = [run.run_id for run in runs]
    bars = attainment_bars([run.summary for run in runs])
    assert list(bars.data[0].x) == ["fcfs", "static", "slo-sa"]
    assert [row[1] for row in bars.data[0].customdata] == ids
    assert "run %{customdata[1]}" in bars.data[0].hovertemplate
    cdf = latency_cdfs(runs, "e2e_s")
    assert legend_names(cdf) == ["fcfs", "static", "slo-sa"]
    for trace in cdf.data:
        assert f"run {ids[['fcfs', 'static', 'slo-sa'].index(trace.name)]}<extra>" in trace.hovertemplate
    assert legend_names(kv_overlay(runs)) == ["fcfs", "static", "slo-sa"]
    assert legend_names(ttft_tpot_scatter(runs))[:3] == ["fcfs", "static", "slo-sa"]
    # the caller's names win; a seed that differs is part of the name, one line per part on a bar's axis
    named = latency_cdfs(runs, "e2e_s", names={ids[0]: "baseline", ids[1]: "tuned", ids[2]: "paper"})
    assert legend_names(named) == ["baseline", "tuned", "paper"]
    seeded = [make_run("a-01", "fcfs", seed=1), make_run("a-02", "fcfs", seed=2)]
    assert list(
        attainment_bars([run.summary for run in seeded], names={"a-01": "fcfs · seed 1", "a-02": "fcfs · seed 2"})
        .data[0]
        .x
    ) == ["fcfs<br>seed 1", "fcfs<br>seed 2"]
    assert legend_names(comparison_chart("kv_usage", [r.summary for r in seeded], seeded)) == [
        "fcfs · seed 1",
        "fcfs · seed 2",
    ]


# -- tooltips -----------------------------------------------------------------------------------
def test_every_comparison_trace_has_a_tooltip_with_the_catalog_unit(runs):
    units = {
        "slo_attainment": ["%"],
        "g": [metric("G").unit],
        "ttft_cdf": [" s"],
        "tpot_cdf": [f" {metric('tpot_s').unit}"],
        "e2e_cdf": [" s"],
        "ttft_vs_tpot": [f" {metric('ttft_s').unit}", f" {metric('tpot_s').unit}"],
        "kv_usage": [timeseries_metric("kv_usage").unit],
        "batch_size": [timeseries_metric("running").unit],
        "throughput": [metric("output_throughput_tps").unit],
    }
    assert metric("tpot_s").unit == "ms" and units["throughput"] == ["tok/s"]
    figures = {name: comparison_chart(name, [run.summary for run in runs], runs) for name in COMPARISON_CHARTS}
    for name, fig in figures.items():
        drawn = [trace for trace in fig.data if trace.hoverinfo != "skip"]
        assert drawn, name
        for trace in drawn:
            assert trace.hovertemplate, (name, trace.name)
            for unit in units[name]:
                assert unit in trace.hovertemplate, (name, trace.hovertemplate)
    assert "TPOT ≤ %{x:.1f} ms for %{y:.1%} of requests" in figures["tpot_cdf"].data[0].hovertemplate
    assert "KV cache used: %{y:.1f}%" in figures["kv_usage"].data[0].hovertemplate
    sweep = pd.DataFrame(
        {
            "run_id": ["s1", "s2"],
            "scheduler": ["fcfs", "fcfs"],
            "rate_rps": [1.0, 2.0],
            "slo_attainment": [1.0, 0.8],
            "G": [0.1, 0.2],
        }
    )
    charts = sweep_charts(sweep, 0.9)
    assert "SLO attainment: %{y:.1f}%" in charts["sweep_attainment"].data[0].hovertemplate
    assert "%{x:.4g} req/s" in charts["sweep_g"].data[0].hovertemplate
    live = live_latency_scatter(runs[0].requests)
    assert all(trace.hovertemplate for trace in live.data)
    assert "TPOT: %{y:.1f} ms" in live.data[1].hovertemplate
    assert "KV cache used: %{y:.1f}%" in live_instance_series(runs[0].timeseries).data[0].hovertemplate


# -- CDFs ---------------------------------------------------------------------------------------
def test_cdfs_draw_each_tasks_slo_limit_and_take_a_log_x_axis(runs):
    tpot = latency_cdfs(runs, "tpot_s", log_x=True)
    assert tpot.layout.xaxis.type == "log" and tpot.layout.xaxis2.type == "log"
    assert [(s.type, s.x0, s.x1, s.xref, s.yref) for s in tpot.layout.shapes] == [
        ("line", 50.0, 50.0, "x", "y domain")
    ]  # chat's 50 ms, in the chat panel; code has no TPOT limit
    label = next(a for a in tpot.layout.annotations if "SLO" in a.text)
    assert label.text == "chat SLO 50 ms" and label.x == pytest.approx(math.log10(50.0))  # annotations: log units
    assert max(tpot.data[0].x) == pytest.approx(80.0)  # 0.08 s drawn in ms
    e2e = latency_cdfs(runs, "e2e_s")
    assert e2e.layout.xaxis.type == "linear"
    assert [(s.x0, s.xref) for s in e2e.layout.shapes] == [(30.0, "x2")]  # code's E2E limit, code panel
    assert [a.text for a in e2e.layout.annotations if "SLO" in a.text] == ["code SLO 30 s"]
    assert next(a for a in e2e.layout.annotations if "SLO" in a.text).x == 30.0
    # runs with different limits: each limit drawn once, named with the runs that use it, labels stacked
    mixed = runs[:2] + [make_run("c-03", "slo-sa", slos={"chat": {"ttft_s": 10.0, "tpot_s": 0.1}})]
    fig = latency_cdfs(mixed, "tpot_s")
    assert sorted(s.x0 for s in fig.layout.shapes) == [50.0, 100.0]
    labels = {a.text: a.y for a in fig.layout.annotations if "SLO" in a.text}
    assert set(labels) == {"chat SLO 50 ms (fcfs, static)", "chat SLO 100 ms (slo-sa)"}
    assert len(set(labels.values())) == 2 and all(0 <= y <= 1 for y in labels.values())


def test_pooled_cdfs_take_a_log_x_axis_and_draw_the_slo(runs):
    fig = pooled_cdfs({"fcfs": [runs[0]], "static": [runs[1]]}, "ttft_s", log_x=True)
    assert fig.layout.xaxis.type == "log"
    assert [(s.x0, s.xref) for s in fig.layout.shapes] == [(10.0, "x")]
    assert [a.text for a in fig.layout.annotations if "SLO" in a.text] == ["chat SLO 10 s"]
    assert all("TTFT ≤ %{x:.3f} s" in trace.hovertemplate for trace in fig.data)
    assert pooled_cdfs({"fcfs": [runs[0]]}, "ttft_s").layout.xaxis.type == "linear"


# -- TTFT vs TPOT -------------------------------------------------------------------------------
def test_ttft_vs_tpot_draws_both_tasks_slo_boxes_with_labels_that_do_not_overlap():
    slos = {"chat": {"ttft_s": 10.0, "tpot_s": 0.05}, "code": {"ttft_s": 2.0, "tpot_s": 0.1}}
    fig = ttft_tpot_scatter([make_run("r1", "fcfs", slos=slos), make_run("r2", "static", slos=slos)])
    boxes = {(s.x0, s.y0, s.x1, s.y1, s.xref, s.yref) for s in fig.layout.shapes if s.type == "rect"}
    assert boxes == {(0, 0, 10.0, 50.0, "x", "y"), (0, 0, 2.0, 100.0, "x", "y")}  # TPOT in ms
    labels = {a.text: (a.x, a.y, a.yanchor) for a in fig.layout.annotations}
    # code's box (200 s·ms) is the smaller: its label inside its corner, chat's above its own
    assert labels == {
        "code SLO: TTFT ≤ 2 s, TPOT ≤ 100 ms": (2.0, 100.0, "top"),
        "chat SLO: TTFT ≤ 10 s, TPOT ≤ 50 ms": (10.0, 50.0, "bottom"),
    }
    # the paper's SLOs: chat a box, code (E2E only) has no region and says so in the legend
    paper = ttft_tpot_scatter([make_run("r1", "fcfs")])
    assert [(s.x1, s.y1) for s in paper.layout.shapes] == [(10.0, 50.0)]
    assert "code SLO: E2E latency ≤ 30 s (no region here)" in legend_names(paper)
    # one limit only: a band over the whole other axis
    band = ttft_tpot_scatter([make_run("r1", "fcfs", slos={"code": {"ttft_s": 2.0}})])
    shape = band.layout.shapes[0]
    assert (shape.x1, shape.xref, shape.y1, shape.yref) == (2.0, "x", 1, "y domain")


# -- layout -------------------------------------------------------------------------------------
def test_the_legend_sits_below_the_axis_and_the_figure_grows_with_it_at_five_runs():
    many = [
        make_run(f"20261122-2327{i}-sim-4ac5-0{i}", scheduler, slos=PAPER_SLOS)
        for i, scheduler in enumerate(["fcfs", "static", "slo-sa", "dynamic-mem", "dynamic-sla"])
    ]
    names = {run.run_id: f"{run.summary.scheduler} · long job label {i}" for i, run in enumerate(many)}
    for fig in (
        kv_overlay(many, names),
        latency_cdfs(many, "ttft_s", names=names),
        ttft_tpot_scatter(many, names=names),
    ):
        rows = legend_rows(legend_names(fig))
        assert rows >= 2
        plot_px = fig.layout.height - fig.layout.margin.t - fig.layout.margin.b
        assert fig.layout.margin.t == TOP_PX
        assert fig.layout.legend.orientation == "h" and fig.layout.legend.yanchor == "top"
        assert -fig.layout.legend.y * plot_px == pytest.approx(AXIS_BLOCK_PX)  # under tick labels and axis title
        assert fig.layout.margin.b >= AXIS_BLOCK_PX + rows * LEGEND_ROW_PX  # and inside the figure
        assert fig.layout.height >= 380 + rows * LEGEND_ROW_PX  # the plot keeps its height
        for note in fig.layout.annotations:  # SLO labels inside the plot, never in the legend's band
            if "SLO" in note.text and note.yref.endswith("domain"):
                assert 0 <= note.y <= 1
    bars = attainment_bars([run.summary for run in many], names)
    assert bars.layout.xaxis.tickangle == 0  # names never tilt down into the legend: one line per part
    assert bars.data[0].x[0] == "fcfs<br>long job label 0"
    plot_px = bars.layout.height - bars.layout.margin.t - bars.layout.margin.b
    assert -bars.layout.legend.y * plot_px >= 24 + 15 * 2


def test_percent_axes_run_0_to_100_with_fractions_drawn_as_percent(runs):
    kv = kv_overlay([make_run("r1", "fcfs", kv=(0.006, 0.012))])
    assert list(kv.data[0].y) == pytest.approx([0.6, 1.2])  # 1.2% of the cache, not 1.2 of 100
    assert kv.layout.yaxis.range == (0, 100) and kv.layout.yaxis.title.text == "KV cache used (%)"
    live = live_instance_series(runs[0].timeseries)
    assert live.layout.yaxis.range == (0, 100) and live.layout.yaxis2.range is None
    assert list(live.data[0].y) == pytest.approx([0.6, 1.2])
    bars = attainment_bars([run.summary for run in runs])
    assert bars.layout.yaxis.range == (0, 100) and bars.data[0].y[0] == pytest.approx(60.0)
    sweep = pd.DataFrame(
        {"run_id": ["s1"], "scheduler": ["fcfs"], "rate_rps": [1.0], "slo_attainment": [1.0], "G": [0.1]}
    )
    assert sweep_charts(sweep, 0.9)["sweep_attainment"].layout.yaxis.range == (0, 100)


def test_every_comparison_chart_has_a_distinct_title_the_png_picker_shows(runs):
    titles = {name: chart_title(name) for name in COMPARISON_CHARTS}
    assert len(set(titles.values())) == len(titles)
    for name, title in titles.items():
        assert title != name and "_" not in title
        assert comparison_chart(name, [run.summary for run in runs], runs).layout.title.text == title


# -- the Results page ---------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def _ancestors(node, target, path=()):
    """The blocks from ``node`` down to the element ``target`` (None when it is not below)."""
    if node is target:
        return path
    for child in (getattr(node, "children", None) or {}).values():
        found = _ancestors(child, target, path + (node,))
        if found is not None:
            return found
    return None


def test_results_page_wires_log_x_full_width_and_the_png_picker(monkeypatch, results_dir):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    for name in ("demo-overload-fcfs-s0", "demo-overload-static-s0", "demo-overload-slo-sa-s0"):
        shutil.copytree(ROOT / "results" / name, results_dir / name)
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    app.switch_page("pages/2_Results.py").run()
    app.multiselect(key="compare_runs").set_value(
        ["demo-overload-fcfs-s0", "demo-overload-static-s0", "demo-overload-slo-sa-s0"]
    ).run()
    assert not app.exception, app.exception
    assert app.selectbox(key="png_chart").options == [chart_title(name) for name in COMPARISON_CHARTS]
    app.get("button_group")[0].set_value("Latency CDFs").run()
    specs = {chart.proto.id: json.loads(chart.proto.spec) for chart in app.get("plotly_chart")}
    assert all(spec["layout"]["xaxis"].get("type") in (None, "linear") for spec in specs.values())
    app.toggle(key="cdf_log_x").set_value(True).run()
    assert not app.exception, app.exception
    charts = app.get("plotly_chart")
    assert len(charts) == 3 and all(json.loads(c.proto.spec)["layout"]["xaxis"]["type"] == "log" for c in charts)
    names = [trace["name"] for trace in json.loads(charts[0].proto.spec)["data"] if trace.get("showlegend", True)]
    assert names == ["fcfs", "static", "slo-sa"]  # display names, not run ids
    # a single-chart view is drawn at full width, not in the left of two columns
    app.get("button_group")[0].set_value("TTFT vs TPOT").run()
    chart = app.get("plotly_chart")[0]
    assert not any(getattr(block, "type", None) == "column" for block in _ancestors(app._tree, chart))
    app.get("button_group")[0].set_value("Overview").run()
    chart = app.get("plotly_chart")[0]
    assert any(getattr(block, "type", None) == "column" for block in _ancestors(app._tree, chart))


def test_study_bars_and_bands_run_0_to_100_for_percent_with_units_on_hover():
    from runners.views.study_charts import metric_bars, sweep_bands

    stats = {
        "fcfs": {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n": 3},
        "slo-sa": {"mean": 0.7, "ci_low": 0.65, "ci_high": 0.75, "n": 3},
    }
    record = StudyRecord.model_validate(
        {
            "study_id": "study",
            "schedulers": ["fcfs", "slo-sa"],
            "baseline": "fcfs",
            "seeds": [0, 1, 2],
            "runs": [],
            "statistics": {
                "slo_attainment": {"schedulers": stats},
                "G": {"schedulers": {"fcfs": {"mean": 0.02, "ci_low": 0.01, "ci_high": 0.03, "n": 3}}},
            },
        }
    )
    bars = metric_bars(record, "slo_attainment")
    assert bars.layout.yaxis.range == (0, 100)
    assert [trace.y[0] for trace in bars.data] == pytest.approx([50.0, 70.0])
    assert bars.data[0].hovertemplate == "<b>fcfs</b><br>SLO attainment: %{customdata}<extra></extra>"
    assert bars.data[0].customdata[0] == "50.0 [40.0, 60.0] %, n=3 seeds (95% CI)"
    assert metric_bars(record, "G").layout.yaxis.range is None  # not a percent
    swept = StudyRecord.model_validate(
        {
            "study_id": "sweep",
            "schedulers": ["fcfs"],
            "baseline": "fcfs",
            "seeds": [0],
            "rates": [1.0, 2.0],
            "runs": [],
            "statistics": {},
            "statistics_by_rate": [
                {"rate": rate, "statistics": {"slo_attainment": {"schedulers": {"fcfs": {"mean": value, "n": 1}}}}}
                for rate, value in ((1.0, 1.0), (2.0, 0.8))
            ],
        }
    )
    band = sweep_bands(swept, "slo_attainment", 0.9)
    assert band.layout.yaxis.range == (0, 100)
    line = next(trace for trace in band.data if trace.name == "fcfs")
    assert list(line.y) == pytest.approx([100.0, 80.0])
    assert "SLO attainment: %{y:.1f}% (mean, %{customdata})" in line.hovertemplate


def test_the_live_charts_say_when_their_clock_is_simulated(runs):
    assert live_instance_series(runs[0].timeseries, simulated=True).layout.xaxis.title.text == "run time, simulated (s)"
    assert live_instance_series(runs[0].timeseries).layout.xaxis.title.text == "run time (s)"
    assert (
        live_latency_scatter(runs[0].requests, simulated=True).layout.xaxis.title.text == "finish time, simulated (s)"
    )


def test_slo_labels_turn_left_near_the_right_edge_so_they_stay_on_the_plot(runs):
    from runners.views.charts import label_side

    assert label_side(10.0, (0.0, 100.0)) == "left" and label_side(90.0, (0.0, 100.0)) == "right"
    assert label_side(10.0, (1.0, 1000.0), log=True) == "left"  # a third of the way on a log axis
    assert label_side(100.0, (1.0, 120.0), log=True) == "right"
    # TTFT limit 10 s beyond every request's TTFT (at most 3 s): the box's label extends left of its corner
    fig = ttft_tpot_scatter([make_run("r1", "fcfs")])
    assert fig.layout.annotations[0].xanchor == "right"
    wide = make_run("r2", "fcfs")
    wide.requests["ttft_s"] = [50.0, 60.0, 70.0, 80.0, 100.0]
    assert ttft_tpot_scatter([wide]).layout.annotations[0].xanchor == "left"
    # e2e CDF: code's 30 s limit is 2/3 of the way along its panel's 10-40 s: its label to its left
    label = next(a for a in latency_cdfs(runs, "e2e_s").layout.annotations if "SLO" in a.text)
    assert (label.xanchor, label.xshift) == ("right", -3)


def test_the_hit_rate_chart_keeps_a_long_runs_gaps_and_draws_each_run_in_its_scheduler_colour():
    """4,000 samples (thinned to the point budget) with 10 s of no lookups in the middle: the chart
    draws (before: thinning an all-NaN bin raised), the gap stays a gap, values on a 0-100 axis;
    a run without counters gets no line."""
    import numpy as np

    from runners.views.charts import PREFIX_HIT_RATE_TITLE, prefix_hit_rate_over_time
    from runners.views.colours import scheduler_colour

    t = np.arange(4000) * 0.25
    looked_up = np.where((t >= 400) & (t < 410), 0, 100)  # tokens per sample; none for 10 s
    queries = np.cumsum(looked_up)
    timeseries = pd.DataFrame(
        {
            "t_s": t,
            "instance": 0,
            "kv_usage": 0.1,
            "running": 1,
            "tokens_per_s": 1.0,
            "prefix_cache_queries_tokens": queries,
            "prefix_cache_hits_tokens": queries // 4,  # a quarter found cached
        }
    )
    with_counters = make_run("r1", "slo-sa")
    with_counters = RunData(
        "r1", with_counters.folder, with_counters.config, with_counters.summary, with_counters.requests, timeseries
    )
    fig = prefix_hit_rate_over_time([make_run("r0", "fcfs"), with_counters], window_s=5.0)
    assert fig.layout.title.text == PREFIX_HIT_RATE_TITLE and fig.layout.yaxis.range == (0, 100)
    (trace,) = fig.data  # r0 has no counters: no line
    assert trace.line.color == scheduler_colour("slo-sa") and len(trace.x) <= 1500
    y = np.asarray([np.nan if value is None else value for value in trace.y], dtype=float)
    x = np.asarray(trace.x)
    assert np.nanmin(y) == pytest.approx(25.0) and np.nanmax(y) == pytest.approx(25.0)
    inside = (x >= 405) & (x < 410)  # 5 s and more into the 10 s without lookups
    assert inside.any() and np.isnan(y[inside]).all()
