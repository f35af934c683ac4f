"""Plotly figures for the dashboard (comparison, sweeps, live view, demo) and their export.

Every function takes plain data (summaries, :class:`runners.result_store.RunData`, data
frames) and returns a ``plotly.graph_objects.Figure``; nothing here imports streamlit. Long
series are thinned before drawing (min and max of each bin kept, so a memory sawtooth keeps its
peaks and troughs), which is what keeps a 20-run comparison fast. Metric labels, units and scales
come from the catalog (:mod:`runners.metrics.catalog`): one unit per quantity, TPOT in ms in
every chart. A study's figures (error bars, pooled CDFs, interval bands) are in
:mod:`runners.study_charts`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from runners.compare import cdf_points, summary_value
from runners.metrics.catalog import metric, timeseries_metric
from runners.result_store import RunData

TASK_COLOURS = {"chat": "#1f77b4", "code": "#ff7f0e"}
MET_SYMBOLS = {True: "circle", False: "x"}
MAX_SERIES_POINTS = 1500
MAX_SCATTER_POINTS = 2000
#: Points drawn per chart across all runs: each run gets an equal share (a floor keeps shapes
#: readable), so a 20-run comparison sends the browser about as much as a 4-run one.
CHART_POINT_BUDGET = 12_000


def _share(runs: int, ceiling: int, floor: int = 100) -> int:
    return max(floor, min(ceiling, CHART_POINT_BUDGET // max(1, runs)))


class ExportUnavailable(RuntimeError):
    """PNG export needs the kaleido package and a Chromium it can drive."""


def _layout(fig: go.Figure, title: str, height: int = 380) -> go.Figure:
    fig.update_layout(title=title, height=height, margin={"l": 50, "r": 20, "t": 50, "b": 40},
                      legend={"orientation": "h", "y": -0.2}, template="plotly_white")
    return fig


def thin_series(t: Any, y: Any, max_points: int = MAX_SERIES_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most about ``max_points`` points of the series (t sorted): each bin of consecutive
    samples contributes its minimum and its maximum, in time order."""
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float)
    if t.size <= max_points:
        return t, y
    bins = max(1, max_points // 2)
    edges = np.linspace(0, t.size, bins + 1).astype(int)
    keep: list[int] = []
    for start, stop in zip(edges[:-1], edges[1:]):
        if stop <= start:
            continue
        segment = y[start:stop]
        low, high = start + int(np.nanargmin(segment)), start + int(np.nanargmax(segment))
        keep.extend(sorted({low, high}))
    index = np.asarray(keep)
    return t[index], y[index]


def run_label(summary: dict[str, Any]) -> str:
    return str(summary.get("run_id"))


# -- comparison ------------------------------------------------------------------------------------
def attainment_bars(summaries: Sequence[dict[str, Any]]) -> go.Figure:
    """SLO attainment per run: overall, chat and code, in % (the catalog's display unit)."""
    fig = go.Figure()
    labels = [run_label(s) for s in summaries]
    for key, name in (("slo_attainment", "overall"), ("slo_attainment_by_task.chat", "chat"),
                      ("slo_attainment_by_task.code", "code")):
        entry = metric(key)
        values = [summary_value(s, key) for s in summaries]
        fig.add_bar(name=name, x=labels, y=[entry.display(v) for v in values],
                    text=[None if v is None else f"{entry.format(v)}%" for v in values], textposition="outside")
    fig.update_yaxes(title=metric("slo_attainment").label, range=[0, 110])
    return _layout(fig, "SLO attainment")


def g_bars(summaries: Sequence[dict[str, Any]]) -> go.Figure:
    """G = SLO-meeting requests / sum of E2E latency (1/s) per run."""
    labels = [run_label(s) for s in summaries]
    entry = metric("G")
    values = [summary_value(s, "G") for s in summaries]
    fig = go.Figure(go.Bar(x=labels, y=[entry.display(v) for v in values],
                           text=[None if v is None else entry.format(v) for v in values],
                           textposition="outside", marker_color="#2ca02c"))
    fig.update_yaxes(title=entry.label)
    return _layout(fig, "G (SLO-meeting requests per second of summed latency)")


def latency_cdfs(runs: Sequence[RunData], column: str = "e2e_s") -> go.Figure:
    """CDF of one per-request latency (a request column of the catalog) per task (a panel each),
    one line per run, in the catalog's display unit (TPOT in ms)."""
    entry = metric(column)
    tasks = ("chat", "code")
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"{task}" for task in tasks], shared_yaxes=True)
    palette = pio.templates["plotly_white"].layout.colorway
    points = _share(2 * len(runs), 400)
    for index, run in enumerate(runs):
        colour = palette[index % len(palette)]
        frame = run.requests
        for col, task in enumerate(tasks, start=1):
            values = frame.loc[frame["task"] == task, column] * entry.scale if len(frame) else []
            x, y = cdf_points(values, points)
            fig.add_scatter(x=x, y=y, mode="lines", name=run.run_id, legendgroup=run.run_id,
                            showlegend=col == 1, line={"color": colour}, row=1, col=col)
    fig.update_xaxes(title=entry.label)
    fig.update_yaxes(title="fraction of requests", range=[0, 1.02], row=1, col=1)
    return _layout(fig, f"{entry.label} CDF per task")


