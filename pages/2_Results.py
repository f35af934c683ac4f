"""Results page: saved runs and studies (filter, delete, rename, config); a study's statistics over
seeds (mean with its 95% interval per scheduler, paired change against the baseline with its
interval, coloured verdict, k of n seeds won), its charts with error bars, CDFs pooled over seeds,
sweeps with interval bands and capacity per seed; single runs compared with % change against a
baseline and every chart (one seed: no interval, said on the page); rate sweeps with capacity;
export (CSV, HTML, PNG).

Thin: tables come from runners.views.compare and runners.views.study_view, figures from runners.views.charts and
runners.views.study_charts, files from runners.store.result_store and runners.study.runner.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from pages.parts.app_navigation import use_app_navigation
from pages.parts.cached_runs import load_member, load_run_cached, summary_stamp
from runners.engines.beliefs import beliefs_note
from runners.errors import SchedlabError
from runners.imports import IMPORTERS, import_bytes
from runners.json_values import is_stored
from runners.metrics.catalog import CUT_NOTE, REQUEST_METRICS, RUN_METRICS, metric
from runners.metrics.contention import identical_decisions, identical_decisions_message
from runners.metrics.seed_statistics import RELATIVE_INTERVAL_NOTE, SINGLE_SEED_NOTE
from runners.run.knowledge import scheduler_display
from runners.store import result_store
from runners.store.models import RunSummary, StudyRecord
from runners.study.runner import (
    STUDY_FILE,
    delete_study,
    identical_decisions_note,
    placement_notes,
    read_study,
    study_error,
    study_lines,
)
from runners.views.charts import (
    CHART_VIEWS,
    COMPARISON_CHARTS,
    LOG_X_CHARTS,
    PREFIX_HIT_RATE_CHART,
    PREFIX_HIT_RATE_VIEWS,
    ExportUnavailable,
    chart_png,
    chart_title,
    charts_html,
    comparison_chart,
    has_turns,
    prefix_hit_rate_over_time,
    sweep_charts,
    turn_ttft_chart,
)
from runners.views.compare import (
    capacities,
    comparison_html,
    comparison_table,
    comparison_view,
    csv_with_provenance,
    definition_details,
    fidelity_note,
    html_with_provenance,
    imported_label,
    partial_runs_note,
    profile_note,
    run_display_names,
    sweep_frame,
    tokenization_note,
    workload_differences,
)
from runners.views.prefix_view import HIT_RATE_CAPTION, has_prefix_counters, no_counters_note, runs_without_counters
from runners.views.session_view import SESSIONS_NOTE, session_column_help, session_runs, session_table
from runners.views.study_charts import capacity_chart, metric_bars, pooled_cdfs, sweep_bands
from runners.views.study_view import (
    HIDDEN_COLUMNS,
    StudyEntry,
    capacity_per_seed,
    capacity_statistics,
    capacity_table,
    list_studies,
    member_records,
    member_summaries,
    nothing_to_compare,
    partial_members,
    partial_members_note,
    planned_setting,
    same_as_baseline_lines,
    statistics_html,
    study_counts,
    study_frames,
    study_member_runs,
    study_setting,
    verdict_colour,
)

use_app_navigation()  # a first visit straight to this page: app.py's sidebar, not the folder's
st.set_page_config(page_title="schedlab · Results", layout="wide")
ROOT = result_store.DEFAULT_RESULTS_DIR


@st.cache_resource(show_spinner=False, max_entries=128)
def chart_cached(name: str, keys: tuple[tuple[str, float], ...], log_x: bool = False):
    runs = [load_run_cached(folder, stamp) for folder, stamp in keys]
    return comparison_chart(name, [run.summary for run in runs], runs, log_x=log_x)


@st.cache_resource(show_spinner=False, max_entries=32)
def prefix_chart_cached(keys: tuple[tuple[str, float], ...]):
    """The prefix-cache hit rate over time of the runs at ``keys`` (those with the counters)."""
    return prefix_hit_rate_over_time([load_run_cached(folder, stamp) for folder, stamp in keys])


@st.cache_data(show_spinner="Writing the run's requests…", max_entries=8)
def requests_file_cached(folder: str, stamp: float, kind: str) -> bytes:
    """The requests table of the run in ``folder`` (``stamp``: its summary_stamp) as a file:
    ``csv`` or ``parquet`` bytes, made once per version of the run."""
    requests = load_run_cached(folder, stamp).requests
    return requests.to_csv(index=False).encode() if kind == "csv" else requests.to_parquet(index=False)


def download(where: Any, label: str, data: bytes, file_name: str, mime: str, **kwargs: Any) -> None:
    """Every download button of the page (``where``: ``st`` or a column). It leaves the page as it is (``on_click="ignore"``):
    issue 27 defect 10, a download click reran the page (Streamlit's default), and a file Streamlit
    keeps only while the latest run shows its button was dropped at the end of any session's run
    (the Launch page's Jobs panel runs every second) before the browser asked for it."""
    where.download_button(label, data, file_name, mime, on_click="ignore", **kwargs)


def study_stamp(study_id: str) -> float:
    """Changes whenever the study's study.json is rewritten (after each member run)."""
    try:
        return (ROOT / study_id / STUDY_FILE).stat().st_mtime_ns / 1e9
    except OSError:
        return 0.0


def _study(root: str, study_id: str) -> StudyRecord:
    return read_study(Path(root) / study_id)


@st.cache_data(show_spinner="Reading the member runs' summaries…", max_entries=32)
def study_summaries_cached(root: str, study_id: str, stamp: float) -> tuple[dict[str, RunSummary], list[str]]:
    """run id -> summary of the study's done members (summaries only), and the unreadable ones."""
    problems: list[str] = []
    return member_summaries(root, _study(root, study_id), problems), problems


@st.cache_data(show_spinner="Checking whether the schedulers made identical decisions…", max_entries=32)
def identical_note_cached(root: str, study_id: str, stamp: float) -> str | None:
    return identical_decisions_note(root, _study(root, study_id))


@st.cache_data(show_spinner=False, max_entries=64)
def identical_runs_cached(keys: tuple[tuple[str, float], ...]) -> str | None:
    """The identical-decisions sentence for compared single runs (None when they differ)."""
    compared = [load_run_cached(folder, stamp) for folder, stamp in keys]
    same = identical_decisions([run.requests for run in compared])
    return identical_decisions_message([run.summary for run in compared], same)


@st.cache_resource(show_spinner="Reading the member runs' requests…", max_entries=32)
def pooled_cdf_cached(
    root: str,
    study_id: str,
    stamp: float,
    rate: float | None,
    column: str,
    log_x: bool = False,
):
    """(figure, unreadable members) of the CDF of ``column`` pooled over seeds, per scheduler."""
    problems: list[str] = []
    members = study_member_runs(
        root,
        _study(root, study_id),
        rate=rate,
        problems=problems,
        load=load_member,
    )
    return pooled_cdfs(members, column, log_x), problems


@st.cache_resource(show_spinner=False, max_entries=64)
def metric_bars_cached(root: str, study_id: str, stamp: float, key: str, _record: StudyRecord):
    """Bars of metric ``key`` over seeds (:func:`metric_bars`), made once per version of the
    study's study.json (``stamp``), not on every rerun of the page (issue 28)."""
    return metric_bars(_record, key)


@st.cache_data(show_spinner=False, max_entries=32)
def study_tables_cached(
    root: str, study_id: str, stamp: float, _record: StudyRecord, _summaries: dict[str, RunSummary]
) -> tuple[str | None, list[tuple[Any, str]], bytes]:
    """(note on partial members, [(rate, statistics HTML)], statistics CSV) of the study, made once
    per version of its study.json (``stamp``; the members' summaries are read per version too)."""
    partial = partial_members(_record, _summaries)
    frames = study_frames(_record, partial)
    csv = pd.concat([table.assign(rate_rps=rate) for rate, table in frames]).drop(columns="judged")
    tables = [(rate, statistics_html(table)) for rate, table in frames]
    return partial_members_note(_record, partial), tables, csv.to_csv(index=False).encode()


def styled_verdicts(table: pd.DataFrame):
    """The table without its helper columns, verdicts coloured (better green, worse red, no
    difference grey; never for the baseline or a metric that describes the setting)."""
    judged = list(table["judged"]) if "judged" in table else [False] * len(table)
    shown = table.drop(columns=[column for column in HIDDEN_COLUMNS if column in table])
    return shown.style.apply(
        lambda column: [verdict_colour(value, flag) for value, flag in zip(column, judged)], subset=["verdict"]
    )


st.title("Results")


def import_section() -> None:
    """Upload a vLLM bench serve, GuideLLM or AIPerf result file and import it as run(s)."""
    with st.expander("Import results from vLLM bench serve, GuideLLM or AIPerf"):
        st.caption(
            "Each run in the file becomes a run here, labelled 'imported from <tool> <version>'; its metrics "
            "are recomputed from the file's per-request times where it has them. The file is kept, "
            "unchanged, in the run folder. Readers: "
            + "; ".join(f"**{name}**: {entry.description}" for name, entry in IMPORTERS.items())
        )
        upload = st.file_uploader("Result file", type=["json", "jsonl"], key="import_file")
        columns: Sequence[DeltaGenerator] = st.columns(3)
        tool = columns[0].selectbox("Format", ["detect", *IMPORTERS], key="import_tool")
        version = columns[1].text_input("Tool version (when the file lacks it)", key="import_version")
        name = columns[2].text_input("Run id (optional)", key="import_name")
        if st.button("Import", key="import_button", disabled=upload is None) and upload is not None:
            try:
                folders = import_bytes(
                    upload.name,
                    upload.getvalue(),
                    ROOT,
                    name=name.strip() or None,
                    tool=None if tool == "detect" else tool,
                    tool_version=version.strip() or None,
                )
                st.session_state["import_done"] = [folder.name for folder in folders]
                st.rerun()
            except SchedlabError as exc:
                st.error(f"Nothing imported: {exc}")
        done = st.session_state.get("import_done")
        if done:
            st.success(f"Imported {len(done)} run(s): {', '.join(done)}")


import_section()
try:
    runs = result_store.list_runs(ROOT)
    studies = list_studies(ROOT)
except SchedlabError as exc:
    st.error(str(exc))
    st.stop()
if not runs and not studies:
    st.info("No saved runs yet: launch one on the Launch page, import one above, or see the Demo page.")
    st.stop()
G_LABEL = metric("G").label
by_id = {str(run.run_id): run for run in runs}  # run_id is the folder's name, never a value read from a file
UNUSABLE = (result_store.DAMAGED, result_store.INCOMPLETE)
studies_by_id = {study.study_id: study for study in studies}
member_of = {
    str(run.run_id): study.study_id
    for study in studies
    if not study.problem
    for run in member_records(study, status=None)
}

# -- list and filters --------------------------------------------------------------------------
frame = pd.DataFrame(
    [
        {
            "run": run.run_id,
            "status": run.status,
            "engine": run.engine,
            "scheduler": scheduler_display(run),
            "workload": run.workload,
            "requests": run.rows,  # request rows saved: so far, for a running or interrupted run
            "rate (req/s)": run.arrival_rate_rps,
            "SLO attainment": run.slo_attainment,
            G_LABEL: run.G,
            "started": run.started_at,
            "sweep": run.sweep_id,
            "study": member_of.get(str(run.run_id)),
            "source": imported_label(run),
            "problem": run.problem,
        }
        for run in runs
    ],
    columns=[
        "run",
        "status",
        "engine",
        "scheduler",
        "workload",
        "requests",
        "rate (req/s)",
        "SLO attainment",
        G_LABEL,
        "started",
        "sweep",
        "study",
        "source",
        "problem",
    ],
)
with st.expander("Filter", expanded=False):
    columns: Sequence[DeltaGenerator] = st.columns(5)
    engines = columns[0].multiselect("Engine", sorted(frame["engine"].dropna().unique()), key="filter_engine")
    schedulers = columns[1].multiselect(
        "Scheduler", sorted(frame["scheduler"].dropna().unique()), key="filter_scheduler"
    )
    workload_text = columns[2].text_input("Workload contains", key="filter_workload")
    dates = sorted(frame["started"].dropna().str[:10].unique())
    day = columns[3].selectbox("Started on", ["any day", *dates], key="filter_day")
    in_study = columns[4].selectbox("Study", ["any", "not in a study", *studies_by_id], key="filter_study")
shown = frame
if engines:
    shown = shown[shown["engine"].isin(engines)]
if schedulers:
    shown = shown[shown["scheduler"].isin(schedulers)]
if workload_text:
    shown = shown[shown["workload"].fillna("").str.contains(workload_text, case=False, regex=False)]
if day != "any day":
    shown = shown[shown["started"].fillna("").str.startswith(day)]
if in_study != "any":
    shown = shown[shown["study"].isna()] if in_study == "not in a study" else shown[shown["study"] == in_study]
listed = shown if shown["study"].notna().any() else shown.drop(columns="study")
listed = listed if shown["source"].notna().any() else listed.drop(columns="source")  # imported runs: their tool
st.dataframe(
    listed if shown["problem"].notna().any() else listed.drop(columns="problem"),
    hide_index=True,
    column_config={
        "SLO attainment": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent"),
        "rate (req/s)": st.column_config.NumberColumn(format="%.4g"),
        G_LABEL: st.column_config.NumberColumn(format="%.4g"),
    },
)
st.caption(f"{len(shown)} of {len(frame)} runs shown.")
broken = [run for run in runs if run.status in UNUSABLE]
if broken:
    st.warning(
        f"{len(broken)} run folder(s) cannot be read; delete them under 'Manage a run' or repair their files: "
        + "; ".join(f"{run.run_id} ({run.status}: {run.problem})" for run in broken[:5])
        + (" …" if len(broken) > 5 else "")
    )

if studies:
    st.subheader("Studies")
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "study": study.study_id,
                    "status": study.status,
                    "schedulers": ", ".join(map(str, study.schedulers)),
                    "baseline": study.baseline if is_stored(study, "baseline") else None,  # none: damaged
                    "seeds": len(study.seeds),
                    "rates (req/s)": ", ".join(format(rate, ".4g") for rate in study.rates) or None,
                    "runs done": (
                        f"{study_counts(study)['done']} of {study_counts(study)['runs']}" if not study.problem else None
                    ),
                    "created": study.created_at,
                    "problem": study.problem,
                }
                for study in studies
            ]
        ),
        hide_index=True,
        key="studies_table",
    )
    damaged_studies = [study for study in studies if study.problem]
    if damaged_studies:
        st.warning(
            f"{len(damaged_studies)} study file(s) cannot be read: "
            + "; ".join(f"{study.study_id}: {study.problem}" for study in damaged_studies[:3])
        )

