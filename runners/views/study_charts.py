"""Plotly figures of a study: per-scheduler means with 95% interval error bars, latency CDFs pooled
over seeds, sweeps with interval bands, and capacity per seed.

Values come from study.json (:func:`runners.study.runner.read_study`'s :class:`StudyRecord`) or member runs
(:func:`runners.views.study_view.study_member_runs`) and are drawn in the catalog's display units
(:mod:`runners.metrics.catalog`: shares in %, TPOT in ms). Nothing here imports streamlit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from runners.metrics.catalog import metric
from runners.metrics.seed_statistics import SINGLE_SEED_NOTE
from runners.store.models import SeedSummary, StudyRecord
from runners.store.result_store import RunData
from runners.views.charts import (
    SWEEP_RATE_LABEL,
    apply_layout,
    category_axis,
    cdf_hover,
    cdf_points,
    draw_slo_lines,
    hover_safe,
    hover_value,
    percent_axis,
    point_share,
    quantity,
    slo_thresholds,
    wrap_name,
)
from runners.views.colours import rgba, scheduler_colour
from runners.views.study_view import CAPACITY, ordered_schedulers, statistics_by_rate, sweep_statistics
from runners.workload.slo import TASKS

NO_INTERVAL_HOVER = "1 seed: no interval"


def _colours(names: Sequence[str]) -> dict[str, str]:
    """Each scheduler's colour, the same in every chart (:func:`runners.views.colours.scheduler_colour`)."""
    return {name: scheduler_colour(name) for name in names}


def _rate_label(rate: Any) -> str:
    return "this study's rate" if rate is None else f"{format(float(rate), '.4g')} req/s"


def _bar_point(key: str, stats: SeedSummary) -> tuple[float | None, float | None, float | None, str]:
    """(mean, error above, error below, hover text) of one scheduler's statistics, display units."""
    entry = metric(key)
    cut_low, cut_high, cut = entry.value_interval(stats.ci_low, stats.ci_high)  # never past 0 or 100%
    mean, low, high = (entry.display(value) for value in (stats.mean, cut_low, cut_high))
    n = stats.n
    if mean is None:
        return None, None, None, "no seed has a value"
    if low is None or high is None:
        return mean, None, None, f"{entry.format(stats.mean)} {entry.unit}, n={n}: {NO_INTERVAL_HOVER}"
    return (
        mean,
        high - mean,
        mean - low,
        f"{entry.format(stats.mean)} {entry.format_interval(stats.ci_low, stats.ci_high)}"
        f" {entry.unit}, n={n} seeds (95% CI{'; * cut at the possible range' if cut else ''})",
    )


def metric_bars(record: StudyRecord, key: str) -> go.Figure:
    """Per scheduler the mean of metric ``key`` over seeds with its 95% interval as error bars,
    in display units; one group per arrival rate when the study has several. A scheduler with
    one seed has no error bar; its hover says "1 seed: no interval"."""
    entry = metric(key)
    by_rate = statistics_by_rate(record)
    several = len(by_rate) > 1
    per_rate = [(rate, statistics[key].schedulers if key in statistics else {}) for rate, statistics in by_rate]
    names = ordered_schedulers(record, {name for _, per in per_rate for name in per})
    colours = _colours(names)
    fig = go.Figure()
    for name in names:
        xs, ys, plus, minus, hover = [], [], [], [], []
        for rate, per in per_rate:
            stats = per.get(name)
            if stats is None:
                continue
            mean, up, down, text = _bar_point(key, stats)
            xs.append(_rate_label(rate) if several else wrap_name(name))
            ys.append(mean)
            plus.append(up)
            minus.append(down)
            hover.append(text)
        has_error = any(value is not None for value in plus)
        fig.add_bar(
            name=name,
            x=xs,
            y=ys,
            marker_color=colours[name],
            customdata=hover,
            hovertemplate=f"<b>{hover_safe(name)}</b><br>{hover_safe(quantity(entry))}: %{{customdata}}<extra></extra>",
            error_y={
                "type": "data",
                "array": [v if v is not None else 0 for v in plus],
                "arrayminus": [v if v is not None else 0 for v in minus],
                "visible": has_error,
                "symmetric": False,
            },
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title=entry.label)
    percent_axis(fig, entry)
    block = category_axis(fig, [_rate_label(rate) for rate, _ in per_rate] if several else names)
    if several:
        fig.update_xaxes(title="arrival rate")
        block += 20
    seeds = len(record.seeds)
    note = f" ({SINGLE_SEED_NOTE})" if seeds == 1 else f" over {seeds} seeds, 95% CI"
    return apply_layout(fig, f"{entry.label}: mean{note}", axis_block_px=block)


