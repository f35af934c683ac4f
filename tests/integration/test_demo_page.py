"""The Demo page under AppTest, on the bundled studies: both regimes shown (one tab each), each with
its headline, who gains and who pays, attainment and G cards with their 95% intervals and seeds
better, the tails (p99 TTFT and E2E) and the per-task outcomes, numbers read back from study.json
and (per-task tails) recomputed by hand from the member runs' requests.parquet; mcsf's task-only
guess and the interval wording as the page must say them; its "See every metric" links open each
regime's own study on the Results page; its memory charts are in percent and their captions state
what the shown runs' KV usage measured; the live rerun is one seed of the chosen regime."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pandas as pd
import pytest
from test_app import BUNDLED, open_page

from runners.metrics.catalog import metric
from runners.store.models import RunEntry, StudyRecord
from runners.store.result_store import RunData, load_run
from runners.study.runner import read_study
from runners.views.demo import (
    DEMO_BASELINE,
    DEMO_REGIMES,
    DEMO_SCHEDULERS,
    INTERVAL_WORDING,
    LIVE_PREFIX,
    MCSF_TASK_ONLY,
    headline,
    kv_caption,
    kv_usage,
    named_direction,
    task_tail_statistics,
    who_pays_sentence,
)
from runners.views.study_view import study_member_runs

ATTAINMENT, G = metric("slo_attainment"), metric("G")


@pytest.fixture
def demo_results(monkeypatch, results_dir: Path) -> Path:
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    for folder in sorted(BUNDLED.glob("demo*")):
        shutil.copytree(folder, results_dir / folder.name)
    return results_dir


@pytest.fixture
def app(demo_results):
    return open_page("pages/3_Demo.py")


def record_of(regime) -> StudyRecord:
    return read_study(BUNDLED / regime.study_id)


def tab_of(app, regime):
    (tab,) = [tab for tab in app.tabs if tab.label == regime.title]
    return tab


def plain(text: str) -> str:
    """The catalog's text of a number, written out when it has an exponent (8.254e-05 -> 0.00008254)."""
    return (
        np.format_float_positional(float(text), precision=4, unique=False, fractional=False, trim="-")
        if "e" in text
        else text
    )


def _values(encoded) -> np.ndarray:
    """A trace's values as plotly writes them: a list, or ``{dtype, bdata}`` (base64 bytes)."""
    if isinstance(encoded, dict):
        return np.frombuffer(base64.b64decode(encoded["bdata"]), dtype=np.dtype(encoded["dtype"]))
    return np.asarray(encoded, dtype=float)


def _peak_percent(results: Path, run_id: str) -> float:
    """By hand: the largest per-sample mean of kv_usage over instances, in percent."""
    frame = pd.read_parquet(results / run_id / "timeseries.parquet")
    return 100 * float(frame.groupby("t_s")["kv_usage"].mean().max())


# -- both regimes, each complete --------------------------------------------------------------------
def test_the_page_shows_both_regimes_in_tabs(app):
    assert [tab.label for tab in app.tabs] == [regime.title for regime in DEMO_REGIMES]
    assert [tab.label for tab in app.tabs] == ["Below capacity: 2.2 req/s", "Overload: 4 req/s"]
    assert not app.warning
    text = " ".join(markdown.value for markdown in app.markdown)
    assert f"with its {INTERVAL_WORDING}" in text
    assert "95% confidence" not in text and "holds the true average" not in text
    assert "shortest predicted answers first" not in text
    assert f"{MCSF_TASK_ONLY}." in text  # "mcsf orders by a guess from the request's task only (chat vs code), ..."


@pytest.mark.parametrize("regime", DEMO_REGIMES, ids=lambda regime: regime.key)
def test_each_regime_states_attainment_and_g_with_intervals_and_seeds_better(app, regime):
    record, tab = record_of(regime), tab_of(app, regime)
    n = len(record.seeds)
    cards = tab.metric
    assert [card.label for card in cards] == list(DEMO_SCHEDULERS) * 2  # attainment, then G
    assert any(markdown.value.startswith("**G (1/s)**") for markdown in tab.markdown)
    under = [caption.value for caption in tab.caption][: 2 * len(DEMO_SCHEDULERS)]
    for row, (key, m) in enumerate((("slo_attainment", ATTAINMENT), ("G", G))):
        entry = record.statistics[key]
        for column, name in enumerate(DEMO_SCHEDULERS):
            card, caption = cards[row * len(DEMO_SCHEDULERS) + column], under[row * len(DEMO_SCHEDULERS) + column]
            stats = entry.schedulers[name]
            low, high = plain(m.format(stats.ci_low)), plain(m.format(stats.ci_high))
            unit = "%" if m.unit == "%" else f" {m.unit}"
            # a share's card carries its %; G's unit heads its cards ("G (1/s)"), so the value stays whole
            assert card.value == f"{plain(m.format(stats.mean))}{unit if m.unit == '%' else ''}"
            half = plain(m.format((stats.ci_high - stats.ci_low) / 2))
            assert caption.startswith(f"± {half} (95% interval {low} to {high}{unit}); ")
            if name == DEMO_BASELINE:
                assert caption.endswith("the baseline") and card.delta == ""
                continue
            pair = entry.vs_baseline[name]
            assert card.delta == f"{m.format_change(pair.diff_mean)} vs fcfs"
            seeds = f"({pair.wins} of {n} seeds better)"
            side = "better" if pair.ci_low > 0 else "worse" if pair.ci_high < 0 else None
            if side is None:
                assert caption.endswith(f"no clear difference from fcfs {seeds}")
            elif named_direction(record, key, name) is None:  # under the minimum effect, or not after Holm
                assert caption.endswith(f"{side} than fcfs, too small or too uncertain to name {seeds}")
            else:
                assert caption.endswith(f"clearly {side} than fcfs {seeds}")


