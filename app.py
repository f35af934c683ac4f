"""schedlab dashboard — home page: what the tool is, what it can drive, the latest runs."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from runners.registry import ENGINES, SCHEDULERS
from runners.result_store import DEFAULT_RESULTS_DIR, list_runs

st.set_page_config(page_title="schedlab", layout="wide")
st.title("schedlab")
st.write(
    "schedlab benchmarks LLM-serving schedulers. Pick an engine (the built-in simulator, or a vLLM or "
    "LMDeploy server), a mixed ShareGPT / Python-Code workload with per-task SLOs, and one or more "
    "schedulers; it measures TTFT, TPOT and end-to-end latency from each request's arrival, KV-cache "
    "memory and batch size, and compares runs on SLO attainment, G and throughput."
)

left, right = st.columns(2)
with left:
    st.subheader("Engines")
    for name, entry in ENGINES.items():
        st.markdown(f"- **{name}** — {entry.summary}")
with right:
    st.subheader("Schedulers")
    for name, cls in SCHEDULERS.items():
        st.markdown(f"- **{name}** — {cls.summary} *({cls.paper})*")

st.subheader("Latest runs")
runs = list_runs(DEFAULT_RESULTS_DIR)
if not runs:
    st.info("No saved runs yet. Start one with `python -m runners run --scheduler fcfs --requests 500 --rate 4`.")
else:
    table = pd.DataFrame(
        [
            {
                "run": run.get("run_id"),
                "status": run.get("status"),
                "engine": run.get("engine"),
                "scheduler": run.get("scheduler"),
                "workload": run.get("workload"),
                "SLO attainment": run.get("slo_attainment"),
                "G (1/s)": run.get("G"),
                "throughput (req/s)": run.get("request_throughput_rps"),
                "started": run.get("started_at"),
            }
            for run in runs[:20]
        ]
    )
    st.dataframe(
        table,
        hide_index=True,
        column_config={"SLO attainment": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent")},
    )