with st.expander("Manage a run: config, rename, delete"):
    target = st.selectbox("Run", list(shown["run"]), key="manage_run")
    if target and target in by_id:
        entry = by_id[target]
        if entry.status in UNUSABLE:
            st.error(f"{target} is {entry.status}: {entry.problem}")
        else:
            try:
                # the cached reader: this expander shows on every rerun, and reading the run's
                # tables again each time cost every rerun of the page (issue 28)
                managed = load_run_cached(str(ROOT / target), summary_stamp(ROOT / target)).config
                st.json(managed.get("config") or managed.get("imported") or {}, expanded=False)
            except SchedlabError as exc:
                st.error(str(exc))
        columns = st.columns([2, 1, 1])
        new_name = columns[0].text_input("New name", value=target, key="rename_to")
        if columns[1].button("Rename", key="rename", disabled=entry.status in UNUSABLE):
            try:
                result_store.rename_run(ROOT, target, new_name)
                st.success(f"Renamed {target} to {new_name}")
                st.rerun()
            except SchedlabError as exc:
                st.error(str(exc))
        confirm = columns[2].checkbox("Really delete", key="confirm_delete")
        if columns[2].button("Delete", key="delete", disabled=not confirm):
            try:
                result_store.delete_run(ROOT, target)
                st.success(f"Deleted {target}")
                st.rerun()
            except SchedlabError as exc:
                st.error(str(exc))

