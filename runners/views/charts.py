"""Plotly figures for the dashboard (comparison, sweeps, live view, demo) and their export.

Every function takes plain data (run summaries, :class:`runners.store.result_store.RunData`, data
frames) and returns a ``plotly.graph_objects.Figure``; nothing here imports streamlit. Long
series are thinned before drawing (min and max of each bin kept, so a memory sawtooth keeps its
peaks and troughs), which is what keeps a 20-run comparison fast. Metric labels, units and scales
come from the catalog (:mod:`runners.metrics.catalog`): one unit per quantity, TPOT in ms in
every chart and every tooltip; a percent axis runs 0-100 (:func:`percent_axis`). Runs are named
by their display names (:func:`runners.views.compare.run_display_names`, or the caller's run id -> name
mapping) and every tooltip ends with the run id. Legends sit under the x axis and the figure grows
by their rows (:func:`apply_layout`), so labels and legends never overlap at any number of runs. A
study's figures (error bars, pooled CDFs, interval bands) are in :mod:`runners.views.study_charts`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from runners.metrics.catalog import TURN_LABEL, Metric, metric, timeseries_metric, turn_metric
from runners.store.models import RunSummary
from runners.store.result_store import RunData
from runners.views.colours import TASK_PATTERNS, run_colours, scheduler_colour, task_symbol
from runners.views.compare import run_display_names, summary_value
from runners.views.prefix_view import HIT_RATE_WINDOW_S, has_prefix_counters, hit_rate_entry, hit_rate_over_time
from runners.workload.slo import TASKS

#: How each task's SLO lines and boxes are drawn: neutral grey (the run colours stay the runs'),
#: the task told apart by the dash and by its label.
SLO_COLOUR = "#555555"
SLO_DASH = {"chat": "dash", "code": "dot"}
MAX_SERIES_POINTS = 1500
MAX_SCATTER_POINTS = 2000
#: Points drawn per chart across all runs: each run gets an equal share (a floor keeps shapes
#: readable), so a 20-run comparison sends the browser about as much as a 4-run one.
CHART_POINT_BUDGET = 12_000
#: The time axis of the time-series charts (seconds since the run started: simulated time for the
#: simulator, wall-clock time for a real engine).
RUN_TIME_LABEL = "run time (s)"
SIMULATED_TIME_LABEL = "run time, simulated (s)"

# Layout in pixels: the legend sits under the plot, below the x axis's tick labels and title, and
# the figure grows by the legend's rows, so neither the legend nor a label covers the other at any
# number of runs. Legend rows are estimated for a half-width chart at a 1,024 px window (two charts side
# by side).
TOP_PX = 60
AXIS_BLOCK_PX = 58
LEGEND_ROW_PX = 22
LEGEND_WIDTH_PX = 440


def _schedulers(runs: Sequence[RunData]) -> list[str | None]:
    """Each run's scheduler (None where its summary does not name one), for its colour."""
    return [getattr(run.summary, "scheduler", None) for run in runs]


def cdf_points(values: Any, max_points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(sorted values, cumulative fraction) of the finite ``values``, thinned to at most
    ``max_points`` points (evenly in rank) so large runs draw fast; the extremes are kept."""
    array = np.sort(np.asarray(values, dtype=float))
    array = array[np.isfinite(array)]
    if array.size == 0:
        return array, array
    fractions = np.arange(1, array.size + 1) / array.size
    if array.size > max_points:
        index = np.unique(np.linspace(0, array.size - 1, max_points).round().astype(int))
        return array[index], fractions[index]
    return array, fractions


def point_share(runs: int, ceiling: int, floor: int = 100) -> int:
    return max(floor, min(ceiling, CHART_POINT_BUDGET // max(1, runs)))


class ExportUnavailable(RuntimeError):
    """PNG export needs the kaleido package and a Chromium it can drive."""


def _legend_names(fig: go.Figure) -> list[str]:
    """The names the legend shows (plotly hides the legend of a figure with one trace unless asked)."""
    shown = [trace for trace in fig.data if trace.showlegend is not False and trace.name]
    if len(fig.data) < 2 and not any(trace.showlegend for trace in shown):
        return []
    return [trace.name for trace in shown]


def legend_rows(names: Sequence[str], width_px: int = LEGEND_WIDTH_PX) -> int:
    """Rows a horizontal legend of ``names`` takes at ``width_px`` (about 7 px a character plus
    40 px for the symbol and the gap)."""
    rows, used = 0, width_px
    for name in names:
        item = 40 + 7 * len(name)
        if used + item > width_px:
            rows, used = rows + 1, 0
        used += item
    return rows


def apply_layout(fig: go.Figure, title: str, height: int = 380, axis_block_px: int = AXIS_BLOCK_PX) -> go.Figure:
    """Title, size and the legend: horizontal, under the x axis (``axis_block_px`` of tick labels
    and axis title), the figure ``height`` plus the legend's rows so the plot keeps its size."""
    rows = legend_rows(_legend_names(fig))
    legend_px = rows * LEGEND_ROW_PX
    bottom = axis_block_px + legend_px + 8
    total = height + legend_px
    plot_px = max(100, total - TOP_PX - bottom)
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        height=total,
        margin={"l": 60, "r": 20, "t": TOP_PX, "b": bottom},
        template="plotly_white",
        legend={"orientation": "h", "yanchor": "top", "y": -axis_block_px / plot_px, "xanchor": "left", "x": 0},
        hoverlabel={"namelength": -1},
    )
    return fig