def pooled_cdfs(runs_by_scheduler: Mapping[str, Sequence[RunData]], column: str, log_x: bool = False) -> go.Figure:
    """CDF of per-request metric ``column`` (a request column of the catalog, e.g. ``tpot_s``),
    one line per scheduler with its requests pooled over its seeds, a panel per task, in display
    units (TPOT in ms); each task's SLO limit on ``column`` a labelled vertical line in its panel;
    ``log_x``: a logarithmic latency axis (zero values are not drawn)."""
    entry = metric(column)
    fig = make_subplots(rows=1, cols=len(TASKS), subplot_titles=list(TASKS), shared_yaxes=True)
    points = point_share(len(TASKS) * max(1, len(runs_by_scheduler)), 400)
    for name, runs in runs_by_scheduler.items():
        frames = [run.requests[["task", column]] for run in runs if len(run.requests) and column in run.requests]
        pooled = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["task", column])
        label = f"{name} ({len(runs)} seed{'s' if len(runs) != 1 else ''}, {len(pooled):,} requests)"
        for col, task in enumerate(TASKS, start=1):
            values = pd.to_numeric(pooled.loc[pooled["task"] == task, column], errors="coerce") * entry.scale
            x, y = cdf_points(values, points)
            fig.add_scatter(
                x=x,
                y=y,
                mode="lines",
                name=label,
                legendgroup=name,
                showlegend=col == 1,
                line={"color": scheduler_colour(name)},
                row=1,
                col=col,
                hovertemplate=cdf_hover(entry, task, label),
            )
    owners = {run.run_id: name for name, runs in runs_by_scheduler.items() for run in runs}
    members = [run for runs in runs_by_scheduler.values() for run in runs]
    draw_slo_lines(fig, slo_thresholds(members, column, owners), entry, TASKS, log_x, len(runs_by_scheduler))
    fig.update_xaxes(title=entry.label, type="log" if log_x else "linear")
    fig.update_yaxes(title="fraction of requests", range=[0, 1.02], row=1, col=1)
    return apply_layout(fig, f"{entry.label} CDF per task, requests pooled over seeds")