if studies:
    with st.expander("Manage a study: delete it with its member runs"):
        doomed = st.selectbox("Study", list(studies_by_id), key="manage_study")
        if doomed:
            members = [
                str(run.run_id)
                for run in member_records(studies_by_id[doomed], status=None)
                if os.path.lexists(ROOT / str(run.run_id))
            ]
            sure = st.checkbox(
                f"Really delete study {doomed} and its {len(members)} member run(s)", key="confirm_delete_study"
            )
            if st.button("Delete study", key="delete_study", disabled=not sure):
                try:
                    deleted = delete_study(ROOT, doomed)
                    st.success(f"Deleted study {doomed} ({len(deleted) - 1} member runs)")
                    st.session_state.pop("confirm_delete_study", None)
                    st.rerun()
                except SchedlabError as exc:
                    st.error(str(exc))


# -- a study ------------------------------------------------------------------------------------
def open_as_runs(run_ids: list[str]) -> None:
    """Button callback: compare these member runs as single runs."""
    st.session_state["compare_mode"] = "Saved runs"
    st.session_state.pop("compare_runs", None)
    st.query_params["runs"] = ",".join(run_ids)  # the runs multiselect starts from the linked runs
    st.query_params.pop("study", None)


def show_study(record: StudyEntry) -> None:
    """A study's setting, counts, statistics tables, charts, sweeps and capacity."""
    study_id = record.study_id
    if record.problem:
        st.error(f"Study {study_id} cannot be shown: {record.problem}")
        return
    stamp = study_stamp(study_id)
    counts = study_counts(record)
    summaries, problems = study_summaries_cached(str(ROOT), study_id, stamp)
    _study_header(record, counts, summaries, problems, stamp)
    empty = nothing_to_compare(record)
    if empty is not None:  # no verdicts on 0 of 0 seeds, no empty charts
        st.info(empty)
        return
    _study_tables(record, counts["rates"], summaries, stamp)
    _study_charts(record, counts, stamp)
    if counts["rates"]:
        _study_sweep(record, summaries)
    _study_members(record, counts["seeds"])


