"""Results page: saved runs (filter, delete, rename, config), comparison with % change against a
baseline and every chart, rate sweeps with capacity, and export (CSV, HTML, PNG).

Thin: tables come from runners.compare, figures from runners.charts, files from runners.result_store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from runners import result_store
from runners.charts import (CHART_VIEWS, COMPARISON_CHARTS, ExportUnavailable, chart_png, charts_html,
                            comparison_chart, sweep_charts)
from runners.compare import capacities, change_is_good, comparison_table, sweep_frame
from runners.errors import SchedlabError

st.set_page_config(page_title="schedlab · Results", layout="wide")
ROOT = result_store.DEFAULT_RESULTS_DIR


@st.cache_resource(show_spinner=False, max_entries=256)
def load_run_cached(folder: str, stamp: float) -> result_store.RunData:  # noqa: ARG001 - stamp keys the cache
    return result_store.load_run(Path(folder).parent, Path(folder).name)


@st.cache_resource(show_spinner=False, max_entries=128)
def chart_cached(name: str, keys: tuple[tuple[str, float], ...]):
    runs = [load_run_cached(folder, stamp) for folder, stamp in keys]
    return comparison_chart(name, [run.summary for run in runs], runs)


def stamp_of(folder: Path) -> float:
    """Changes whenever the run's summary is rewritten (a rename or a run still going)."""
    try:
        return (folder / "summary.json").stat().st_mtime_ns / 1e9
    except FileNotFoundError:
        return 0.0


st.title("Results")
try:
    runs = result_store.list_runs(ROOT)
except SchedlabError as exc:
    st.error(str(exc))
    st.stop()
if not runs:
    st.info("No saved runs yet: launch one on the Launch page, or see the Demo page.")
    st.stop()
by_id = {run["run_id"]: run for run in runs}  # run_id is the folder's name, never a value read from a file
UNUSABLE = (result_store.DAMAGED, result_store.INCOMPLETE)

# -- list and filters --------------------------------------------------------------------------
frame = pd.DataFrame([{
    "run": run["run_id"], "status": run["status"], "engine": run.get("engine"),
    "scheduler": run.get("scheduler"), "workload": run.get("workload"),
    "requests": run.get("rows"),  # request rows saved: so far, for a running or interrupted run
    "rate (req/s)": run.get("arrival_rate_rps"), "SLO attainment": run.get("slo_attainment"), "G (1/s)": run.get("G"),
    "started": run.get("started_at"), "sweep": run.get("sweep_id"), "problem": run.get("problem"),
} for run in runs])
with st.expander("Filter", expanded=False):
    columns = st.columns(4)
    engines = columns[0].multiselect("Engine", sorted(frame["engine"].dropna().unique()), key="filter_engine")
    schedulers = columns[1].multiselect("Scheduler", sorted(frame["scheduler"].dropna().unique()),
                                        key="filter_scheduler")
    workload_text = columns[2].text_input("Workload contains", key="filter_workload")
    dates = sorted(frame["started"].dropna().str[:10].unique())
    day = columns[3].selectbox("Started on", ["any day", *dates], key="filter_day")
shown = frame
if engines:
    shown = shown[shown["engine"].isin(engines)]
if schedulers:
    shown = shown[shown["scheduler"].isin(schedulers)]
if workload_text:
    shown = shown[shown["workload"].fillna("").str.contains(workload_text, case=False, regex=False)]
if day != "any day":
    shown = shown[shown["started"].fillna("").str.startswith(day)]
st.dataframe(shown if shown["problem"].notna().any() else shown.drop(columns="problem"), hide_index=True,
             column_config={
                 "SLO attainment": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent"),
             })
st.caption(f"{len(shown)} of {len(frame)} runs shown.")
broken = [run for run in runs if run["status"] in UNUSABLE]
if broken:
    st.warning(f"{len(broken)} run folder(s) cannot be read; delete them under 'Manage a run' or repair their files: "
               + "; ".join(f"{run['run_id']} ({run['status']}: {run['problem']})" for run in broken[:5])
               + (" …" if len(broken) > 5 else ""))

with st.expander("Manage a run: config, rename, delete"):
    target = st.selectbox("Run", list(shown["run"]), key="manage_run")
    if target and target in by_id:
        record = by_id[target]
        if record["status"] in UNUSABLE:
            st.error(f"{target} is {record['status']}: {record['problem']}")
        else:
            try:
                st.json(result_store.load_run(ROOT, target).config.get("config", {}), expanded=False)
            except SchedlabError as exc:
                st.error(str(exc))
        columns = st.columns([2, 1, 1])
        new_name = columns[0].text_input("New name", value=target, key="rename_to")
        if columns[1].button("Rename", key="rename", disabled=record["status"] in UNUSABLE):
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

# -- compare -----------------------------------------------------------------------------------
st.header("Compare")
available = [run for run in shown["run"] if by_id[run]["status"] not in UNUSABLE]
linked = [run for run in st.query_params.get("runs", "").split(",") if run in available]
default = linked or [run for run in available if by_id[run]["status"] == "done"][:2]
chosen = st.multiselect("Runs to compare", available, default=default, key="compare_runs")
keys: tuple[tuple[str, float], ...] = ()
loaded: list[result_store.RunData] = []
for run_id in chosen:  # a run whose files cannot be read is named, and the others compared
    key = (str(ROOT / run_id), stamp_of(ROOT / run_id))
    try:
        loaded.append(load_run_cached(*key))
        keys += (key,)
    except SchedlabError as exc:
        st.error(f"{run_id} cannot be compared: {exc}")