def _slo_limits(run: RunData) -> dict[str, dict[str, float]]:
    return (run.config.get("resolved") or {}).get("slos") or {}


def ttft_tpot_scatter(runs: Sequence[RunData], seed: int = 0) -> go.Figure:
    """TTFT vs TPOT of every completed request (sampled to 2,000 per run), with each task's SLO
    box where both its TTFT and TPOT limits are set (the SLO-aware paper's chat SLO)."""
    fig = go.Figure()
    palette = pio.templates["plotly_white"].layout.colorway
    rng = np.random.default_rng(seed)
    points = _share(len(runs), MAX_SCATTER_POINTS) // 3  # markers cost far more to draw than line points
    ttft, tpot = metric("ttft_s"), metric("tpot_s")
    for index, run in enumerate(runs):
        frame = run.requests.dropna(subset=["ttft_s", "tpot_s"]) if len(run.requests) else run.requests
        if len(frame) > points:
            frame = frame.iloc[np.sort(rng.choice(len(frame), points, replace=False))]
        fig.add_scattergl(x=frame["ttft_s"] * ttft.scale, y=frame["tpot_s"] * tpot.scale, mode="markers",
                          name=run.run_id, marker={"color": palette[index % len(palette)], "size": 5, "opacity": 0.6},
                          text=frame["task"], hovertemplate=f"%{{text}}: TTFT %{{x:.3f}} {ttft.unit}, "
                                                            f"TPOT %{{y:.1f}} {tpot.unit}")
    drawn = set()
    for run in runs[:1]:
        for task, limits in _slo_limits(run).items():
            if limits.get("ttft_s") and limits.get("tpot_s") and task not in drawn:
                drawn.add(task)
                corner = limits["ttft_s"] * ttft.scale, limits["tpot_s"] * tpot.scale
                fig.add_shape(type="rect", x0=0, y0=0, x1=corner[0], y1=corner[1],
                              line={"color": TASK_COLOURS.get(task, "grey"), "dash": "dash"})
                fig.add_annotation(x=corner[0], y=corner[1], text=f"{task} SLO",
                                   showarrow=False, xanchor="right", yanchor="bottom")
    fig.update_xaxes(title=ttft.label)
    fig.update_yaxes(title=tpot.label)
    return _layout(fig, "TTFT vs TPOT (dashed box: SLO)")


def _per_time(frame: pd.DataFrame, column: str, how: str) -> pd.Series:
    if not len(frame):
        return pd.Series(dtype=float)
    grouped = frame.groupby("t_s")[column]
    return grouped.mean() if how == "mean" else grouped.sum()


#: The in-engine scheduler's decisions drawn beside the batch size: column -> line dash.
ENGINE_DECISION_LINES: dict[str, str] = {"engine_limit": "dash", "engine_held_back": "dot"}


def _has_values(frame: pd.DataFrame, column: str) -> bool:
    """True when ``frame`` has ``column`` with at least one non-null value (runs without an
    in-engine scheduler, and files of older schema versions, have none)."""
    return column in frame.columns and bool(frame[column].notna().any())


def timeseries_overlay(runs: Sequence[RunData], column: str, how: str, title: str, axis: str,
                       scale: float = 1.0, smooth_samples: int = 1,
                       companions: dict[str, str] | None = None) -> go.Figure:
    """``column`` of each run's time series against run time, combined over instances with
    ``how`` (mean or sum), one line per run. ``companions`` (column -> line dash): further
    columns drawn, summed over instances, in the run's colour with that dash, for the runs that
    have values in them (label: the catalog's)."""
    fig = go.Figure()
    points = _share(len(runs), MAX_SERIES_POINTS, floor=200)
    palette = pio.templates["plotly_white"].layout.colorway
    for index, run in enumerate(runs):
        colour = palette[index % len(palette)]
        series = _per_time(run.timeseries, column, how) * scale
        if smooth_samples > 1 and len(series):
            series = series.rolling(smooth_samples, min_periods=1).mean()
        t, y = thin_series(series.index.to_numpy(), series.to_numpy(), points)
        fig.add_scatter(x=t, y=y, mode="lines", name=run.run_id, legendgroup=run.run_id, line={"color": colour})
        for other, dash in (companions or {}).items():
            if not _has_values(run.timeseries, other):
                continue
            entry = timeseries_metric(other)
            extra = run.timeseries.groupby("t_s")[other].sum(min_count=1) * entry.scale
            t, y = thin_series(extra.index.to_numpy(), extra.to_numpy(), points)
            fig.add_scatter(x=t, y=y, mode="lines", name=f"{run.run_id}: {entry.label}", legendgroup=run.run_id,
                            line={"color": colour, "dash": dash})
    fig.update_xaxes(title="run time (s)")
    fig.update_yaxes(title=axis)
    return _layout(fig, title)