def _study_header(
    record: StudyRecord, counts: dict, summaries: dict[str, RunSummary], problems: list[str], stamp: float
) -> None:
    """The study's setting line, its counts, and every warning about what it can show."""
    study_id = record.study_id
    setting = study_setting(summaries) or planned_setting(record)  # before any member finished: as planned
    seeds, rates = counts["seeds"], counts["rates"]
    rate_text = (
        ", ".join(format(rate, ".4g") for rate in rates)
        if rates
        else next(
            (format(run.rate, ".4g") for run in member_records(record, status=None) if run.rate is not None),
            "?",
        )
    )
    st.subheader(f"Study {study_id}")
    st.markdown(
        " · ".join(
            [
                f"**engine** {setting.get('engine', '?')}",
                f"**workload** {setting.get('workload', '?')}",
                f"**requests per run** {setting.get('requests_total', '?')}",
                f"**arrival rate** {rate_text} req/s",
                f"**schedulers** {', '.join(counts['schedulers'])} (baseline {record.baseline})",
                f"**seeds** {', '.join(map(str, seeds))}",
                f"**status** {record.status}",
            ]
        )
    )
    if record.status == "interrupted":  # its process is gone: how to finish it
        st.warning(f"This study was interrupted: {study_error(record)}")
    cells = st.columns(4)
    cells[0].metric("runs done", f"{counts['done']} of {counts['runs']}")
    cells[1].metric("runs failed", counts["failed"])
    cells[2].metric("seeds", len(seeds))
    cells[3].metric("seeds dropped", len(counts["dropped_seeds"]))
    if counts["dropped_seeds"]:
        st.warning(
            f"seed(s) {', '.join(map(str, counts['dropped_seeds']))}: a member run did not finish, so the "
            "comparisons leave that seed out (pairwise); " + "; ".join(study_lines(record)[2:5])
        )
    if problems:
        st.error(
            f"{len(problems)} member run(s) cannot be read (statistics below are study.json's, charts leave "
            "them out): " + "; ".join(problems[:3]) + (" …" if len(problems) > 3 else "")
        )
    note = identical_note_cached(str(ROOT), study_id, stamp)
    if note:
        st.warning(note)
    else:  # some scheduler may still have got the baseline's every result
        for line in same_as_baseline_lines(record):
            st.warning(line)
    for line in placement_notes(record):  # a cluster's members: different hardware, caches not emptied
        st.warning(line)
    if len(seeds) == 1:
        st.info(SINGLE_SEED_NOTE)