if chosen:
    st.query_params["runs"] = ",".join(chosen)  # the address bar now links to this comparison
if loaded:
    compared = [run.run_id for run in loaded]
    linked_baseline = st.query_params.get("baseline")
    baseline = st.selectbox("Baseline (% change is against this run)", compared, key="baseline",
                            index=compared.index(linked_baseline) if linked_baseline in compared else 0)
    st.query_params["baseline"] = baseline
    summaries = [run.summary for run in loaded]
    table = comparison_table(summaries, baseline)

    def colour(value, metric_label):
        good = change_is_good(metric_label, value)
        return "" if good is None else ("color: #1a7f37" if good else "color: #cf222e")

    change_columns = [column for column in table.columns if column.startswith("Δ%")]
    styled = table.style.format(precision=4, na_rep="—").format("{:+.1f}%", subset=change_columns, na_rep="—")
    styled = styled.apply(lambda col: [colour(v, m) for v, m in zip(col, table["metric"])], subset=change_columns)
    st.dataframe(styled, hide_index=True)
    st.download_button("Download table (CSV)", table.to_csv(index=False).encode(), "comparison.csv", "text/csv",
                       key="csv")

    captions = {
        "slo_attainment": "Share of requests meeting their task's SLO (failed requests count as misses).",
        "g": "G: SLO-meeting requests divided by the summed end-to-end latency, from arrival.",
        "ttft_cdf": "Time to first token, from arrival (queueing included).",
        "tpot_cdf": "Time per output token after the first.",
        "e2e_cdf": "End-to-end latency from arrival to the last token.",
        "ttft_vs_tpot": "Each point a request; inside the dashed box the chat SLO holds.",
        "kv_usage": "KV-cache memory used over time: the sawtooth of batch-at-a-time scheduling.",
        "batch_size": "Requests the engine is running at each moment.",
        "throughput": "Output tokens per second (rolling 2 s mean).",
    }
    views = list(CHART_VIEWS)
    linked_view = st.query_params.get("view")
    view = st.segmented_control("Charts", views, default=linked_view if linked_view in views else views[0],
                                key="chart_view") or views[0]
    st.query_params["view"] = view
    left, right = st.columns(2)
    for index, name in enumerate(CHART_VIEWS[view]):
        with (left if index % 2 == 0 else right):
            st.plotly_chart(chart_cached(name, keys), key=f"chart-{name}")
            st.caption(captions.get(name, ""))

    st.subheader("Export")
    if st.session_state.get("export_keys") != keys:  # exports belong to the runs they were made from
        st.session_state.pop("export_html", None)
        st.session_state.pop("export_png", None)
        st.session_state["export_keys"] = keys
    columns = st.columns(2)
    with columns[0]:
        if st.button("Prepare HTML of all charts", key="make_html"):
            figures = {name: chart_cached(name, keys) for name in COMPARISON_CHARTS}
            st.session_state["export_html"] = charts_html(figures, "schedlab comparison: " + ", ".join(compared))
        if st.session_state.get("export_html"):
            st.download_button("Download charts (HTML)", st.session_state["export_html"].encode(),
                               "comparison.html", "text/html", key="html")
    with columns[1]:
        which = st.selectbox("Chart as PNG", list(COMPARISON_CHARTS), key="png_chart")
        if st.button("Render PNG", key="make_png"):
            try:
                st.session_state["export_png"] = (which, chart_png(chart_cached(which, keys)))
            except ExportUnavailable as exc:
                st.warning(str(exc))
        if st.session_state.get("export_png"):
            name, data = st.session_state["export_png"]
            st.download_button(f"Download {name}.png", data, f"{name}.png", "image/png", key="png")

# -- sweeps ------------------------------------------------------------------------------------
sweep_ids = sorted(frame["sweep"].dropna().unique())
st.header("Rate sweeps")
if not sweep_ids:
    st.caption("No rate sweeps saved yet: tick 'Sweep arrival rates' on the Launch page.")
else:
    sweep_id = st.selectbox("Sweep", sweep_ids, key="sweep")
    target = st.slider("Capacity at SLO attainment ≥", 0.5, 1.0, 0.9, 0.01, key="sweep_target")
    members = [run for run in runs if run.get("sweep_id") == sweep_id]
    sweep = sweep_frame(members)
    capacity = capacities(sweep, target)
    st.dataframe(capacity.assign(capacity_rps=capacity["capacity_rps"].map(
        lambda v: "below the lowest rate" if pd.isna(v) else f"{v:.2f}")), hide_index=True)
    st.caption("Capacity: the highest arrival rate at which SLO attainment stays at or above the target, interpolated "
               "between swept rates; 'at_least' means every swept rate met it.")
    for name, fig in sweep_charts(sweep, target).items():
        st.plotly_chart(fig, key=f"sweep-{name}")
    st.download_button("Download sweep (CSV)", sweep.to_csv(index=False).encode(), f"{sweep_id}.csv", "text/csv",
                       key="sweep_csv")
    with st.expander("Sweep runs"):
        st.code(json.dumps([m.get("run_id") for m in members], indent=1), language="json")