def percent_axis(fig: go.Figure, entry: Metric, axis: str = "y", **selector: Any) -> None:
    """A percent axis runs 0-100: when ``entry``'s display unit is %, fix ``axis`` (x or y) of
    ``fig`` (or the subplot ``selector`` names, e.g. row=1, col=1) to [0, 100]; values are drawn
    in display units (stored fraction x 100), so a cache 1.2% full reads 1.2, not 1.2 of 100."""
    if entry.unit != "%":
        return
    update = fig.update_yaxes if axis == "y" else fig.update_xaxes
    update(range=[0, 100], **selector)


# -- names and tooltips ----------------------------------------------------------------------------
def display_names(runs: Sequence[Any], names: Mapping[str, str] | None = None) -> dict[str, str]:
    """run id -> the name a chart shows for each of ``runs`` (loaded runs or summaries):
    ``names`` where given (the caller's), else :func:`runners.views.compare.run_display_names`; a run
    whose summary names no scheduler keeps its run id."""
    ids = [str(run.run_id) for run in runs]
    if names is not None:
        return {run_id: str(names.get(run_id, run_id)) for run_id in ids}
    found = run_display_names(runs)
    shown: dict[str, str] = {}
    for run_id, run in zip(ids, runs):
        summary = run if isinstance(run, RunSummary) else getattr(run, "summary", None)
        scheduler = summary.scheduler if isinstance(summary, RunSummary) else None
        shown[run_id] = found.get(run_id, run_id) if scheduler else run_id
    return shown


def hover_safe(text: str) -> str:
    """``text`` safe inside a plotly hovertemplate (no ``%{`` field opens)."""
    return str(text).replace("%{", "% {")


def quantity(entry: Metric) -> str:
    """The entry's label without its bracketed unit: 'TPOT (ms)' -> 'TPOT' (the unit follows the
    value in a tooltip)."""
    suffix = f" ({entry.unit})"
    return entry.label[: -len(suffix)] if entry.unit and entry.label.endswith(suffix) else entry.label


def hover_value(entry: Metric, field: str = "y") -> str:
    """A hovertemplate field of ``entry``'s display value with the catalog's precision and unit,
    e.g. ``%{x:.1f} ms`` for TPOT or ``%{y:.1f}%`` for an attainment."""
    spec = ".4g" if entry.decimals is None else f".{entry.decimals}f"
    unit = "" if not entry.unit else (entry.unit if entry.unit == "%" else f" {entry.unit}")
    return f"%{{{field}:{spec}}}{unit}"


def _run_hover(name: str, run_id: str, *lines: str) -> str:
    """Tooltip of one run's trace: its display name in bold, ``lines``, then its run id."""
    body = "<br>".join(lines)
    return f"<b>{hover_safe(name)}</b><br>{body}<br>run {hover_safe(run_id)}<extra></extra>"


def _threshold(entry: Metric, value: float) -> str:
    """An SLO limit (stored units) in the entry's display unit, e.g. '50 ms', '10 s'."""
    return f"{format(value * entry.scale, '.4g')} {entry.unit}".rstrip()