@pytest.mark.parametrize("regime", DEMO_REGIMES, ids=lambda regime: regime.key)
def test_each_regime_has_its_headline_and_who_gains_and_who_pays(app, demo_results, regime):
    record, tab = record_of(regime), tab_of(app, regime)
    texts = [markdown.value for markdown in tab.markdown]
    title = next(text for text in texts if text.startswith("#### "))
    assert title == "#### " + headline(record)
    attainment = record.statistics["slo_attainment"].vs_baseline
    better = [name for name in DEMO_SCHEDULERS[1:] if named_direction(record, "slo_attainment", name) == "better"]
    assert all(attainment[name].ci_low > 0 for name in better)
    named = title.split(" met clearly more")[0] if better else ""
    assert sorted(named.replace("#### ", "").replace("*", "").replace(" and ", ",").replace(" ", "").split(",")) == (
        sorted(better) if better else [""]
    )
    assert "paired 95% intervals over 10 seeds" in title and "significant after Holm's correction" in title
    runs = study_member_runs(demo_results, record)
    tails = task_tail_statistics(record, runs)
    bullets = next(text for text in texts if text.startswith("- **"))
    assert bullets == "\n".join(
        f"- {who_pays_sentence(record, name, tails, nested=True)}" for name in DEMO_SCHEDULERS[1:]
    )
    for name in DEMO_SCHEDULERS[1:]:  # every sentence says the SLO change in words
        sentence = who_pays_sentence(record, name, tails)
        assert sentence.startswith(f"**{name}**") and "SLOs" in sentence


def test_overload_says_who_pays_for_mcsfs_win(app, demo_results):
    """In overload mcsf meets clearly more SLOs, and its sentence says who pays: the slowest 1% of
    requests (p99 TTFT) and long code requests, with their numbers."""
    regime = next(regime for regime in DEMO_REGIMES if regime.key == "overload")
    record = record_of(regime)
    ttft = record.statistics["ttft_s.p99"].vs_baseline["mcsf"]
    assert record.statistics["slo_attainment"].vs_baseline["mcsf"].ci_low > 0 and ttft.ci_low > 0
    text = " ".join(markdown.value for markdown in tab_of(app, regime).markdown).replace(";\n    - ", "; ")
    (sentence,) = [line for line in text.split("\n") if line.startswith("- **mcsf**")]
    assert "meets more SLOs than fcfs" in sentence
    pays = sentence.split("who pays: ")[1]
    assert f"the slowest 1% of requests wait longer for a first token (p99 TTFT +{ttft.diff_mean:.3f} s" in pays
    assert "long code requests wait longer (p99 E2E of code +" in pays