def sweep_bands(record: StudyRecord, key: str, target: float | None = None) -> go.Figure:
    """Metric ``key`` against arrival rate for a study over rates: per scheduler the mean over
    seeds as a line and its 95% interval as a band, in display units; ``target`` (stored units,
    e.g. an attainment of 0.9) as a dotted line."""
    entry = metric(key)
    frame = sweep_statistics(record, key)
    colours = _colours(frame["scheduler"].unique())
    fig = go.Figure()
    for name in ordered_schedulers(record, frame["scheduler"].unique()):
        group = frame[frame["scheduler"] == name].sort_values("rate_rps")
        rates = group["rate_rps"].tolist()
        mean = [entry.display(value) for value in group["mean"]]
        cut = [entry.value_interval(lo, hi) for lo, hi in zip(group["ci_low"], group["ci_high"])]  # within 0-100%
        low = [entry.display(lo) for lo, _, _ in cut]
        high = [entry.display(hi) for _, hi, _ in cut]
        banded = [(r, lo, hi) for r, lo, hi in zip(rates, low, high) if lo is not None and hi is not None]
        if banded:
            xs = [r for r, _, _ in banded] + [r for r, _, _ in reversed(banded)]
            ys = [hi for _, _, hi in banded] + [lo for _, lo, _ in reversed(banded)]
            fig.add_scatter(
                x=xs,
                y=ys,
                fill="toself",
                fillcolor=rgba(colours[name], 0.18),
                mode="lines",
                line={"width": 0},
                name=f"{name} 95% CI",
                legendgroup=name,
                showlegend=False,
                hoverinfo="skip",
            )
        fig.add_scatter(
            x=rates,
            y=mean,
            mode="lines+markers",
            name=name,
            legendgroup=name,
            line={"color": colours[name]},
            customdata=[
                f"n={n}" if lo is not None else f"n={n}: {NO_INTERVAL_HOVER}" for n, lo in zip(group["n"], low)
            ],
            hovertemplate=f"<b>{hover_safe(name)}</b><br>%{{x:.4g}} req/s<br>{hover_safe(quantity(entry))}: "
            f"{hover_value(entry)} (mean, %{{customdata}})<extra></extra>",
        )
    if target is not None:
        shown = entry.display(target)
        fig.add_hline(
            y=shown,
            line={"dash": "dot", "color": "grey"},
            annotation_position="bottom right",
            annotation_text=f"target {entry.format(target)}{entry.unit if entry.unit == '%' else ''}",
        )
    fig.update_xaxes(title=SWEEP_RATE_LABEL)
    fig.update_yaxes(title=entry.label)
    percent_axis(fig, entry)
    return apply_layout(fig, f"{entry.label} vs arrival rate: mean over seeds, band 95% CI")


def capacity_chart(record: StudyRecord, per_seed: pd.DataFrame, statistics: pd.DataFrame, target: float) -> go.Figure:
    """Capacity at ``target`` attainment: each seed a dot, per scheduler the mean with its 95%
    interval as an error bar (:func:`runners.views.study_view.capacity_per_seed` and
    :func:`runners.views.study_view.capacity_statistics`)."""
    colours = _colours(per_seed["scheduler"].unique() if len(per_seed) else [])
    fig = go.Figure()
    for _, row in statistics.iterrows():
        name = row["scheduler"]
        mean = row["mean"]
        if mean is None or pd.isna(mean):
            continue
        has = row["ci_low"] is not None and not pd.isna(row["ci_low"])
        fig.add_bar(
            x=[name],
            y=[mean],
            name=name,
            marker_color=rgba(colours.get(name, scheduler_colour(name)), 0.5),
            error_y={
                "type": "data",
                "array": [row["ci_high"] - mean if has else 0],
                "arrayminus": [mean - row["ci_low"] if has else 0],
                "visible": bool(has),
                "symmetric": False,
            },
            hovertemplate=f"<b>{hover_safe(name)}</b><br>{quantity(CAPACITY)}: mean {hover_value(CAPACITY)} "
            f"({hover_safe(row['mean [95% CI]'])})<extra></extra>"
            if has
            else f"<b>{hover_safe(name)}</b><br>{quantity(CAPACITY)}: {hover_value(CAPACITY)} "
            f"({NO_INTERVAL_HOVER})<extra></extra>",
        )
    seeds = per_seed.dropna(subset=["capacity_rps"]) if len(per_seed) else per_seed
    if len(seeds):
        fig.add_scatter(
            x=seeds["scheduler"],
            y=seeds["capacity_rps"].astype(float),
            mode="markers",
            name="seeds",
            marker={"color": "black", "size": 7, "symbol": "circle-open"},
            customdata=seeds["seed"],
            hovertemplate=f"<b>%{{x}}</b><br>seed %{{customdata}}: {hover_value(CAPACITY)}<extra></extra>",
        )
    fig.update_yaxes(title=CAPACITY.label)
    block = category_axis(fig, list(statistics["scheduler"]) if len(statistics) else [])
    return apply_layout(
        fig, f"Capacity at SLO attainment ≥ {target:.0%}: per seed (dots), mean and 95% CI", axis_block_px=block
    )
