"""Demo page: a ready comparison on the simulator, from the bundled study in results/demo/ (six
schedulers x seeds 0..9, paired by seed), each headline stated with its 95% interval over seeds and
presented for a non-specialist; one click reruns one seed live, for watching."""

from __future__ import annotations

import streamlit as st

from pages._cached_runs import load_member
from runners import result_store
from runners.charts import kv_overlay
from runners.demo import (
    DEMO_KV_TOKENS,
    DEMO_SEEDS,
    DEMO_SLOTS,
    LIVE_PREFIX,
    card_delta,
    card_interval,
    card_value,
    card_verdict,
    demo_config,
    headline,
    kv_caption,
    live_rerun_configs,
    read_demo_study,
    scheduler_results,
    scheduler_sentence,
)
from runners.errors import SchedlabError
from runners.jobs import new_job_spec, start_job
from runners.metrics.catalog import RUN_METRICS
from runners.schedulers.papers import title
from runners.study_charts import metric_bars, pooled_cdfs
from runners.study_view import HIDDEN_COLUMNS, statistics_frame, study_member_runs
from runners.workload.slo import PAPER_SLOS

st.set_page_config(page_title="schedlab · Demo", layout="wide")
ROOT = result_store.DEFAULT_RESULTS_DIR


def cards(record: dict, key: str, delta_color: str) -> None:
    """One card per scheduler: its mean over seeds, under it ± half its 95% interval; the change
    against the baseline (grey when there is no clear difference) and the verdict in words."""
    results = scheduler_results(record, key)
    for cell, result in zip(st.columns(len(results)), results):
        clear = result.pair is not None and result.pair.get("verdict") in ("better", "worse")
        cell.metric(
            result.scheduler,
            card_value(key, result),
            card_delta(key, result, record["baseline"]),
            delta_color=delta_color if clear else "off",
        )
        cell.caption(f"{card_interval(key, result)}; {card_verdict(result, record['baseline'])}")


st.title("Which scheduler serves more users on time?")
config = demo_config()
seeds = list(DEMO_SEEDS)
st.write(
    f"{config.workload.requests:,} chat and coding requests arrive at about {config.workload.arrival.rate:g} per "
    f"second at one simulated GPU server that can work on up to {DEMO_SLOTS} requests at once, but whose memory "
    f"for them (the KV cache, {DEMO_KV_TOKENS:,} tokens) fills up before that: memory, not slots, limits it. "
    "Each request has a deadline ("
    + "; ".join(f"{task}: {slo.describe()}" for task, slo in PAPER_SLOS.items())
    + "). The same requests, at the same moments, are served by each scheduling strategy below. Traffic is "
    "random, and one day of it can favour one strategy by chance, so each strategy served "
    f"{len(seeds)} different random days of traffic (seeds {seeds[0]} to {seeds[-1]}, fixed in advance); every "
    "number below is the average over them with its 95% interval, the range that holds the true average with 95% "
    "confidence. Two strategies are compared on the same days (paired); a difference counts as clear only when its "
    "interval excludes zero."
)

try:
    record = read_demo_study(ROOT)
except SchedlabError as exc:  # missing, damaged or unfinished bundle: say so and how to remake it
    st.warning(f"{exc} Or click below to watch one seed live.")
    record = None

