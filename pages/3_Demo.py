"""Demo page: a ready comparison on the simulator, replayed from the bundled results in
results/demo-*, presented for a non-specialist; one click reruns it live."""

from __future__ import annotations

import time
from pathlib import Path

import streamlit as st

from runners import result_store
from runners.charts import attainment_bars, kv_overlay, latency_cdfs
from runners.compare import percent_change, summary_value
from runners.demo import DEMO_BASELINE, DEMO_PREFIX, demo_configs, demo_summaries
from runners.errors import SchedlabError
from runners.jobs import new_job_spec, start_job
from runners.workload.slo import PAPER_SLOS

st.set_page_config(page_title="schedlab · Demo", layout="wide")
ROOT = result_store.DEFAULT_RESULTS_DIR


@st.cache_resource(show_spinner=False, max_entries=16)
def load(folder: str, stamp: float) -> result_store.RunData:  # noqa: ARG001 - stamp keys the cache
    return result_store.load_run(Path(folder).parent, Path(folder).name)


st.title("Which scheduler serves more users on time?")
try:
    summaries = demo_summaries(ROOT)
except SchedlabError as exc:  # the results folder itself is unusable
    st.error(str(exc))
    summaries = []
runs: list[result_store.RunData] = []
for summary in list(summaries):  # a bundled run whose tables cannot be read is left out, and named
    folder = ROOT / summary["run_id"]  # the folder's name (list_runs), never a value read from a file
    try:
        runs.append(load(str(folder), (folder / "summary.json").stat().st_mtime))
    except (SchedlabError, OSError) as exc:
        st.warning(f"{summary['run_id']} is left out: {exc}")
        summaries.remove(summary)
config = demo_configs()[0]
st.write(
    f"{config.workload.requests:,} chat and coding requests arrive at about {config.workload.arrival.rate:g} per "
    "second at one simulated GPU server that can work on 16 requests at once. Each request has a deadline ("
    + "; ".join(f"{task}: {slo.describe()}" for task, slo in PAPER_SLOS.items())
    + "). The same requests, at the same moments, are served by each scheduling strategy below."
)
if not summaries:
    st.warning("The bundled demo results (results/demo-*) are missing. Click below to run the comparison, or run "
               "`python -m runners demo`.")

speed = st.select_slider("Replay speed for a live rerun", ["10x", "20x", "50x", "as fast as possible"], value="20x")
if st.button("Run this comparison again, live", type="primary"):
    pace = None if speed == "as fast as possible" else float(speed.rstrip("x"))
    prefix = f"{DEMO_PREFIX}live-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-"
    spec = new_job_spec(demo_configs(prefix, pace), label="demo comparison (live rerun)")
    folder = start_job(spec, ROOT)
    st.session_state["watch_job"] = folder.name
    st.switch_page("pages/1_Launch.py")

if summaries:
    by_scheduler = {s["scheduler"]: s for s in summaries}
    base = by_scheduler.get(DEMO_BASELINE, summaries[0])
    def metric_row(key: str, shown: str, suffix: str = "", delta_color: str = "normal") -> None:
        """One card per scheduler: the value at ``key`` formatted by ``shown``, % change vs the baseline."""
        for cell, summary in zip(st.columns(len(summaries)), summaries):
            value = summary_value(summary, key)
            change = percent_change(value, summary_value(base, key))
            cell.metric(summary["scheduler"], "—" if value is None else shown.format(value),
                        None if summary is base or change is None else f"{change:+.0f}%{suffix}",
                        delta_color=delta_color)

    st.subheader("Share of requests served on time")
    metric_row("slo_attainment", "{:.0%}", f" vs {DEMO_BASELINE}")
    best = max(summaries, key=lambda s: summary_value(s, "slo_attainment") or 0.0)
    worst = min(summaries, key=lambda s: summary_value(s, "slo_attainment") or 0.0)
    st.markdown(
        f"### **{best['scheduler']}** served {summary_value(best, 'slo_attainment'):.0%} of requests on time; "
        f"**{worst['scheduler']}** only {summary_value(worst, 'slo_attainment'):.0%}."
    )
    st.subheader("Average time from sending a request to its full answer")
    metric_row("e2e_s.mean", "{:.1f} s", delta_color="inverse")

    st.plotly_chart(attainment_bars(summaries), key="demo-attainment")
    st.caption("Taller is better: the share of requests that met their deadline, overall and for chat and code.")
    st.plotly_chart(latency_cdfs(runs, "e2e_s"), key="demo-cdf")
    st.caption("Each line climbs as requests finish: the further left, the sooner users got complete answers.")
    st.plotly_chart(kv_overlay([r for r in runs if r.summary["scheduler"] in (DEMO_BASELINE, "static")] or runs),
                    key="demo-memory")
    st.caption("GPU memory (KV cache) held for requests over time, as a share of the cache: batch-at-a-time serving "
               "(static) fills and empties it with every batch, a sawtooth; continuous batching (fcfs) holds a steadier "
               "level.")
    with st.expander("Why do the strategies differ here?"):
        st.markdown(
            "- **fcfs** sends each request on arrival; the engine fills its 16 slots continuously.\n"
            "- **static** sends 16 requests and waits until all 16 have finished before sending more, so one long "
            "answer keeps 15 slots idle.\n"
            "- **slo-sa** holds requests at the gateway and orders them to maximise G, predicting each one's output "
            "length from a per-task average; it gains when those predictions separate short from long requests.\n"
            "- **dynamic-mem** caps requests in flight by what the KV cache can hold; this cache holds far more "
            "than 16 requests, so it sends the same as fcfs.\n"
            "- **dynamic-sla** moves a batch-size window to keep decode latency near 50 ms; as its algorithm is "
            "written (window gap alpha = 8) the window's middle stays at most 12 of the 16 slots, so at this load "
            "its queue grows.")
    st.page_link("pages/2_Results.py", label="See every metric and chart on the Results page", icon="📊")
    st.caption("Simulator: Qwen2.5-7B on 2 x V100 latency model (DESIGN.md); latencies count from each request's "
               "arrival. Bundled runs: " + ", ".join(s["run_id"] for s in summaries) + ".")