@pytest.mark.parametrize("regime", DEMO_REGIMES, ids=lambda regime: regime.key)
def test_each_regime_shows_the_tails_and_the_per_task_outcomes(app, demo_results, regime):
    """The tail table reads study.json's p99 TTFT and E2E; the per-task table its attainment per
    task, and the p99 E2E of each task recomputed here by hand from the requests of every seed."""
    record, tab = record_of(regime), tab_of(app, regime)
    tails = tab.dataframe[0].value.set_index(["tail", "strategy"])
    tasks = tab.dataframe[1].value.set_index(["task", "outcome", "strategy"])
    assert len(tails) == 2 * len(DEMO_SCHEDULERS) and len(tasks) == 2 * 2 * len(DEMO_SCHEDULERS)
    for key in ("ttft_s.p99", "e2e_s.p99"):
        m = metric(key)
        for name in DEMO_SCHEDULERS:
            stats = record.statistics[key].schedulers[name]
            row = tails.loc[(m.label, name)]
            low, cut = max(stats.ci_low, 0.0), stats.ci_low < 0  # a time is never below 0: cut, marked *
            assert row["mean [95% interval]"] == (
                f"{m.format(stats.mean)} [{m.format(low)}, {m.format(stats.ci_high)}]" + ("*" if cut else "")
            )
            if name == DEMO_BASELINE:
                assert row["verdict"] == "baseline"
                continue
            pair = record.statistics[key].vs_baseline[name]
            assert row["change vs fcfs [95% interval]"].startswith(m.format_change(pair.diff_mean) + " [")
            assert row["seeds better"] == f"{pair.wins} of 10 seeds"
            clear = "clearly worse" if pair.ci_low > 0 else "clearly better" if pair.ci_high < 0 else None
            assert row["verdict"] == (clear or "no clear difference")
    seeds = {run.run_id: run.seed for run in record.runs}
    for task in ("chat", "code"):
        share = metric(f"slo_attainment_by_task.{task}")
        per_seed: dict[str, dict[int, float]] = {}
        for run_id, seed in seeds.items():
            frame = pd.read_parquet(demo_results / run_id / "requests.parquet")
            e2e = frame.loc[(frame["task"] == task) & frame["e2e_s"].notna(), "e2e_s"].to_numpy()
            name = run_id[len(regime.study_id) + 1 :].rsplit("-s", 1)[0]
            per_seed.setdefault(name, {})[seed] = float(np.percentile(e2e, 99))
        for name in DEMO_SCHEDULERS:
            stats = record.statistics[f"slo_attainment_by_task.{task}"].schedulers[name]
            on_time, tail = tasks.loc[(task, "on time (%)", name)], tasks.loc[(task, "E2E p99 (s)", name)]
            assert on_time["mean [95% interval]"].startswith(share.format(stats.mean) + " [")
            mean = float(np.mean(list(per_seed[name].values())))
            assert tail["mean [95% interval]"].startswith(f"{mean:.3f} [")
            if name != DEMO_BASELINE:
                diffs = [per_seed[name][seed] - per_seed[DEMO_BASELINE][seed] for seed in record.seeds]
                assert tail["change vs fcfs [95% interval]"].startswith(f"{float(np.mean(diffs)):+.3f} s [")
                assert tail["seeds better"] == f"{sum(diff < 0 for diff in diffs)} of 10 seeds"


@pytest.mark.parametrize("regime", DEMO_REGIMES, ids=lambda regime: regime.key)
def test_the_memory_chart_is_in_percent_and_its_caption_states_the_measured_peaks(app, demo_results, regime):
    tab = tab_of(app, regime)
    charts = [chart for chart in tab.get("plotly_chart") if f"demo-{regime.key}-memory" in chart.proto.id]
    assert len(charts) == 1 and len(tab.get("plotly_chart")) == 3
    figure = json.loads(charts[0].proto.spec)
    assert figure["layout"]["yaxis"]["range"] == [0, 100]
    shown = {trace["legendgroup"]: float(np.nanmax(_values(trace["y"]))) for trace in figure["data"]}
    assert set(shown) == {f"{regime.study_id}-{name}-s0" for name in ("fcfs", "mcsf", "static")}
    for run_id, top in shown.items():  # percent (0-100), not a fraction (0-1) on a % axis
        assert top <= 100 and top == pytest.approx(_peak_percent(demo_results, run_id), abs=0.5), run_id
    caption = next(caption.value for caption in tab.caption if caption.value.startswith("One seed only"))
    assert "(seed 0)" in caption
    for run_id in shown:
        usage = kv_usage(load_run(demo_results, run_id))
        peak = f"{_peak_percent(demo_results, run_id):.1f}%"
        said = f"**{usage.scheduler}** peaks at {peak}" if usage.peak >= 0.95 else f"**{usage.scheduler}** never fills"
        assert said in caption, caption


def test_a_cache_never_filled_is_not_said_to_fill():
    """A run whose cache peaked at 1.2%: the caption says so, and names no sawtooth or full cache."""
    series = [0.0, 0.004, 0.012, 0.006, 0.0]
    frame = pd.DataFrame({"t_s": [0.0, 0.25, 0.5, 0.75, 1.0], "instance": [0] * 5, "kv_usage": series})
    summary = RunEntry(scheduler="static", preemptions=0)
    run = RunData("big-cache", Path("."), {}, summary, pd.DataFrame(), frame)
    assert kv_usage(run).peak == pytest.approx(0.012) and kv_usage(run).full_share == 0.0
    caption = kv_caption([run], 0)
    assert "**static** never fills it: it peaks at 1.2%" in caption
    assert "sawtooth" not in caption and "full" not in caption.split("peaks at")[1].split(".")[0]