def _study_tables(record: StudyRecord, rates: list, summaries: dict[str, RunSummary], stamp: float) -> None:
    """The statistics tables (one per rate, each grouped by metric, headline first) with the
    partial members named beside them, and their CSV."""
    study_id = record.study_id
    note, tables, csv = study_tables_cached(str(ROOT), study_id, stamp, record, summaries)
    if note:  # issue 27: a partial member never passes for a whole one
        st.warning(note, icon="⚠️")
    for index, (rate, table_html) in enumerate(tables):
        if rates:
            st.markdown(f"**At {format(rate, '.4g')} req/s**")
        # HTML tables: every row in the page's flow (no inner scroll), verdict and k of n beside the
        # metric's name, cells that wrap on a narrow page (issue 27 defect 2)
        with st.container(key=f"study_table_{index}"):
            st.markdown(table_html, unsafe_allow_html=True)
    st.caption(
        "verdict: better or worse when the 95% interval of the change excludes 0, else no difference. "
        "seeds better: k of n seeds where the scheduler beat the baseline. (n k) beside a mean: only k "
        "seeds have a value. "
        "mean [95% CI]: over seeds, Student t. change: scheduler - baseline per seed (paired), mean and 95% "
        "CI; a change of percentages is in percentage points. relative change: mean / baseline mean - 1, "
        f"{RELATIVE_INTERVAL_NOTE}. "
        f"{CUT_NOTE}."
    )
    download(
        st,
        "Download statistics (CSV)",
        csv,
        f"{study_id}.csv",
        "text/csv",
        key="study_csv",
    )


def _study_charts(record: StudyRecord, counts: dict, stamp: float) -> None:
    """Bars of the chosen metrics over seeds, and the pooled CDFs."""
    study_id, rates = record.study_id, counts["rates"]
    st.markdown("#### Charts")
    judged = [entry for entry in RUN_METRICS if not entry.real_engines_only]
    labels = {entry.label: entry.key for entry in judged}
    picked = st.multiselect(
        "Metrics (mean over seeds, 95% CI error bars)",
        list(labels),
        default=[metric("slo_attainment").label, metric("G").label],
        key="study_bar_metrics",
    )
    left, right = st.columns(2)
    for index, label in enumerate(picked):
        with left if index % 2 == 0 else right:
            figure = metric_bars_cached(str(ROOT), study_id, stamp, labels[label], record)
            st.plotly_chart(figure, key=f"study-bars-{labels[label]}")

    cdf_labels = {entry.label: entry.key for entry in REQUEST_METRICS}
    columns = st.columns([2, 1, 2])
    column = cdf_labels[columns[0].selectbox("CDF of", list(cdf_labels), key="study_cdf_metric")]
    rate = columns[1].selectbox("at rate (req/s)", rates, key="study_cdf_rate") if rates else None
    # a large study reads its members' request tables only when asked
    if columns[2].toggle("CDFs pooled over seeds", value=counts["done"] <= 60, key="study_cdfs"):
        log_x = columns[2].toggle(
            "Log latency axis",
            key="study_cdf_log_x",
            help="A logarithmic x axis, for latencies that span decades (zeros not drawn).",
        )
        figure, unread = pooled_cdf_cached(str(ROOT), study_id, stamp, rate, column, log_x)
        st.plotly_chart(figure, key="study-cdf")
        st.caption(
            "Each scheduler's requests pooled over its seeds"
            + (f"; left out: {'; '.join(unread[:3])}" if unread else ".")
        )


def _study_sweep(record: StudyRecord, summaries: dict[str, RunSummary]) -> None:
    """A study over several rates: attainment and G against the rate, and capacity per seed."""
    st.markdown("#### Sweep over arrival rates")
    target = st.slider("Capacity at SLO attainment ≥", 0.5, 1.0, 0.9, 0.01, key="study_target")
    left, right = st.columns(2)
    with left:
        st.plotly_chart(sweep_bands(record, "slo_attainment", target), key="study-sweep-attainment")
    with right:
        st.plotly_chart(sweep_bands(record, "G"), key="study-sweep-g")
    per_seed = capacity_per_seed(record, summaries, target)
    statistics = capacity_statistics(record, per_seed)
    st.markdown(f"**Capacity at SLO attainment ≥ {target:.0%}, per seed (req/s)**")
    st.dataframe(capacity_table(record, per_seed), hide_index=True, key="study_capacity_seeds")
    st.markdown("**Capacity over seeds**")
    st.dataframe(styled_verdicts(statistics), hide_index=True, key="study_capacity")
    st.caption(
        "Capacity: the highest arrival rate at which SLO attainment stays at or above the target, "
        "interpolated between the study's rates, per seed; '≥' means every rate met it (a lower bound). "
        "A seed below the target even at the lowest rate has no capacity and is left out of the mean "
        "(and of the pair)."
    )
    st.plotly_chart(capacity_chart(record, per_seed, statistics, target), key="study-capacity-chart")


