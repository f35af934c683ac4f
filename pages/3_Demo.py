"""Demo page: ready comparisons on the simulator, from the bundled studies of two load regimes
(below capacity and overload; six schedulers x seeds 0..9 each, paired by seed): per regime the
headline, who gains and who pays, attainment and G with their 95% intervals, the tails (p99 TTFT,
p99 E2E) and the per-task outcomes, in plain words; one click reruns one seed live, for watching."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import streamlit as st

from pages.parts.app_navigation import use_app_navigation
from pages.parts.cached_runs import load_member
from runners.app.jobs import new_job_spec, start_job
from runners.engines.fidelity import PAPER_PRESET_LABEL
from runners.errors import SchedlabError
from runners.metrics.catalog import CUT_NOTE, RUN_METRICS
from runners.metrics.seed_statistics import RELATIVE_INTERVAL_NOTE
from runners.schedulers.papers import title
from runners.store import result_store
from runners.store.models import StudyRecord
from runners.store.result_store import RunData
from runners.views.charts import kv_overlay
from runners.views.demo import (
    DEMO_KV_TOKENS,
    DEMO_REGIMES,
    DEMO_SEEDS,
    DEMO_SLOTS,
    INTERVAL_WORDING,
    LIVE_PREFIX,
    DemoRegime,
    card_delta,
    card_interval,
    card_unit,
    card_value,
    card_verdict,
    clear_direction,
    demo_config,
    headline,
    kv_caption,
    live_rerun_configs,
    read_demo_study,
    regime_text,
    scheduler_results,
    strategy_notes,
    tail_frame,
    task_frame,
    task_tail_statistics,
    who_pays_sentence,
)
from runners.views.study_charts import metric_bars, pooled_cdfs
from runners.views.study_view import HIDDEN_COLUMNS, statistics_frame, study_member_runs
from runners.workload.slo import PAPER_SLOS

use_app_navigation()  # a first visit straight to this page: app.py's sidebar, not the folder's
st.set_page_config(page_title="schedlab · Demo", layout="wide")
ROOT = result_store.DEFAULT_RESULTS_DIR


def cards(record: StudyRecord, key: str, delta_color: Literal["normal", "inverse"], per_row: int = 3) -> None:
    """One card per scheduler, ``per_row`` to a row (three: value, name and change stay whole at a
    1,024 px window): its mean over seeds, under it ± half its 95% interval; the change against the
    baseline (grey when the paired interval includes zero) and the verdict in words."""
    results = scheduler_results(record, key)
    cells = [cell for start in range(0, len(results), per_row) for cell in st.columns(per_row)]
    for cell, result in zip(cells, results):
        clear = clear_direction(key, result.pair) is not None
        cell.metric(
            result.scheduler,
            card_value(key, result),
            card_delta(key, result, record.baseline),
            delta_color=delta_color if clear else "off",
        )
        cell.caption(f"{card_interval(key, result)}; {card_verdict(result, record.baseline, key, record)}")


def _height(table) -> int:
    """Pixels that show every row of ``table`` without an inner scroll (35 px a row and the header)."""
    return 35 * (len(table) + 1) + 3


def show_regime(regime: DemoRegime, record: StudyRecord) -> None:
    """One regime's study: headline, who gains and who pays, cards, tails, tasks, charts."""
    baseline = record.baseline
    seeds = len(record.seeds)
    st.write(regime_text(regime, record))
    problems: list[str] = []
    runs_by_scheduler: dict[str, Sequence[RunData]] = dict(
        study_member_runs(ROOT, record, load_member, problems=problems)
    )
    for problem in problems:  # a member whose tables cannot be read is left out of the charts, and named
        st.warning(f"left out of the charts and the per-task tails: {problem}")
    tails = task_tail_statistics(record, runs_by_scheduler)
    st.markdown("#### " + headline(record))

    st.markdown("**Who gains and who pays**, against " + baseline + ":")
    sentences = [who_pays_sentence(record, name, tails, nested=True) for name in record.schedulers if name != baseline]
    st.markdown("\n".join(f"- {sentence}" for sentence in sentences))

    st.markdown("**Share of requests served on time** (SLO attainment)")
    cards(record, "slo_attainment", "normal")
    st.markdown(f"**G{card_unit('G')}**: requests on time per second they spent in the system (higher is better)")
    cards(record, "G", "normal")

    st.markdown("**The tail**: the slowest 1% of requests, time to the first token (TTFT) and to the full answer (E2E)")
    table = tail_frame(record)
    st.dataframe(table, hide_index=True, height=_height(table), key=f"demo-{regime.key}-tails")
    st.markdown("**Per task**: chat and code requests, on time and the slowest 1% of each")
    table = task_frame(record, tails)
    st.dataframe(table, hide_index=True, height=_height(table), key=f"demo-{regime.key}-tasks")
    st.caption(
        f"Means over {seeds} seeds [{INTERVAL_WORDING}]; change = strategy - {baseline} at each seed (paired), "
        "its 95% interval, and the seeds where the strategy was better; clearly better or worse only where that "
        "interval excludes zero. p99 E2E per task: for each run (one seed) the 99th percentile of the E2E latency "
        "of that task's completed requests (its requests.parquet), then over seeds as above."
    )

    st.plotly_chart(metric_bars(record, "slo_attainment"), key=f"demo-{regime.key}-attainment")
    st.caption(
        f"Taller is better: the share of requests that met their deadline, averaged over {seeds} seeds; "
        "the black bar on each is its 95% interval."
    )
    if runs_by_scheduler:
        st.plotly_chart(pooled_cdfs(runs_by_scheduler, "e2e_s"), key=f"demo-{regime.key}-cdf")
        st.caption(
            "Each line climbs as requests finish, the requests of all seeds together: the further left, the "
            "sooner users got complete answers; the top right is the tail, where the longest waits are."
        )
        first = {name: runs[0] for name, runs in runs_by_scheduler.items() if runs}
        shown = [first[name] for name in (baseline, "mcsf", "static") if name in first] or list(first.values())[:2]
        seed = next((run.seed for run in record.runs if run.run_id == shown[0].run_id), None)
        st.plotly_chart(kv_overlay(shown), key=f"demo-{regime.key}-memory")
        st.caption(kv_caption(shown, seed))
    with st.expander("Every number, for specialists (latencies, throughput, how contended the runs were)"):
        table = statistics_frame(record, record.statistics, RUN_METRICS)
        st.dataframe(
            table.drop(columns=[column for column in HIDDEN_COLUMNS if column in table]),
            hide_index=True,
            key=f"demo-{regime.key}-statistics",
        )
        st.caption(
            "Means over seeds with 95% Student t intervals; change = scheduler - baseline per seed (paired), "
            "its 95% interval, and the seeds where the scheduler was better; relative change with "
            f"{RELATIVE_INTERVAL_NOTE}. {CUT_NOTE}."
        )
    st.page_link(
        "pages/2_Results.py",
        label=f"See every metric and chart of the {regime.label.lower()} study on the Results page",
        icon="📊",
        query_params={"study": record.study_id},
    )
    st.caption(f"Bundled study: results/{record.study_id}/study.json, runs {record.study_id}-<scheduler>-s<seed>.")