def thin_series(t: Any, y: Any, max_points: int = MAX_SERIES_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most about ``max_points`` points of the series (t sorted): each bin of consecutive
    samples contributes its minimum and its maximum, in time order (a bin of NaN only: its first
    point, so a gap stays a gap)."""
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
        if np.isnan(segment).all():  # a gap (e.g. no prefix-cache lookups): one point keeps it
            keep.append(start)
            continue
        low, high = start + int(np.nanargmin(segment)), start + int(np.nanargmax(segment))
        keep.extend(sorted({low, high}))
    index = np.asarray(keep)
    return t[index], y[index]


def run_label(summary: RunSummary) -> str:
    """The run id of a summary (the key charts look display names up by)."""
    return str(summary.run_id)


def category_axis(fig: go.Figure, names: Sequence[str]) -> int:
    """Run names as bar-chart categories: horizontal, one line per ' · ' part (so five runs at
    half width never tilt into the legend); returns the pixels the tick labels and gap take."""
    fig.update_xaxes(tickangle=0, automargin=False)
    lines = max((name.count(" · ") + 1 for name in names), default=1)
    return 24 + 15 * lines


def wrap_name(name: str) -> str:
    return name.replace(" · ", "<br>")


def _span(fig: go.Figure, axis: str, letter: str = "x") -> tuple[float, float] | None:
    """(lowest, highest) finite value the traces on ``axis`` (e.g. 'x', 'x2') draw, or None."""
    values = [
        np.asarray(getattr(trace, letter), dtype=float)
        for trace in fig.data
        if (getattr(trace, f"{letter}axis") or letter) == axis and getattr(trace, letter) is not None
    ]
    drawn = np.concatenate(values) if values else np.asarray([], dtype=float)
    drawn = drawn[np.isfinite(drawn)]
    return (float(drawn.min()), float(drawn.max())) if drawn.size else None


def label_side(value: float, span: tuple[float, float] | None, log: bool = False) -> str:
    """Which way a label at ``value`` extends so it stays on the plot: 'left' (text to the right of
    the value) in the left 60% of ``span`` (the axis's drawn range; logarithmic with ``log``),
    'right' beyond it."""
    if span is None:
        return "left"
    low, high = min(span[0], value), max(span[1], value)
    if log:  # a log axis draws positive values only
        if value <= 0:
            return "left"
        low = low if low > 0 else value
        low, high, value = math.log10(low), math.log10(high), math.log10(value)
    return "left" if high <= low or (value - low) / (high - low) <= 0.6 else "right"


# -- comparison ------------------------------------------------------------------------------------
COMPARISON_CHART_TITLES: dict[str, str] = {
    "slo_attainment": "SLO attainment",
    "g": "G (SLO-meeting requests per second of summed latency)",
    "ttft_cdf": f"{quantity(metric('ttft_s'))} CDF per task",
    "tpot_cdf": f"{quantity(metric('tpot_s'))} CDF per task",
    "e2e_cdf": f"{quantity(metric('e2e_s'))} CDF per task",
    "ttft_vs_tpot": "TTFT vs TPOT per request, with each task's SLO region",
    "kv_usage": "KV-cache usage over time",
    "batch_size": "Batch size (running requests) over time",
    "throughput": "Output throughput over time",
}


def attainment_bars(summaries: Sequence[RunSummary], names: Mapping[str, str] | None = None) -> go.Figure:
    """SLO attainment per run: overall, chat and code, in % (the catalog's display unit), on a
    0-100 axis; runs named by their display names (``names``: run id -> name), id on hover. Each
    run's bars take its scheduler's colour; overall, chat and code are told apart by fill pattern."""
    fig = go.Figure()
    shown = display_names(summaries, names)
    ids = [run_label(s) for s in summaries]
    labels = [wrap_name(shown[run_id]) for run_id in ids]
    colours = run_colours([getattr(s, "scheduler", None) for s in summaries])
    for key, part in (
        ("slo_attainment", "overall"),
        ("slo_attainment_by_task.chat", "chat"),
        ("slo_attainment_by_task.code", "code"),
    ):
        entry = metric(key)
        values = [summary_value(s, key) for s in summaries]
        fig.add_bar(
            name=part,
            x=labels,
            y=[entry.display(v) for v in values],
            marker={"color": colours, "pattern": {"shape": TASK_PATTERNS[part], "fgcolor": "#333333"}},
            text=[None if v is None else f"{entry.format(v)}{entry.unit}" for v in values],
            textposition="auto",
            cliponaxis=False,
            customdata=[[shown[run_id], run_id] for run_id in ids],
            hovertemplate=f"<b>%{{customdata[0]}}</b><br>{hover_safe(quantity(entry))}: {hover_value(entry)}"
            f"<br>run %{{customdata[1]}}<extra></extra>",
        )
    entry = metric("slo_attainment")
    fig.update_yaxes(title=entry.label)
    percent_axis(fig, entry)
    block = category_axis(fig, [shown[run_id] for run_id in ids])
    return apply_layout(fig, COMPARISON_CHART_TITLES["slo_attainment"], axis_block_px=block)


def g_bars(summaries: Sequence[RunSummary], names: Mapping[str, str] | None = None) -> go.Figure:
    """G = SLO-meeting requests / sum of E2E latency (1/s) per run, runs by display name."""
    shown = display_names(summaries, names)
    ids = [run_label(s) for s in summaries]
    entry = metric("G")
    values = [summary_value(s, "G") for s in summaries]
    colours = run_colours([getattr(s, "scheduler", None) for s in summaries])  # each run in its scheduler's colour
    fig = go.Figure(
        go.Bar(
            x=[wrap_name(shown[run_id]) for run_id in ids],
            y=[entry.display(v) for v in values],
            text=[None if v is None else entry.format(v) for v in values],
            textposition="auto",
            cliponaxis=False,
            marker_color=colours,
            name=quantity(entry),
            customdata=[[shown[run_id], run_id] for run_id in ids],
            hovertemplate=f"<b>%{{customdata[0]}}</b><br>{hover_safe(quantity(entry))}: "
            f"{hover_value(entry)}<br>run %{{customdata[1]}}<extra></extra>",
        )
    )
    fig.update_yaxes(title=entry.label)
    block = category_axis(fig, [shown[run_id] for run_id in ids])
    return apply_layout(fig, COMPARISON_CHART_TITLES["g"], axis_block_px=block)


def _slo_limits(run: RunData) -> dict[str, dict[str, float]]:
    """The run's SLO limits per task (config.json ``resolved.slos``), seconds."""
    slos = (run.config.get("resolved") or {}).get("slos") if isinstance(run.config, dict) else None
    return {task: limits for task, limits in (slos or {}).items() if isinstance(limits, dict)}


def slo_thresholds(
    runs: Sequence[RunData], column: str, names: Mapping[str, str] | None = None
) -> dict[str, list[tuple[float, list[str]]]]:
    """task -> [(limit in seconds, display names of the runs that use it)] of request column
    ``column`` (ttft_s, tpot_s or e2e_s) over ``runs``, distinct limits in increasing order."""
    shown = display_names(runs, names)
    found: dict[str, dict[float, list[str]]] = {}
    for run in runs:
        for task, limits in _slo_limits(run).items():
            value = limits.get(column)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                users = found.setdefault(task, {}).setdefault(float(value), [])
                if shown[run.run_id] not in users:
                    users.append(shown[run.run_id])
    return {task: sorted(values.items()) for task, values in found.items()}


def draw_slo_lines(
    fig: go.Figure,
    thresholds: dict[str, list[tuple[float, list[str]]]],
    entry: Metric,
    tasks: Sequence[str],
    log_x: bool,
    all_names: int,
) -> None:
    """Each task's SLO limits as vertical lines in its panel (panel i+1 is ``tasks[i]``), labelled
    '<task> SLO <value> <unit>' (and the runs using it when not all ``all_names`` runs do);
    labels stacked up from the panel's foot so two limits never share a spot."""
    for col, task in enumerate(tasks, start=1):
        axis = "" if col == 1 else str(col)
        for index, (value, users) in enumerate(thresholds.get(task, [])):
            shown = value * entry.scale
            fig.add_shape(
                type="line",
                x0=shown,
                x1=shown,
                y0=0,
                y1=1,
                xref=f"x{axis}",
                yref=f"y{axis} domain",
                line={"color": SLO_COLOUR, "dash": SLO_DASH.get(task, "dash"), "width": 1.5},
            )
            who = "" if len(users) == all_names else f" ({', '.join(users)})"
            side = label_side(shown, _span(fig, f"x{axis}"), log_x)
            fig.add_annotation(
                x=math.log10(shown) if log_x else shown,
                y=0.03 + 0.09 * index,
                xref=f"x{axis}",
                yref=f"y{axis} domain",
                text=f"{task} SLO {_threshold(entry, value)}{who}",
                showarrow=False,
                xanchor=side,
                yanchor="bottom",
                xshift=3 if side == "left" else -3,
                bgcolor="rgba(255,255,255,0.8)",
                font={"size": 11, "color": SLO_COLOUR},
            )


def cdf_hover(entry: Metric, task: str, name: str, run_id: str | None = None) -> str:
    """Tooltip of one CDF line: name, '<task>: <quantity> ≤ x <unit> for y% of requests', run."""
    line = f"{task}: {hover_safe(quantity(entry))} ≤ {hover_value(entry, 'x')} for %{{y:.1%}} of requests"
    if run_id is None:
        return f"<b>{hover_safe(name)}</b><br>{line}<extra></extra>"
    return _run_hover(name, run_id, line)


def latency_cdfs(
    runs: Sequence[RunData], column: str = "e2e_s", log_x: bool = False, names: Mapping[str, str] | None = None
) -> go.Figure:
    """CDF of one per-request latency (a request column of the catalog) per task (a panel each),
    one line per run named by its display name, in the catalog's display unit (TPOT in ms); each
    task's SLO limit on that quantity drawn as a labelled vertical line in its panel; ``log_x``:
    a logarithmic latency axis (latencies spanning decades; zero values are not drawn)."""
    entry = metric(column)
    tasks = TASKS
    shown = display_names(runs, names)
    fig = make_subplots(rows=1, cols=2, subplot_titles=list(tasks), shared_yaxes=True)
    colours = run_colours(_schedulers(runs))
    points = point_share(2 * len(runs), 400)
    for run, colour in zip(runs, colours):
        frame = run.requests
        for col, task in enumerate(tasks, start=1):
            values = frame.loc[frame["task"] == task, column] * entry.scale if len(frame) else []
            x, y = cdf_points(values, points)
            fig.add_scatter(
                x=x,
                y=y,
                mode="lines",
                name=shown[run.run_id],
                legendgroup=run.run_id,
                showlegend=col == 1,
                line={"color": colour},
                row=1,
                col=col,
                hovertemplate=cdf_hover(entry, task, shown[run.run_id], run.run_id),
            )
    draw_slo_lines(fig, slo_thresholds(runs, column, shown), entry, tasks, log_x, len(runs))
    fig.update_xaxes(title=entry.label, type="log" if log_x else "linear")
    fig.update_yaxes(title="fraction of requests", range=[0, 1.02], row=1, col=1)
    return apply_layout(
        fig, COMPARISON_CHART_TITLES.get(f"{column.removesuffix('_s')}_cdf", f"{quantity(entry)} CDF per task")
    )


def ttft_tpot_scatter(runs: Sequence[RunData], seed: int = 0, names: Mapping[str, str] | None = None) -> go.Figure:
    """TTFT vs TPOT of every completed request (sampled to 2,000 per run), runs by display name,
    with each task's SLO region: the box from 0 to its TTFT and TPOT limits, a band when only one
    of the two is set; a task limited by E2E alone has no region in this plane, which its legend
    entry says."""
    fig = go.Figure()
    shown = display_names(runs, names)
    colours = run_colours(_schedulers(runs))
    rng = np.random.default_rng(seed)
    points = point_share(len(runs), MAX_SCATTER_POINTS) // 3  # markers cost far more to draw than line points
    ttft, tpot = metric("ttft_s"), metric("tpot_s")
    for run, colour in zip(runs, colours):
        frame = run.requests.dropna(subset=["ttft_s", "tpot_s"]) if len(run.requests) else run.requests
        if len(frame) > points:
            frame = frame.iloc[np.sort(rng.choice(len(frame), points, replace=False))]
        name = shown[run.run_id]
        fig.add_scattergl(
            x=frame["ttft_s"] * ttft.scale,
            y=frame["tpot_s"] * tpot.scale,
            mode="markers",
            name=name,
            marker={
                "color": colour,
                "symbol": [task_symbol(task) for task in frame["task"]],
                "size": 5,
                "opacity": 0.6,
            },
            text=frame["task"],
            hovertemplate=_run_hover(
                name,
                run.run_id,
                "%{text} request",
                f"{quantity(ttft)}: {hover_value(ttft, 'x')}",
                f"{quantity(tpot)}: {hover_value(tpot, 'y')}",
            ),
        )
    _slo_regions(fig, runs, ttft, tpot)
    fig.update_xaxes(title=ttft.label, rangemode="tozero")
    fig.update_yaxes(title=tpot.label, rangemode="tozero")
    return apply_layout(fig, COMPARISON_CHART_TITLES["ttft_vs_tpot"])


def _slo_regions(fig: go.Figure, runs: Sequence[RunData], ttft: Metric, tpot: Metric) -> None:
    """Each distinct (task, TTFT limit, TPOT limit) of ``runs`` as a dashed region, labelled at
    its top-right corner: the smaller region's label inside it, the larger's above it, so two
    labels never overlap; tasks with neither limit get a legend entry instead."""
    regions, e2e_only = _region_limits(runs)
    inf = float("inf")
    ordered = sorted(regions, key=lambda r: ((r[1] or inf) * (r[2] or inf), r[0]))
    for index, (task, x, y) in enumerate(ordered):
        _add_region(fig, task, x, y, ttft, tpot, inside=index == 0 and len(ordered) > 1)
    for task, limit in e2e_only.items():
        e2e = metric("e2e_s")
        limit_text = f"{quantity(e2e)} ≤ {_threshold(e2e, limit)}" if limit else "no TTFT or TPOT limit"
        fig.add_scatter(
            x=[None],
            y=[None],
            mode="lines",
            name=f"{task} SLO: {limit_text} (no region here)",
            line={"color": SLO_COLOUR, "dash": SLO_DASH.get(task, "dash")},
            showlegend=True,
            hoverinfo="skip",
        )


def _region_limits(
    runs: Sequence[RunData],
) -> tuple[dict[tuple[str, float | None, float | None], None], dict[str, float | None]]:
    """The distinct (task, TTFT limit, TPOT limit) of ``runs`` (seconds; None: no limit), and the
    tasks with neither limit, with their E2E limit."""
    regions: dict[tuple[str, float | None, float | None], None] = {}
    e2e_only: dict[str, float | None] = {}
    for run in runs:
        for task, limits in _slo_limits(run).items():
            x, y = limits.get("ttft_s"), limits.get("tpot_s")
            if x or y:
                regions[(task, x or None, y or None)] = None
            else:
                e2e_only[task] = limits.get("e2e_s")
    return regions, e2e_only


def _add_region(
    fig: go.Figure, task: str, x: float | None, y: float | None, ttft: Metric, tpot: Metric, inside: bool
) -> None:
    """One task's SLO region (TTFT limit ``x``, TPOT limit ``y``, seconds) and its label: inside
    the region's top-right corner when ``inside``, else above it."""
    line = {"color": SLO_COLOUR, "dash": SLO_DASH.get(task, "dash"), "width": 1.5}
    corner_x = x * ttft.scale if x else None
    corner_y = y * tpot.scale if y else None
    fig.add_shape(
        type="rect",
        x0=0,
        y0=0,
        x1=corner_x if x else 1,
        y1=corner_y if y else 1,
        xref="x" if x else "x domain",
        yref="y" if y else "y domain",
        line=line,
        fillcolor="rgba(85,85,85,0.05)",
        layer="below",
    )
    parts = [
        f"{quantity(ttft)} ≤ {_threshold(ttft, x)}" if x else None,
        f"{quantity(tpot)} ≤ {_threshold(tpot, y)}" if y else None,
    ]
    text = f"{task} SLO: " + ", ".join(part for part in parts if part)
    span = _span(fig, "x")
    side = label_side(corner_x, (0.0, span[1]) if span else None) if corner_x is not None else "right"
    fig.add_annotation(
        x=corner_x if x else 1,
        y=corner_y if y else 1,
        xref="x" if x else "x domain",
        yref="y" if y else "y domain",
        text=text,
        showarrow=False,
        xanchor=side,
        yanchor="top" if inside or not y else "bottom",
        bgcolor="rgba(255,255,255,0.8)",
        font={"size": 11, "color": SLO_COLOUR},
    )


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


def timeseries_overlay(
    runs: Sequence[RunData],
    column: str,
    how: str,
    title: str,
    entry: Metric,
    smooth_samples: int = 1,
    companions: dict[str, str] | None = None,
    names: Mapping[str, str] | None = None,
) -> go.Figure:
    """``column`` of each run's time series against run time, combined over instances with
    ``how`` (mean or sum), one line per run (display name; id on hover), in ``entry``'s display
    unit (stored x scale; a % axis runs 0-100). ``companions`` (column -> line dash): further
    columns drawn, summed over instances, in the run's colour with that dash, for the runs that
    have values in them (label: the catalog's)."""
    fig = go.Figure()
    shown = display_names(runs, names)
    points = point_share(len(runs), MAX_SERIES_POINTS, floor=200)
    colours = run_colours(_schedulers(runs))
    when = f"{RUN_TIME_LABEL.split(' (')[0]} %{{x:.1f}} s"
    for run, colour in zip(runs, colours):
        name = shown[run.run_id]
        series = _per_time(run.timeseries, column, how) * entry.scale
        if smooth_samples > 1 and len(series):
            series = series.rolling(smooth_samples, min_periods=1).mean()
        t, y = thin_series(series.index.to_numpy(), series.to_numpy(), points)
        fig.add_scatter(
            x=t,
            y=y,
            mode="lines",
            name=name,
            legendgroup=run.run_id,
            line={"color": colour},
            hovertemplate=_run_hover(name, run.run_id, when, f"{hover_safe(quantity(entry))}: {hover_value(entry)}"),
        )
        for other, dash in (companions or {}).items():
            if not _has_values(run.timeseries, other):
                continue
            extra_entry = timeseries_metric(other)
            extra = run.timeseries.groupby("t_s")[other].sum(min_count=1) * extra_entry.scale
            t, y = thin_series(extra.index.to_numpy(), extra.to_numpy(), points)
            fig.add_scatter(
                x=t,
                y=y,
                mode="lines",
                name=f"{name}: {extra_entry.label}",
                legendgroup=run.run_id,
                line={"color": colour, "dash": dash},
                hovertemplate=_run_hover(
                    name, run.run_id, when, f"{hover_safe(quantity(extra_entry))}: {hover_value(extra_entry)}"
                ),
            )
    fig.update_xaxes(title=RUN_TIME_LABEL)
    fig.update_yaxes(title=entry.label)
    percent_axis(fig, entry)
    return apply_layout(fig, title)


def kv_overlay(runs: Sequence[RunData], names: Mapping[str, str] | None = None) -> go.Figure:
    """The memory sawtooth: KV-cache usage (stored as a fraction 0-1, drawn in % of capacity,
    mean over instances) over time, on a fixed 0-100% axis so a cache that is never full looks it."""
    return timeseries_overlay(
        runs, "kv_usage", "mean", COMPARISON_CHART_TITLES["kv_usage"], timeseries_metric("kv_usage"), names=names
    )


def batch_size_over_time(runs: Sequence[RunData], names: Mapping[str, str] | None = None) -> go.Figure:
    """Running requests (the engine's batch) summed over instances; for a run with an in-engine
    scheduler, also its running limit (dashed) and the requests it held back (dotted), summed
    over instances."""
    return timeseries_overlay(
        runs,
        "running",
        "sum",
        COMPARISON_CHART_TITLES["batch_size"],
        timeseries_metric("running"),
        companions=ENGINE_DECISION_LINES,
        names=names,
    )


def throughput_over_time(
    runs: Sequence[RunData], smooth_samples: int = 8, names: Mapping[str, str] | None = None
) -> go.Figure:
    """Output tokens per second, summed over instances, rolling mean over ``smooth_samples``
    telemetry samples (2 s at the default 0.25 s sampling); unit: the catalog's output throughput."""
    return timeseries_overlay(
        runs,
        "tokens_per_s",
        "sum",
        COMPARISON_CHART_TITLES["throughput"],
        metric("output_throughput_tps"),
        smooth_samples=smooth_samples,
        names=names,
    )


COMPARISON_CHARTS = {
    "slo_attainment": lambda summaries, runs, names, log_x: attainment_bars(summaries, names),
    "g": lambda summaries, runs, names, log_x: g_bars(summaries, names),
    "ttft_cdf": lambda summaries, runs, names, log_x: latency_cdfs(runs, "ttft_s", log_x, names),
    "tpot_cdf": lambda summaries, runs, names, log_x: latency_cdfs(runs, "tpot_s", log_x, names),
    "e2e_cdf": lambda summaries, runs, names, log_x: latency_cdfs(runs, "e2e_s", log_x, names),
    "ttft_vs_tpot": lambda summaries, runs, names, log_x: ttft_tpot_scatter(runs, names=names),
    "kv_usage": lambda summaries, runs, names, log_x: kv_overlay(runs, names),
    "batch_size": lambda summaries, runs, names, log_x: batch_size_over_time(runs, names),
    "throughput": lambda summaries, runs, names, log_x: throughput_over_time(runs, names=names),
}
assert set(COMPARISON_CHARTS) == set(COMPARISON_CHART_TITLES), "every chart has a title"
#: The prefix-cache hit rate over time (:func:`prefix_hit_rate_over_time`): a chart of the over-time
#: group drawn only when some compared run has the counters, so not one of COMPARISON_CHARTS (the nine
#: every comparison draws); its key and title, and the views that draw it beside their charts.
PREFIX_HIT_RATE_CHART = "prefix_hit_rate"
PREFIX_HIT_RATE_TITLE = "Prefix-cache hit rate over time"
PREFIX_HIT_RATE_VIEWS: tuple[str, ...] = ("Memory & batch", "All charts")


def _hit_rate_line(
    fig: go.Figure, timeseries: pd.DataFrame, name: str, run_id: str | None, colour: str, window_s: float, points: int
) -> None:
    """One line of the hit rate over time (:func:`runners.views.prefix_view.hit_rate_over_time`,
    summed over instances, in %) of ``timeseries``; NaN (no lookups in the window) a gap."""
    entry = hit_rate_entry()
    series = hit_rate_over_time(timeseries, window_s)
    t, y = thin_series(series.index.to_numpy(), series.to_numpy(), points)
    when = f"{RUN_TIME_LABEL.split(' (')[0]} %{{x:.1f}} s"
    value = f"{hover_safe(quantity(entry))} over the last {window_s:g} s: {hover_value(entry)}"
    fig.add_scatter(
        x=t,
        y=[None if math.isnan(v) else float(v) for v in y],
        mode="lines",
        name=name,
        legendgroup=run_id or name,
        line={"color": colour},
        connectgaps=False,
        hovertemplate=_run_hover(name, run_id, when, value)
        if run_id is not None
        else f"<b>{hover_safe(name)}</b><br>{when}<br>{value}<extra></extra>",
    )


def prefix_hit_rate_over_time(
    runs: Sequence[RunData], names: Mapping[str, str] | None = None, window_s: float = HIT_RATE_WINDOW_S
) -> go.Figure:
    """The prefix-cache hit rate over run time of each run with the counters (tokens found cached
    / tokens looked up over the trailing ``window_s`` seconds, summed over instances, in % on a
    0-100 axis), one line per run in its scheduler's colour, named by its display name; runs
    without the counters are left out (the page names them). A gap where nothing was looked up."""
    fig = go.Figure()
    shown = display_names(runs, names)
    points = point_share(len(runs), MAX_SERIES_POINTS, floor=200)
    for run, colour in zip(runs, run_colours(_schedulers(runs))):  # colours as in the other charts
        if has_prefix_counters(run.timeseries):
            _hit_rate_line(fig, run.timeseries, shown[run.run_id], run.run_id, colour, window_s, points)
    entry = hit_rate_entry()
    fig.update_xaxes(title=RUN_TIME_LABEL)
    fig.update_yaxes(title=entry.label)
    percent_axis(fig, entry)
    return apply_layout(fig, PREFIX_HIT_RATE_TITLE)


#: The charts with a latency x axis that a log scale helps (the Results page's log-x toggle).
LOG_X_CHARTS: tuple[str, ...] = ("ttft_cdf", "tpot_cdf", "e2e_cdf")
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


def chart_title(name: str) -> str:
    """The title of comparison chart ``name`` (its key in COMPARISON_CHARTS), as a picker shows it."""
    return COMPARISON_CHART_TITLES[name]


def comparison_chart(
    name: str,
    summaries: Sequence[RunSummary],
    runs: Sequence[RunData],
    log_x: bool = False,
    names: Mapping[str, str] | None = None,
) -> go.Figure:
    """One comparison chart by its key (see COMPARISON_CHARTS); runs named by ``names`` (run id
    -> display name), by default :func:`runners.views.compare.run_display_names` of ``runs``; ``log_x``:
    a log latency axis for the CDFs (LOG_X_CHARTS), ignored by the others."""
    shown = display_names(runs if runs else summaries, names)
    return COMPARISON_CHARTS[name](summaries, runs, shown, log_x)


# -- sweeps ----------------------------------------------------------------------------------------
SWEEP_RATE_LABEL = "arrival rate (req/s)"


def sweep_charts(frame: pd.DataFrame, target: float) -> dict[str, go.Figure]:
    """SLO attainment (0-100%) and G against arrival rate, a line per scheduler in its colour; the
    target as a line."""
    attainment, g = go.Figure(), go.Figure()
    share, g_metric = metric("slo_attainment"), metric("G")
    for scheduler, group in frame.groupby("scheduler", sort=True):
        group = group.sort_values("rate_rps")
        for fig, entry, column in ((attainment, share, "slo_attainment"), (g, g_metric, "G")):
            fig.add_scatter(
                x=group["rate_rps"],
                y=group[column] * entry.scale,
                mode="lines+markers",
                name=str(scheduler),
                line={"color": scheduler_colour(str(scheduler))},
                cliponaxis=False,
                customdata=group["run_id"],
                hovertemplate=f"<b>{hover_safe(scheduler)}</b><br>%{{x:.4g}} req/s<br>"
                f"{hover_safe(quantity(entry))}: {hover_value(entry)}"
                f"<br>run %{{customdata}}<extra></extra>",
            )
    attainment.add_hline(
        y=target * share.scale,
        line={"dash": "dot", "color": "grey"},
        annotation_text=f"target {share.format(target)}%",
        annotation_position="bottom right",
    )
    attainment.update_yaxes(title=share.label)
    percent_axis(attainment, share)
    g.update_yaxes(title=g_metric.label)
    for fig in (attainment, g):
        fig.update_xaxes(title=SWEEP_RATE_LABEL)
    return {
        "sweep_attainment": apply_layout(attainment, "SLO attainment vs arrival rate"),
        "sweep_g": apply_layout(g, "G vs arrival rate"),
    }


# -- multi-turn sessions ---------------------------------------------------------------------------
#: The per-turn TTFT chart's title (Results page, a run with ``summary.turns``).
TURN_TTFT_TITLE = "TTFT by turn of the session"


def has_turns(summary: Any) -> bool:
    """Whether ``summary`` (a run's) holds per-turn metrics: a multi-turn run (schema 7+)."""
    return bool(getattr(summary, "turns", None))


def turn_ttft_chart(summaries: Sequence[RunSummary], names: Mapping[str, str] | None = None) -> go.Figure:
    """TTFT mean (left panel) and p99 (right panel) by turn index of each multi-turn run in
    ``summaries`` (``summary.turns``; runs without turns are left out), one line per run in its
    scheduler's colour, named by its display name (``names``: run id -> name); seconds, the
    catalog's labels (:data:`runners.metrics.catalog.TURN_FIELDS`). A turn with no completed
    request has no TTFT: a gap in its line. Hover: the turn, the value, the turn's requests
    (completed of sent) and the run id."""
    runs = [summary for summary in summaries if has_turns(summary)]
    fields = ("ttft_mean_s", "ttft_p99_s")
    entries = [turn_metric(field) for field in fields]
    fig = make_subplots(rows=1, cols=len(fields), subplot_titles=[entry.label for entry in entries])
    shown = display_names(runs, names)
    colours = run_colours([getattr(summary, "scheduler", None) for summary in runs])
    for summary, colour in zip(runs, colours):
        run_id = run_label(summary)
        turns = summary.turns or []
        for col, (field, entry) in enumerate(zip(fields, entries), start=1):
            fig.add_scatter(
                x=[turn.turn for turn in turns],
                y=[entry.display(getattr(turn, field)) for turn in turns],
                mode="lines+markers",
                name=shown[run_id],
                legendgroup=run_id,
                showlegend=col == 1,
                line={"color": colour},
                cliponaxis=False,
                customdata=[[turn.completed, turn.requests] for turn in turns],
                hovertemplate=_run_hover(
                    shown[run_id],
                    run_id,
                    "turn %{x}",
                    f"{hover_safe(quantity(entry))}: {hover_value(entry)}",
                    "%{customdata[0]} of %{customdata[1]} requests of this turn completed",
                ),
                row=1,
                col=col,
            )
            fig.update_yaxes(title=entry.label, rangemode="tozero", row=1, col=col)
    last = max((turn.turn for summary in runs for turn in summary.turns or []), default=1)
    fig.update_xaxes(title=TURN_LABEL, dtick=1, range=[0.5, last + 0.5])  # turns count from 1
    return apply_layout(fig, TURN_TTFT_TITLE)


# -- live view -------------------------------------------------------------------------------------
def live_latency_scatter(requests: pd.DataFrame, simulated: bool = False, scheduler: str | None = None) -> go.Figure:
    """TTFT, TPOT and E2E of each finished request against its finish time (seconds since the run
    started; ``simulated``: the simulator's clock, said on the axis), in the colour of the run's
    ``scheduler``; the task told by the marker (:data:`runners.views.colours.TASK_SYMBOLS`), filled
    when its SLO was met, open when missed."""
    colour = scheduler_colour(scheduler)
    shown = [metric(column) for column in ("ttft_s", "tpot_s", "e2e_s")]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[entry.label for entry in shown])
    frame = requests.dropna(subset=["finish_s"]) if len(requests) else requests
    if len(frame) > MAX_SCATTER_POINTS:
        frame = frame.iloc[-MAX_SCATTER_POINTS:]
    for task in TASKS:
        for met in (True, False):
            part = frame[(frame["task"] == task) & (frame["slo_met"].fillna(False) == met)] if len(frame) else frame
            name = f"{task}, SLO {'met' if met else 'missed'}"
            for col, entry in enumerate(shown, start=1):
                fig.add_scattergl(
                    x=part["finish_s"],
                    y=part[entry.key] * entry.scale,
                    mode="markers",
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    marker={"color": colour, "symbol": task_symbol(task, met), "size": 6, "opacity": 0.7},
                    row=1,
                    col=col,
                    hovertemplate=f"<b>{name}</b><br>finished at %{{x:.1f}} s<br>"
                    f"{hover_safe(quantity(entry))}: {hover_value(entry)}<extra></extra>",
                )
    fig.update_xaxes(title="finish time, simulated (s)" if simulated else "finish time (s)")
    return apply_layout(fig, "Per-request latency as requests finish", height=340)


def live_instance_series(timeseries: pd.DataFrame, simulated: bool = False, scheduler: str | None = None) -> go.Figure:
    """KV-cache usage (0-100%) and batch size (running requests) per instance over run time
    (``simulated``: the simulator's clock, said on the axis), in the colour of the run's
    ``scheduler`` (each further instance a lighter shade); beside the batch size, an in-engine
    scheduler's running limit (dashed) and held-back requests (dotted) for the instances that
    record them."""
    kv, running = timeseries_metric("kv_usage"), timeseries_metric("running")
    fig = make_subplots(rows=1, cols=2, subplot_titles=[kv.label, running.label])
    when = f"{RUN_TIME_LABEL.split(' (')[0]} %{{x:.1f}} s"
    if len(timeseries):
        groups = list(timeseries.groupby("instance", sort=True))
        colours = run_colours([scheduler] * len(groups))
        for (instance, group), colour in zip(groups, colours):
            group = group.sort_values("t_s")
            name = f"instance {instance}"
            for col, entry in ((1, kv), (2, running)):
                t, y = thin_series(group["t_s"], group[entry.key].astype(float) * entry.scale)
                fig.add_scatter(
                    x=t,
                    y=y,
                    mode="lines",
                    name=name,
                    legendgroup=str(instance),
                    showlegend=col == 1,
                    line={"color": colour},
                    row=1,
                    col=col,
                    hovertemplate=f"<b>{name}</b><br>{when}<br>{hover_safe(quantity(entry))}: "
                    f"{hover_value(entry)}<extra></extra>",
                )
            for column, dash in ENGINE_DECISION_LINES.items():
                if not _has_values(group, column):
                    continue
                entry = timeseries_metric(column)
                t, y = thin_series(group["t_s"], group[column].astype(float) * entry.scale)
                fig.add_scatter(
                    x=t,
                    y=y,
                    mode="lines",
                    name=f"{name}: {entry.label}",
                    legendgroup=str(instance),
                    line={"color": colour, "dash": dash},
                    row=1,
                    col=2,
                    hovertemplate=f"<b>{name}</b><br>{when}<br>{hover_safe(quantity(entry))}: "
                    f"{hover_value(entry)}<extra></extra>",
                )
    fig.update_xaxes(title=SIMULATED_TIME_LABEL if simulated else RUN_TIME_LABEL)
    percent_axis(fig, kv, row=1, col=1)
    return apply_layout(fig, "Engine state per instance", height=320)


def live_prefix_hit_rate(
    timeseries: pd.DataFrame, simulated: bool = False, scheduler: str | None = None, window_s: float = HIT_RATE_WINDOW_S
) -> go.Figure:
    """The running run's prefix-cache hit rate over run time (``simulated``: the simulator's clock,
    said on the axis), summed over instances, in % over the trailing ``window_s`` seconds, in the
    colour of its ``scheduler``; the same line as the Results page's
    (:func:`prefix_hit_rate_over_time`), drawn from the samples read so far."""
    fig = go.Figure()
    _hit_rate_line(fig, timeseries, "all instances", None, scheduler_colour(scheduler), window_s, MAX_SERIES_POINTS)
    entry = hit_rate_entry()
    fig.update_xaxes(title=SIMULATED_TIME_LABEL if simulated else RUN_TIME_LABEL)
    fig.update_yaxes(title=entry.label)
    percent_axis(fig, entry)
    return apply_layout(fig, PREFIX_HIT_RATE_TITLE, height=320)


# -- export ----------------------------------------------------------------------------------------
def charts_html(figures: dict[str, go.Figure], title: str) -> str:
    """One standalone HTML page holding every figure (plotly.js inlined once, works offline)."""
    parts = []
    for index, (key, fig) in enumerate(figures.items()):
        parts.append(
            pio.to_html(fig, full_html=False, include_plotlyjs="inline" if index == 0 else False, div_id=f"chart-{key}")
        )
    body = "\n".join(parts)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><h1>{title}</h1>\n{body}\n</body></html>"
    )


def chart_png(fig: go.Figure, width: int = 1100, height: int | None = None) -> bytes:
    """The figure as PNG bytes, rendered by kaleido (which drives a local Chromium)."""
    try:
        import kaleido  # noqa: F401
    except ImportError as exc:
        raise ExportUnavailable(
            "PNG export needs the 'kaleido' package (pip install kaleido) and Chromium; "
            "the camera icon on each chart also downloads a PNG"
        ) from exc
    try:
        return pio.to_image(fig, format="png", width=width, height=height or fig.layout.height or 400)
    except Exception as exc:  # kaleido reports a missing browser in several ways
        raise ExportUnavailable(
            f"PNG export failed ({type(exc).__name__}: {exc}); install Chromium, or use the camera icon on the chart"
        ) from exc