def _study_members(record: StudyRecord, seeds: list) -> None:
    """The member runs, and opening one seed's runs as single runs."""
    with st.expander("Member runs"):
        members = member_records(record, status=None)
        st.dataframe(
            pd.DataFrame(
                [
                    {key: getattr(run, key) for key in ("run_id", "scheduler", "seed", "rate", "status", "error")}
                    for run in members
                ]
            ),
            hide_index=True,
            key="study_members",
        )
        seed = st.selectbox("Open one seed's runs as single runs", seeds, key="study_open_seed")
        chosen_ids = [
            str(run.run_id) for run in members if run.seed == seed and run.status == "done" and run.run_id in available
        ]
        st.button(
            "Compare them as runs", key="study_open", on_click=open_as_runs, args=(chosen_ids,), disabled=not chosen_ids
        )


# -- multi-turn sessions -------------------------------------------------------------------------
def sessions_section(summaries: Sequence[RunSummary], names: dict[str, str]) -> None:
    """The compared runs' sessions (issue 31 item 7): per run, its sessions and how many had every
    turn completed and within SLO; TTFT mean and p99 by turn, one line per run. Nothing when no
    compared run is multi-turn; the runs that are not are named."""
    multi_turn = session_runs(summaries)
    if not multi_turn:
        return
    st.subheader("Multi-turn sessions")
    st.markdown("**Sessions per run: completed, and within SLO (every turn on time)**")
    st.dataframe(
        session_table(multi_turn, names),
        hide_index=True,
        key="sessions_table",
        column_config={label: st.column_config.Column(help=text) for label, text in session_column_help().items()},
    )
    others = [names.get(str(summary.run_id), str(summary.run_id)) for summary in summaries if not has_turns(summary)]
    st.caption(SESSIONS_NOTE + (f" Not multi-turn, so not shown here: {', '.join(others)}." if others else ""))
    st.plotly_chart(turn_ttft_chart(multi_turn, names), key="chart-turn-ttft")
    st.caption(
        "Time to first token (s) of each turn index, mean and p99 over the turns of that index that completed; "
        "later turns carry longer prompts (the conversation so far), and fewer sessions reach them."
    )


# -- compare -----------------------------------------------------------------------------------
st.header("Compare")
available = [run for run in shown["run"] if by_id[run].status not in UNUSABLE]
MODES = ("A study", "Saved runs")
mode = "Saved runs"
if studies:
    linked_study = st.query_params.get("study")
    if "compare_mode" not in st.session_state:
        st.session_state["compare_mode"] = MODES[1] if st.query_params.get("runs") and not linked_study else MODES[0]
    mode = st.radio(
        "Compare",
        MODES,
        horizontal=True,
        key="compare_mode",
        help="A study: schedulers over seeds, with intervals and verdicts. Saved runs: any runs, one "
        "seed each (no interval).",
    )
if mode == "A study":
    ids = list(studies_by_id)
    linked_study = st.query_params.get("study")
    picked_study = st.selectbox("Study", ids, index=ids.index(linked_study) if linked_study in ids else 0, key="study")
    st.query_params["study"] = picked_study
    show_study(studies_by_id[picked_study])
    chosen: list[str] = []
else:
    st.query_params.pop("study", None)
    linked = [run for run in st.query_params.get("runs", "").split(",") if run in available]
    default = linked or [run for run in available if by_id[run].status == "done"][:2]
    chosen = st.multiselect("Runs to compare", available, default=default, key="compare_runs")
keys: tuple[tuple[str, float], ...] = ()
loaded: list[result_store.RunData] = []
for run_id in chosen:  # a run whose files cannot be read is named, and the others compared
    key = (str(ROOT / run_id), summary_stamp(ROOT / run_id))
    try:
        loaded.append(load_run_cached(*key))
        keys += (key,)
    except SchedlabError as exc:
        st.error(f"{run_id} cannot be compared: {exc}")
if chosen:
    st.query_params["runs"] = ",".join(chosen)  # the address bar now links to this comparison