if record is not None:
    st.markdown("### " + headline(record))
    st.subheader("Share of requests served on time")
    cards(record, "slo_attainment", "normal")
    sentences = [
        scheduler_sentence("slo_attainment", result, record["baseline"], "served {value} of requests on time")
        for result in scheduler_results(record, "slo_attainment")
    ]
    st.markdown("\n".join(f"- {sentence}" for sentence in sentences))
    problems: list[str] = []
    runs_by_scheduler = study_member_runs(ROOT, record, load_member, problems=problems)
    for problem in problems:  # a member whose tables cannot be read is left out of the charts, and named
        st.warning(f"left out of the charts: {problem}")

    st.subheader("Average time from sending a request to its full answer")
    cards(record, "e2e_s.mean", "inverse")
    st.plotly_chart(metric_bars(record, "slo_attainment"), key="demo-attainment")
    st.caption(
        f"Taller is better: the share of requests that met their deadline, averaged over {len(seeds)} seeds; "
        "the black bar on each is its 95% interval."
    )
    if runs_by_scheduler:
        st.plotly_chart(pooled_cdfs(runs_by_scheduler, "e2e_s"), key="demo-cdf")
        st.caption(
            "Each line climbs as requests finish, the requests of all seeds together: the further left, the "
            "sooner users got complete answers."
        )
        first = {name: runs[0] for name, runs in runs_by_scheduler.items() if runs}
        shown = [first[name] for name in (record["baseline"], "mcsf", "static") if name in first] or list(
            first.values()
        )[:2]
        seed = next(
            (
                run.get("seed")
                for run in record["runs"]
                if isinstance(run, dict) and run.get("run_id") == shown[0].run_id
            ),
            None,
        )
        st.plotly_chart(kv_overlay(shown), key="demo-memory")
        st.caption(kv_caption(shown, seed))
    with st.expander("Why do the strategies differ here?"):
        st.markdown(
            f"- **fcfs** sends each request on arrival; the engine admits up to {DEMO_SLOTS} and, when their answers "
            "outgrow the memory, evicts the newest and recomputes it later, work done twice.\n"
            f"- **static** sends {DEMO_SLOTS} requests and waits until all have finished before sending more, so one "
            "long answer keeps the other slots idle.\n"
            f"- **slo-sa** (from *{title('004')}*) holds requests at the gateway and orders them to maximise G, predicting "
            "each "
            "one's output length from a per-task average; it does not look at memory.\n"
            f"- **dynamic-mem** (Alg. 1 of *{title('000')}*) caps requests in flight at the number whose memory fits "
            "with 95% "
            "probability, from average prompt and output lengths: it avoids evictions but also leaves memory unused "
            "when the answers turn out short.\n"
            "- **dynamic-sla** (Alg. 2 of the same paper) also moves a batch-size window to keep decode latency near "
            "50 ms, "
            "and uses the smaller of that and the memory cap.\n"
            f"- **mcsf** (from *{title('003')}*) admits the requests with the shortest predicted answers first, and only "
            "as many "
            "as will still fit in memory when each has grown to its predicted length, so short requests finish "
            "early. Its paper assumes the true lengths are known; here it predicts them as slo-sa does, so some "
            "answers outgrow their prediction and it still evicts, less often than fcfs."
        )
    with st.expander("Every number, for specialists (G, latencies, how contended the runs were)"):
        table = statistics_frame(record, record["statistics"], RUN_METRICS)
        st.dataframe(
            table.drop(columns=[column for column in HIDDEN_COLUMNS if column in table]),
            hide_index=True,
            key="demo-statistics",
        )
        st.caption(
            "Means over seeds with 95% Student t intervals; change = scheduler - baseline per seed (paired), "
            "its 95% interval, and the seeds where the scheduler was better; relative change by bootstrap."
        )
    st.page_link(
        "pages/2_Results.py",
        label="See every metric and chart of this study on the Results page",
        icon="📊",
        query_params={"study": record["study_id"]},
    )
    st.caption(
        "Simulator: Qwen2.5-7B on 2 x V100 latency model (docs/design.md, 'The simulated engine'); latencies count from each request's "
        f"arrival. Bundled study: results/{record['study_id']}/study.json, runs "
        f"{record['study_id']}-<scheduler>-s<seed>."
    )

st.subheader("Watch it live")
st.write(
    "Rerun one seed of the study live, to watch the strategies work. One seed is for watching, not the verdict: "
    "1 seed has no interval, and differences of this size can flip with the seed."
)
live_seed = st.selectbox("Seed to rerun", seeds, key="demo-seed")
speed = st.select_slider("Replay speed", ["10x", "20x", "50x", "as fast as possible"], value="20x")
if st.button(f"Run seed {live_seed} again, live", type="primary"):
    pace = None if speed == "as fast as possible" else float(speed.rstrip("x"))
    spec = new_job_spec(
        live_rerun_configs(live_seed, pace),
        label=f"demo, seed {live_seed} (one seed of the study, for watching; not the verdict)",
    )
    folder = start_job(spec, ROOT)
    st.session_state["watch_job"] = folder.name
    st.switch_page("pages/1_Launch.py")
st.caption(f"Live reruns are saved as {LIVE_PREFIX}<time>-<scheduler>-s<seed>; the bundled study is left as it is.")