def kv_overlay(runs: Sequence[RunData]) -> go.Figure:
    """The memory sawtooth: KV-cache usage (% of capacity, mean over instances) over time, on a
    fixed 0-100% axis so a cache that is never full looks it."""
    kv = timeseries_metric("kv_usage")
    fig = timeseries_overlay(runs, kv.key, "mean", "KV-cache usage over time", kv.label, kv.scale)
    fig.update_yaxes(range=[0, 100])
    return fig


def batch_size_over_time(runs: Sequence[RunData]) -> go.Figure:
    """Running requests (the engine's batch) summed over instances; for a run with an in-engine
    scheduler, also its running limit (dashed) and the requests it held back (dotted), summed
    over instances."""
    running = timeseries_metric("running")
    return timeseries_overlay(runs, running.key, "sum", "Batch size (running requests) over time", running.label,
                              companions=ENGINE_DECISION_LINES)


def throughput_over_time(runs: Sequence[RunData], smooth_samples: int = 8) -> go.Figure:
    """Output tokens per second, summed over instances, rolling mean over ``smooth_samples``
    telemetry samples (2 s at the default 0.25 s sampling)."""
    return timeseries_overlay(runs, "tokens_per_s", "sum", "Output throughput over time", "output tokens/s",
                              smooth_samples=smooth_samples)


COMPARISON_CHARTS = {
    "slo_attainment": lambda summaries, runs: attainment_bars(summaries),
    "g": lambda summaries, runs: g_bars(summaries),
    "ttft_cdf": lambda summaries, runs: latency_cdfs(runs, "ttft_s"),
    "tpot_cdf": lambda summaries, runs: latency_cdfs(runs, "tpot_s"),
    "e2e_cdf": lambda summaries, runs: latency_cdfs(runs, "e2e_s"),
    "ttft_vs_tpot": lambda summaries, runs: ttft_tpot_scatter(runs),
    "kv_usage": lambda summaries, runs: kv_overlay(runs),
    "batch_size": lambda summaries, runs: batch_size_over_time(runs),
    "throughput": lambda summaries, runs: throughput_over_time(runs),
}
#: The comparison's chart groups, as the Results page offers them (a browser draws one group
#: at a time quickly; "All charts" draws the nine).
CHART_VIEWS: dict[str, tuple[str, ...]] = {
    "Overview": ("slo_attainment", "g"),
    "Latency CDFs": ("ttft_cdf", "tpot_cdf", "e2e_cdf"),
    "TTFT vs TPOT": ("ttft_vs_tpot",),
    "Memory & batch": ("kv_usage", "batch_size"),
    "Throughput": ("throughput",),
    "All charts": tuple(COMPARISON_CHARTS),
}


def comparison_chart(name: str, summaries: Sequence[dict[str, Any]], runs: Sequence[RunData]) -> go.Figure:
    """One comparison chart by its key (see COMPARISON_CHARTS)."""
    return COMPARISON_CHARTS[name](summaries, runs)


def comparison_charts(summaries: Sequence[dict[str, Any]], runs: Sequence[RunData],
                      names: Sequence[str] | None = None) -> dict[str, go.Figure]:
    """The comparison charts (all, or ``names``), by key (also the export file name)."""
    return {name: comparison_chart(name, summaries, runs) for name in (names or COMPARISON_CHARTS)}


# -- sweeps ----------------------------------------------------------------------------------------
def sweep_charts(frame: pd.DataFrame, target: float) -> dict[str, go.Figure]:
    """SLO attainment and G against arrival rate, a line per scheduler; the target as a line."""
    attainment, g = go.Figure(), go.Figure()
    share, g_metric = metric("slo_attainment"), metric("G")
    for scheduler, group in frame.groupby("scheduler", sort=True):
        group = group.sort_values("rate_rps")
        attainment.add_scatter(x=group["rate_rps"], y=group["slo_attainment"] * share.scale, mode="lines+markers",
                               name=scheduler)
        g.add_scatter(x=group["rate_rps"], y=group["G"] * g_metric.scale, mode="lines+markers", name=scheduler)
    attainment.add_hline(y=target * share.scale, line={"dash": "dot", "color": "grey"},
                         annotation_text=f"target {target:.0%}")
    attainment.update_yaxes(title=share.label, range=[0, 105])
    g.update_yaxes(title=g_metric.label)
    for fig in (attainment, g):
        fig.update_xaxes(title="arrival rate (req/s)")
    return {"sweep_attainment": _layout(attainment, "SLO attainment vs arrival rate"),
            "sweep_g": _layout(g, "G vs arrival rate")}