st.title("Which scheduler serves more users on time?")
config = demo_config()
seeds = list(DEMO_SEEDS)
st.write(
    f"{config.workload.requests:,} chat and coding requests arrive at one simulated GPU server that can work on up "
    f"to {DEMO_SLOTS} requests at once, but whose memory for them (the KV cache, {DEMO_KV_TOKENS:,} tokens) fills up "
    "before that: memory, not slots, limits it. Each request has a deadline ("
    + "; ".join(f"{task}: {slo.describe()}" for task, slo in PAPER_SLOS.items())
    + "). The same requests, at the same moments, are served by each scheduling strategy below, in two regimes: "
    "below the server's capacity, where there is little to win, and in overload, where a strategy can meet more "
    "deadlines only by making someone else wait. Traffic is random, and one day of it can favour one strategy by "
    f"chance, so each strategy served {len(seeds)} different random days of traffic (seeds {seeds[0]} to "
    f"{seeds[-1]}, fixed in advance); every number below is the average over them with its {INTERVAL_WORDING}. "
    "Two strategies are compared on the same days (paired); a difference counts as clear only when its interval "
    "excludes zero."
)

records: list[StudyRecord] = []
for tab, regime in zip(st.tabs([regime.title for regime in DEMO_REGIMES]), DEMO_REGIMES):
    with tab:
        try:
            record = read_demo_study(ROOT, regime)
        except SchedlabError as exc:  # missing, damaged or unfinished bundle: say so and how to remake it
            st.warning(f"{exc} Or click below to watch one seed live.")
            continue
        records.append(record)
        show_regime(regime, record)

with st.expander("Why do the strategies differ?"):
    st.markdown("\n".join(f"- {note}" for note in strategy_notes(records, title)))
st.caption(
    "Simulator: Qwen2.5-7B on 2 x V100 latency model, from the SLO-aware paper's Table 2: "
    f"{PAPER_PRESET_LABEL} (docs/design.md, 'The simulated engine'); the schedulers plan with a model fitted to "
    "a noisy profile of it, not the engine's own. Latencies count from "
    "each request's arrival. p99 TTFT and p99 E2E: each run's 99th percentile, then the mean over seeds."
)

st.subheader("Watch it live")
st.write(
    "Rerun one seed of a study live, to watch the strategies work. One seed is for watching, not the verdict: "
    "1 seed has no interval, and differences of this size can flip with the seed."
)
live_regime = st.selectbox(
    "Regime to rerun", DEMO_REGIMES, index=len(DEMO_REGIMES) - 1, format_func=lambda r: r.title, key="demo-regime"
)
live_seed = st.selectbox("Seed to rerun", seeds, key="demo-seed")
speed = st.select_slider("Replay speed", ["10x", "20x", "50x", "as fast as possible"], value="20x")
if st.button(f"Run seed {live_seed} again, live", type="primary"):
    pace = None if speed == "as fast as possible" else float(speed.rstrip("x"))
    spec = new_job_spec(
        live_rerun_configs(live_seed, pace, regime=live_regime),
        label=f"demo {live_regime.key}, seed {live_seed} (one seed of the study, for watching; not the verdict)",
    )
    folder = start_job(spec, ROOT)
    st.session_state["watch_job"] = folder.name
    st.switch_page("pages/1_Launch.py")
st.caption(
    f"Live reruns are saved as {LIVE_PREFIX}<time>-<regime>-<scheduler>-s<seed>; the bundled studies are left as they "
    "are."
)
