"""schedlab dashboard: the entry point (``streamlit run app.py``). It names the pages for the
sidebar (st.navigation: Home, Launch, Results, Demo, at /, /Launch, /Results, /Demo) and draws the
Home page: what the tool is, the engines found, the latest runs, the pages."""

from __future__ import annotations

import streamlit as st

#: The Home page's links to the other pages: file, label, icon.
HOME_LINKS = (
    ("pages/1_Launch.py", "Launch runs and watch them live", "🚀"),
    ("pages/2_Results.py", "Compare saved runs and studies", "📊"),
    ("pages/3_Demo.py", "Demo: a ready comparison of six schedulers", "🎬"),
)


def home() -> None:
    """The Home page. It imports what it draws with where it draws it, not at the top: this file
    runs before every page, and the other pages need none of it (issue 42)."""
    st.title("schedlab")
    st.write(
        "schedlab benchmarks the schedulers that decide which LLM requests a serving engine runs, and when. "
        "Pick an engine (the built-in simulator; vLLM, LMDeploy or SGLang servers launched or attached; or any "
        "OpenAI-compatible server by URL), a mixed ShareGPT / "
        "Python-Code workload with per-task SLOs, and one or more schedulers; every latency is measured from the "
        "request's arrival. Watch TTFT, TPOT, end-to-end latency, KV-cache memory and batch size stream in, then "
        "compare runs on SLO attainment, G, throughput and capacity."
    )
    for page, label, icon in HOME_LINKS:  # one under the other: no label is cut at 1,024 px
        st.page_link(page, label=label, icon=icon)

    from runners.engines.discovery import find_engines
    from runners.errors import SchedlabError
    from runners.registry import SCHEDULERS
    from runners.store import result_store

    left, right = st.columns(2)
    with left:
        st.subheader("Engines")
        for engine in find_engines():
            st.markdown(f"- {'✅' if engine.available else '➖'} **{engine.name}** — {engine.detail}")
    with right:
        st.subheader("Schedulers")
        for name, cls in SCHEDULERS.items():
            st.markdown(f"- **{name}** — {cls.summary} *({cls.paper})*")

    st.subheader("Latest runs")
    try:
        runs = result_store.list_runs(result_store.DEFAULT_RESULTS_DIR)
    except SchedlabError as exc:  # the results folder itself is unusable (a file, unreadable)
        st.error(str(exc))
        runs = []
    if not runs:
        st.info("No saved runs yet. Launch one on the Launch page, or `python -m runners run --requests 500 --rate 4`.")
    else:
        import pandas as pd

        from runners.run.knowledge import scheduler_display

        table = pd.DataFrame(
            [
                {
                    "run": run.run_id,
                    "status": run.status,
                    "engine": run.engine,
                    "scheduler": scheduler_display(run),
                    "workload": run.workload,
                    "SLO attainment": run.slo_attainment,
                    "G (1/s)": run.G,
                    "throughput (req/s)": run.request_throughput_rps,
                    "started": run.started_at,
                    "problem": run.problem,
                }
                for run in runs[:20]
            ]
        )
        st.dataframe(
            table if table["problem"].notna().any() else table.drop(columns="problem"),
            hide_index=True,
            column_config={
                "SLO attainment": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="percent")
            },
        )


#: The sidebar's pages: title, file and address (the files keep their numbered names for order).
PAGES = [
    st.Page(home, title="Home", default=True),
    st.Page("pages/1_Launch.py", title="Launch", url_path="Launch"),
    st.Page("pages/2_Results.py", title="Results", url_path="Results"),
    st.Page("pages/3_Demo.py", title="Demo", url_path="Demo"),
]

st.set_page_config(page_title="schedlab", layout="wide")
st.navigation(PAGES).run()