# -- live view -------------------------------------------------------------------------------------
def live_latency_scatter(requests: pd.DataFrame) -> go.Figure:
    """TTFT, TPOT and E2E of each finished request against its finish time, coloured by task,
    marked by SLO met (circle) or missed (x)."""
    shown = [metric(column) for column in ("ttft_s", "tpot_s", "e2e_s")]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[entry.label for entry in shown])
    frame = requests.dropna(subset=["finish_s"]) if len(requests) else requests
    if len(frame) > MAX_SCATTER_POINTS:
        frame = frame.iloc[-MAX_SCATTER_POINTS:]
    for task in ("chat", "code"):
        for met in (True, False):
            part = frame[(frame["task"] == task) & (frame["slo_met"].fillna(False) == met)] if len(frame) else frame
            name = f"{task}, SLO {'met' if met else 'missed'}"
            for col, entry in enumerate(shown, start=1):
                fig.add_scattergl(x=part["finish_s"], y=part[entry.key] * entry.scale, mode="markers", name=name,
                                  legendgroup=name, showlegend=col == 1,
                                  marker={"color": TASK_COLOURS[task], "symbol": MET_SYMBOLS[met], "size": 6,
                                          "opacity": 0.7}, row=1, col=col)
    fig.update_xaxes(title="finish time (s)")
    return _layout(fig, "Per-request latency as requests finish", height=340)


def live_instance_series(timeseries: pd.DataFrame) -> go.Figure:
    """KV-cache usage and batch size (running requests) per instance over time; beside the batch
    size, an in-engine scheduler's running limit (dashed) and held-back requests (dotted) for
    the instances that record them."""
    kv, running = timeseries_metric("kv_usage"), timeseries_metric("running")
    fig = make_subplots(rows=1, cols=2, subplot_titles=[kv.label, running.label])
    palette = pio.templates["plotly_white"].layout.colorway
    if len(timeseries):
        for index, (instance, group) in enumerate(timeseries.groupby("instance", sort=True)):
            group = group.sort_values("t_s")
            colour = palette[index % len(palette)]
            t, y = thin_series(group["t_s"], group[kv.key].astype(float) * kv.scale)
            fig.add_scatter(x=t, y=y, mode="lines", name=f"instance {instance}", legendgroup=str(instance),
                            line={"color": colour}, row=1, col=1)
            t, y = thin_series(group["t_s"], group[running.key].astype(float) * running.scale)
            fig.add_scatter(x=t, y=y, mode="lines", name=f"instance {instance}", legendgroup=str(instance),
                            showlegend=False, line={"color": colour}, row=1, col=2)
            for column, dash in ENGINE_DECISION_LINES.items():
                if not _has_values(group, column):
                    continue
                entry = timeseries_metric(column)
                t, y = thin_series(group["t_s"], group[column].astype(float) * entry.scale)
                fig.add_scatter(x=t, y=y, mode="lines", name=f"instance {instance}: {entry.label}",
                                legendgroup=str(instance), line={"color": colour, "dash": dash}, row=1, col=2)
    fig.update_xaxes(title="run time (s)")
    return _layout(fig, "Engine state per instance", height=320)


# -- export ----------------------------------------------------------------------------------------
def charts_html(figures: dict[str, go.Figure], title: str) -> str:
    """One standalone HTML page holding every figure (plotly.js inlined once, works offline)."""
    parts = []
    for index, (key, fig) in enumerate(figures.items()):
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs="inline" if index == 0 else False,
                                 div_id=f"chart-{key}"))
    body = "\n".join(parts)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
            f"<body><h1>{title}</h1>\n{body}\n</body></html>")


def chart_png(fig: go.Figure, width: int = 1100, height: int | None = None) -> bytes:
    """The figure as PNG bytes, rendered by kaleido (which drives a local Chromium)."""
    try:
        import kaleido  # noqa: F401
    except ImportError as exc:
        raise ExportUnavailable("PNG export needs the 'kaleido' package (pip install kaleido) and Chromium; "
                                "the camera icon on each chart also downloads a PNG") from exc
    try:
        return pio.to_image(fig, format="png", width=width, height=height or fig.layout.height or 400)
    except Exception as exc:  # kaleido reports a missing browser in several ways
        raise ExportUnavailable(f"PNG export failed ({type(exc).__name__}: {exc}); install Chromium, or use the "
                                "camera icon on the chart") from exc