if loaded:
    compared = [run.run_id for run in loaded]
    names = run_display_names(loaded)  # what a person reads; the run id stays on hover
    differences = workload_differences(loaded, names)
    if differences:  # issue 15: results of different workloads are not comparable as they stand
        st.warning(
            "These runs ran different workloads, so their differences are not the schedulers' alone: "
            + "; ".join(differences)
            + ".",
            icon="⚠️",
        )
    linked_baseline = st.query_params.get("baseline")
    baseline = st.selectbox(
        "Baseline (% change is against this run)",
        compared,
        key="baseline",
        index=compared.index(linked_baseline) if linked_baseline in compared else 0,
        format_func=lambda run_id: f"{names.get(run_id, run_id)}  ({run_id})",
    )
    st.query_params["baseline"] = baseline
    summaries = [run.summary for run in loaded]
    partial = partial_runs_note(summaries)
    if partial:  # issue 27: a partial run never passes for a whole one
        st.warning(partial, icon="⚠️")
    ordered = sorted(loaded, key=lambda run: run.run_id != baseline)  # the others are named against the baseline
    believed = beliefs_note([(names.get(run.run_id, run.run_id), run.folder) for run in ordered])
    if believed:  # issue 48: policies that saw different engines are not compared like for like
        st.warning(believed, icon="⚠️")
    table = comparison_table(summaries, baseline)  # full precision: the CSV
    texts, verdicts = comparison_view(loaded, baseline, names)
    # one HTML table: every row (no inner scroll), cells wrap on a narrow page, run ids on hover
    with st.container(key="comparison_table"):
        st.markdown(
            comparison_html(texts, verdicts, [baseline] + [run_id for run_id in compared if run_id != baseline]),
            unsafe_allow_html=True,
        )
    st.caption(
        "Each cell: the run's value and, in brackets, its change against the baseline as the shown values "
        "read (= when they read alike; shares in percentage points); green better, red worse by the "
        "metric's direction. Hover a column's name for its run id."
    )
    for run in loaded:  # issue 12 section 1: approximate token counts are labelled where they are shown
        note = tokenization_note(run.config)
        if note:
            st.warning(f"{names[run.run_id]}, run {run.run_id}: {note}")
    # issue 13 section 3: how far a simulated run can be trusted, once per profile and rate
    fidelity: dict[str, list[str]] = {}
    for run in loaded:
        note = fidelity_note(run.config)
        if note:
            fidelity.setdefault(note, []).append(run.run_id)
    for note, run_ids in fidelity.items():
        st.caption(f"Fidelity ({', '.join(run_ids[:4])}{' …' if len(run_ids) > 4 else ''}): {note}.")
    profiles: dict[str, list[str]] = {}  # issue 48: each profile's fit error and quality gate, once
    for run in loaded:
        note = profile_note(run.config)
        if note:
            profiles.setdefault(note, []).append(run.run_id)
    for note, run_ids in profiles.items():
        shown = f"Engine profile ({', '.join(run_ids[:4])}{' …' if len(run_ids) > 4 else ''}): {note}."
        if "NOISY" in note:
            st.warning(shown, icon="⚠️")
        else:
            st.caption(shown)
    details = definition_details(summaries)
    if details:
        st.markdown(
            "**Imported runs.** The 'definition' column marks every metric whose value is not schedlab's "
            "own recomputation from the file's request times, or whose definition differs from the tool's:"
        )
        st.markdown("\n".join(f"- {line}" for line in details))
    st.info(
        f"Each run is one seed. {SINGLE_SEED_NOTE}. A study (several seeds per scheduler, Launch page 'Seeds' "
        "or `--seeds`) gives intervals and verdicts."
    )
    same = identical_runs_cached(keys) if len(keys) > 1 else None
    if same:
        st.warning(same)
    download(
        st,
        "Download table (CSV)",
        csv_with_provenance(table, loaded, names).encode(),
        "comparison.csv",
        "text/csv",
        key="csv",
        help="Full-precision values; '#' lines first name each run with its "
        "seed, versions and config (pandas: read_csv(..., comment='#')).",
    )

    captions = {
        "slo_attainment": "Share of requests meeting their task's SLO (failed requests count as misses).",
        "g": "G: SLO-meeting requests divided by the summed end-to-end latency, from arrival.",
        "ttft_cdf": "Time to first token, from arrival (queueing included).",
        "tpot_cdf": "Time per output token after the first.",
        "e2e_cdf": "End-to-end latency from arrival to the last token.",
        "ttft_vs_tpot": "Each point a request; inside a task's dashed region its TTFT and TPOT limits hold (a task "
        "limited by E2E alone has no region here: its legend entry says so).",
        "kv_usage": "KV-cache memory used over time: the sawtooth of batch-at-a-time scheduling.",
        "batch_size": "Requests the engine is running at each moment; with an in-engine scheduler (engine-*) also "
        "its running limit (dashed) and the requests it held back (dotted).",
        "throughput": "Output tokens per second (rolling 2 s mean).",
    }
    views = list(CHART_VIEWS)
    linked_view = st.query_params.get("view")
    view = (
        st.segmented_control(
            "Charts", views, default=linked_view if linked_view in views else views[0], key="chart_view"
        )
        or views[0]
    )
    st.query_params["view"] = view
    log_x = any(name in LOG_X_CHARTS for name in CHART_VIEWS[view]) and st.toggle(
        "Log latency axis (CDFs)",
        key="cdf_log_x",
        help="A logarithmic x axis, for latencies that span decades (zeros not drawn).",
    )
    # the prefix-cache hit rate over time: beside the over-time charts when some run has its counters
    prefix_runs = any(has_prefix_counters(run.timeseries) for run in loaded)
    shown_charts = CHART_VIEWS[view] + (
        (PREFIX_HIT_RATE_CHART,) if prefix_runs and view in PREFIX_HIT_RATE_VIEWS else ()
    )
    captions[PREFIX_HIT_RATE_CHART] = " ".join(
        part
        for part in (HIT_RATE_CAPTION, no_counters_note([names[run.run_id] for run in runs_without_counters(loaded)]))
        if part
    )
    left, right = st.columns(2) if len(shown_charts) > 1 else (st.container(), None)  # one chart: full width
    for index, name in enumerate(shown_charts):
        chart_column = right if index % 2 and right is not None else left
        with chart_column:
            figure = (
                prefix_chart_cached(keys)
                if name == PREFIX_HIT_RATE_CHART
                else chart_cached(name, keys, log_x and name in LOG_X_CHARTS)
            )
            st.plotly_chart(figure, key=f"chart-{name}")
            st.caption(captions.get(name, ""))

    sessions_section(summaries, names)

    st.subheader("Export")
    if st.session_state.get("export_keys") != keys:  # exports belong to the runs they were made from
        st.session_state.pop("export_html", None)
        st.session_state.pop("export_png", None)
        st.session_state["export_keys"] = keys
    columns = st.columns(2)
    with columns[0]:
        if st.button("Prepare HTML of all charts", key="make_html"):
            figures = {name: chart_cached(name, keys) for name in COMPARISON_CHARTS}
            if session_runs(summaries):  # multi-turn runs: their TTFT by turn too
                figures["turn-ttft"] = turn_ttft_chart(session_runs(summaries), names)
            if prefix_runs:  # runs with prefix-cache counters: their hit rate over time too
                figures[PREFIX_HIT_RATE_CHART] = prefix_chart_cached(keys)
            st.session_state["export_html"] = html_with_provenance(
                charts_html(figures, "schedlab comparison: " + ", ".join(names[run_id] for run_id in compared)),
                loaded,
                names,
            )
        if st.session_state.get("export_html"):
            download(
                st,
                "Download charts (HTML)",
                st.session_state["export_html"].encode(),
                "comparison.html",
                "text/html",
                key="html",
            )
    with columns[1]:
        which = st.selectbox("Chart as PNG", list(COMPARISON_CHARTS), key="png_chart", format_func=chart_title)
        if st.button("Render PNG", key="make_png"):
            try:
                st.session_state["export_png"] = (which, chart_png(chart_cached(which, keys)))
            except ExportUnavailable as exc:
                st.warning(str(exc))
        if st.session_state.get("export_png"):
            name, data = st.session_state["export_png"]
            download(st, f"Download '{chart_title(name)}' (PNG)", data, f"{name}.png", "image/png", key="png")
    st.markdown("**One run's data**")
    columns = st.columns([2, 1, 1, 1, 1])
    picked_run = columns[0].selectbox(
        "Run",
        compared,
        key="export_run",
        label_visibility="collapsed",
        format_func=lambda run_id: f"{names.get(run_id, run_id)}  ({run_id})",
    )
    picked = next(run for run in loaded if run.run_id == picked_run)
    # the requests are bytes made once per run version (cached), a file the page keeps while it shows
    # the button (see download: a callable's file was dropped before the click asked for it)
    picked_key = keys[compared.index(picked_run)]
    download(
        columns[1],
        "Requests (CSV)",
        requests_file_cached(*picked_key, "csv"),
        f"{picked_run}-requests.csv",
        "text/csv",
        key="export_requests_csv",
        help="requests.parquet as CSV: one row per request, seconds",
    )
    download(
        columns[2],
        "Requests (Parquet)",
        requests_file_cached(*picked_key, "parquet"),
        f"{picked_run}-requests.parquet",
        "application/octet-stream",
        key="export_requests_parquet",
    )
    json_files = (
        ("summary", result_store.entry_fields(picked.summary), "the run's summary.json"),
        ("config", picked.config, "the run's config.json: config, resolved settings, versions"),
    )
    for column, (name, record, tooltip) in zip(columns[3:5], json_files):
        download(
            column,
            f"{name.capitalize()} (JSON)",
            json.dumps(record, indent=1, default=str).encode(),
            f"{picked_run}-{name}.json",
            "application/json",
            key=f"export_{name}",
            help=tooltip,
        )