# -- links, live rerun, missing bundle --------------------------------------------------------------
def test_see_every_metric_opens_each_regimes_study_on_the_results_page(demo_results):
    """With a newer study beside them (listed first on the Results page), each link still opens
    its regime's study: its query names the study, and the Results page shows the demo's schedulers."""
    from runners.run.config import parse_config
    from runners.study.runner import plan_study, run_study

    other = parse_config(
        {
            "run_id": "newer",
            "workload": {"requests": 20},
            "scheduler": {"name": "fcfs"},
            "trials": {"schedulers": ["fcfs", "static"], "seeds": [0]},
        }
    )
    run_study(plan_study(other, "newer"), demo_results)
    app = open_page("pages/3_Demo.py")
    links = [link.proto for link in app.get("page_link") if "Results page" in link.proto.label]
    assert [link.page for link in links] == ["Results"] * len(DEMO_REGIMES)
    queries = [{key: values[0] for key, values in parse_qs(link.query_string).items()} for link in links]
    assert queries == [{"study": regime.study_id} for regime in DEMO_REGIMES]

    for query in queries:
        results = open_page()
        for key, value in query.items():
            results.query_params[key] = value
        results.switch_page("pages/2_Results.py").run()
        assert not results.exception, results.exception
        assert results.selectbox(key="study").value == query["study"]
        shown = " ".join(str(table.value.to_dict()) for table in results.dataframe)
        assert all(scheduler in shown for scheduler in DEMO_SCHEDULERS), shown[:500]


def test_the_live_rerun_is_one_seed_of_the_chosen_regime(demo_results, monkeypatch):
    started = []
    monkeypatch.setattr("runners.app.jobs.start_job", lambda spec, root: started.append(spec) or root / ".jobs" / "x")
    app = open_page("pages/3_Demo.py")
    below = next(regime for regime in DEMO_REGIMES if regime.key == "below")
    assert app.selectbox(key="demo-regime").value.key == "overload"  # the default: the earlier demo's regime
    app.selectbox(key="demo-regime").set_value(below).run()
    app.selectbox(key="demo-seed").set_value(3).run()
    app.button[0].click().run()
    (spec,) = started
    assert "one seed of the study" in spec.label and "not the verdict" in spec.label and "below" in spec.label
    assert [config.scheduler.name for config in spec.runs] == list(DEMO_SCHEDULERS)
    assert {config.workload.seed for config in spec.runs} == {3}
    assert {config.workload.arrival.rate for config in spec.runs} == {below.rate_rps}
    assert all(
        str(config.run_id).startswith(LIVE_PREFIX)
        and str(config.run_id).endswith("-s3")
        and "-below-" in str(config.run_id)
        for config in spec.runs
    )
    assert not any(config.trials.seeds for config in spec.runs)


def test_without_the_bundle_each_regime_says_how_to_make_it(monkeypatch, results_dir):
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    (results_dir / "demo-below-fcfs-s0").mkdir()  # a stray member without its study
    app = open_page("pages/3_Demo.py")
    assert not app.exception
    assert len(app.warning) == len(DEMO_REGIMES)
    for warning, regime in zip(app.warning, DEMO_REGIMES):
        assert "is missing" in warning.value and "python -m runners demo" in warning.value
        assert regime.study_id in warning.value
    assert not app.metric and not app.get("plotly_chart")
    assert f"{MCSF_TASK_ONLY}." in " ".join(markdown.value for markdown in app.markdown)
    assert app.button[0].label.startswith("Run seed 0 again")  # the live rerun still works


def test_one_regime_missing_leaves_the_other_shown(demo_results):
    shutil.rmtree(demo_results / "demo-below")
    app = open_page("pages/3_Demo.py")
    below, overload = (tab_of(app, regime) for regime in DEMO_REGIMES)
    assert "is missing" in below.warning[0].value and not below.metric
    assert not overload.warning and len(overload.metric) == 2 * len(DEMO_SCHEDULERS)


def test_a_damaged_member_is_left_out_and_named(demo_results):
    """The studies' numbers come from study.json; a member whose files are damaged is left out of
    the charts and the per-task tails, and named."""
    (demo_results / "demo-overload-static-s3" / "summary.json").write_text('"oops"')
    timeseries = demo_results / "demo-below-slo-sa-s0" / "timeseries.parquet"
    timeseries.write_bytes(timeseries.read_bytes()[:100])
    app = open_page("pages/3_Demo.py")
    assert [metric.label for metric in app.metric] == list(DEMO_SCHEDULERS) * 2 * len(DEMO_REGIMES)
    warnings = " | ".join(warning.value for warning in app.warning)
    assert "demo-overload-static-s3" in warnings and "demo-below-slo-sa-s0" in warnings
    assert len(app.get("plotly_chart")) == 3 * len(DEMO_REGIMES)