# -- sweeps ------------------------------------------------------------------------------------
sweep_ids = sorted(frame["sweep"].dropna().unique())
st.header("Rate sweeps")
if not sweep_ids:
    st.caption("No rate sweeps saved yet: tick 'Sweep arrival rates' on the Launch page.")
else:
    sweep_id = st.selectbox("Sweep", sweep_ids, key="sweep")
    target = st.slider("Capacity at SLO attainment ≥", 0.5, 1.0, 0.9, 0.01, key="sweep_target")
    swept = [run for run in runs if run.sweep_id == sweep_id]
    sweep = sweep_frame(swept)
    capacity = capacities(sweep, target)
    st.dataframe(
        capacity.assign(
            capacity_rps=capacity["capacity_rps"].map(lambda v: "below the lowest rate" if pd.isna(v) else f"{v:.2f}")
        ).rename(
            columns={
                "capacity_rps": f"capacity at ≥ {target:.0%} attainment (req/s)",
                "at_least": "lower bound",
                "rates_swept": "rates swept",
            }
        ),
        hide_index=True,
        key="sweep_capacity",
    )
    st.caption(
        "Capacity: the highest arrival rate at which SLO attainment stays at or above the target, interpolated "
        "between swept rates; 'lower bound' means every swept rate met it (capacity is at least that)."
    )
    for name, fig in sweep_charts(sweep, target).items():
        st.plotly_chart(fig, key=f"sweep-{name}")
    download(
        st,
        "Download sweep (CSV)",
        sweep.to_csv(index=False).encode(),
        f"{sweep_id}.csv",
        "text/csv",
        key="sweep_csv",
    )
    with st.expander("Sweep runs"):
        st.code(json.dumps([m.run_id for m in swept], indent=1), language="json")
