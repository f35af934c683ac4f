"""The Results page with studies (issue 10, sections 3-5): study_view's frames and member loading,
study_charts' error bars and pooled CDFs (TPOT in ms), and the page under Streamlit's AppTest on
small real simulator studies: the numbers shown equal study.json's statistics formatted by the
catalog, verdicts coloured, k of n seeds, the single-seed note, the identical-decisions warning of
an uncontended study, capacity per seed on a hand-made sweep, and a damaged study or a missing
member shown as one message."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from runners.app.cli import main
from runners.metrics.catalog import RUN_METRICS, metric
from runners.metrics.seed_statistics import SINGLE_SEED_NOTE
from runners.store.models import RunSummary, StudyRecord, StudyRun, record_json
from runners.store.result_store import load_run, read_summary
from runners.study.runner import read_study, study_statistics
from runners.views.charts import latency_cdfs
from runners.views.study_charts import metric_bars, pooled_cdfs
from runners.views.study_view import (
    METRIC_GROUPS,
    VERDICT_COLOURS,
    capacity_per_seed,
    capacity_statistics,
    capacity_table,
    list_studies,
    member_summaries,
    partial_members,
    partial_members_note,
    same_as_baseline,
    same_as_baseline_lines,
    statistics_frame,
    study_counts,
    study_frames,
    study_member_runs,
)
from tests.integration.test_app import open_page

SIM = ["--engine", "sim", "--quiet"]
SEEDS = (0, 1, 2)


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """Three studies made once: ``st`` (contended: one slot at 6 req/s, fcfs vs slo-sa, 3 seeds),
    ``calm`` (uncontended: 1 req/s, many slots, one seed: identical decisions) and ``cap`` (a
    hand-made sweep over 1, 2 and 4 req/s whose attainments are set by hand)."""
    out = tmp_path_factory.mktemp("studies") / "results"
    assert (
        main(
            [
                "run",
                *SIM,
                "--requests",
                "20",
                "--rate",
                "6",
                "--set",
                "engine.max_num_seqs=1",
                "--scheduler",
                "fcfs,slo-sa",
                "--seeds",
                "3",
                "--run-id",
                "st",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "run",
                *SIM,
                "--requests",
                "8",
                "--rate",
                "0.5",
                "--scheduler",
                "fcfs,slo-sa",
                "--seeds",
                "1",
                "--run-id",
                "calm",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    make_capacity_study(out)
    return out


#: slo_attainment per (scheduler, seed) at rates 1, 2, 4 req/s. At a 0.8 target, by hand:
#: fcfs s0: between 2 (0.9) and 4 (0.5): 2 + (0.9 - 0.8) / (0.9 - 0.5) x 2 = 2.5
#: fcfs s1: between 1 (1.0) and 2 (0.7): 1 + 0.2 / 0.3 = 1.6667;  fcfs s2: every rate meets it: >= 4
#: slo-sa s0: 2 + 0.2 / 0.4 x 2 = 3.0;  slo-sa s1: 2 + 0.1 / 0.5 x 2 = 2.4;  slo-sa s2: below 1 req/s
ATTAINMENT = {
    ("fcfs", 0): (1.0, 0.9, 0.5),
    ("fcfs", 1): (1.0, 0.7, 0.3),
    ("fcfs", 2): (0.95, 0.85, 0.85),
    ("slo-sa", 0): (1.0, 1.0, 0.6),
    ("slo-sa", 1): (1.0, 0.9, 0.4),
    ("slo-sa", 2): (0.7, 0.6, 0.5),
}
RATES = (1.0, 2.0, 4.0)


def make_capacity_study(out: Path) -> None:
    assert main(["run", *SIM, "--requests", "6", "--run-id", "cap-template", "--out", str(out)]) == 0
    template = out / "cap-template"
    runs, summaries = [], {}
    for (name, seed), values in ATTAINMENT.items():
        for rate, value in zip(RATES, values):
            run_id = f"cap-{name}-r{rate:g}-s{seed}"
            shutil.copytree(template, out / run_id)
            summary = json.loads((template / "summary.json").read_text())
            summary.update(run_id=run_id, scheduler=name, slo_attainment=value, arrival_rate_rps=rate)
            write_json(out / run_id / "summary.json", summary)
            summaries[run_id] = RunSummary.model_validate(summary)
            runs.append(StudyRun(run_id=run_id, scheduler=name, seed=seed, rate=rate, status="done", error=None))
    shutil.rmtree(template)
    by_rate = [
        {
            "rate": rate,
            "statistics": {
                key: statistics.model_dump(mode="python", exclude_unset=True)
                for key, statistics in study_statistics(
                    [r for r in runs if r.rate == rate], summaries, "fcfs", ["fcfs", "slo-sa"], relative=False
                ).items()
            },
        }
        for rate in RATES
    ]
    (out / "cap").mkdir()
    write_json(
        out / "cap" / "study.json",
        {
            "schema_version": 1,
            "study_id": "cap",
            "baseline": "fcfs",
            "schedulers": ["fcfs", "slo-sa"],
            "seeds": list(SEEDS),
            "status": "done",
            "created_at": "2020-01-01T00:00:00Z",
            "finished_at": "2020-01-01T00:01:00Z",
            "rates": list(RATES),
            "runs": [run.model_dump(mode="python", exclude_unset=True) for run in runs],
            "statistics": {},
            "statistics_by_rate": by_rate,
        },
    )


@pytest.fixture
def results(made, tmp_path, monkeypatch) -> Path:
    """A fresh copy of the three studies, as the pages' results folder."""
    folder = tmp_path / "results"
    shutil.copytree(made, folder)
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", folder)
    return folder


def record_of(results: Path, study_id: str) -> StudyRecord:
    return read_study(results / study_id)


def table_value(element):
    value = element.value
    return value.data if hasattr(value, "data") else value


STUDY_BLOCK = "<div class='schedlab-study-tables'>"


def _text(cell: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


def parse_study_html(block: str) -> pd.DataFrame:
    """The rows of one rate's study tables as the page shows them (:func:`statistics_html`), in
    page order: ``group``, ``metric``, ``key``, ``scheduler``, ``verdict``, ``colour`` (the verdict
    cell's CSS colour, '' when none), ``seeds better``, ``mean``, ``change``, ``relative``,
    ``note`` (the row's own note line, else the note shown beside the metric's name), and the
    ``headers`` of its table."""
    rows = []
    for group, table in re.findall(
        r"<p class='schedlab-study-group'[^>]*><strong>(.*?)</strong></p>(<table.*?</table>)", block
    ):
        headers = [_text(cell) for cell in re.findall(r"<th class='[^']*'[^>]*>(.*?)</th>", table)]
        metric_name = shared = ""
        for attributes, content in re.findall(r"<tr([^>]*)>(.*?)</tr>", table.split("<tbody>")[1]):
            if "class='metric'" in attributes:  # the metric's name, and the note its rows share
                name, _, note = content.partition("<span")
                metric_name, shared = _text(name), _text("<span" + note)[1:-1] if note else ""
            elif "class='note'" in attributes:
                rows[-1]["note"] = _text(content).partition(": ")[2]
            else:
                cells = re.findall(r"<td class='([^']*)' style='([^']*)'[^>]*>(.*?)</td>", content)
                by_class = {name: (style, _text(cell)) for name, style, cell in cells}
                colour = re.findall(r"color: (#[0-9a-f]{6})", by_class["verdict"][0])
                rows.append(
                    {
                        "group": html.unescape(group),
                        "metric": metric_name,
                        "key": re.search(r"data-key='([^']*)'", attributes).group(1),
                        "scheduler": by_class["scheduler"][1],
                        "verdict": by_class["verdict"][1],
                        "colour": colour[0] if colour else "",
                        "seeds better": by_class["seeds-better"][1],
                        "mean": by_class["mean"][1],
                        "change": by_class["change"][1],
                        "relative": by_class["relative-change"][1],
                        "note": shared,
                        "headers": headers,
                    }
                )
    return pd.DataFrame(rows)


def statistics_tables(app) -> list[pd.DataFrame]:
    """The page's study statistics tables, one frame per rate (:func:`parse_study_html`)."""
    return [parse_study_html(block.value) for block in app.markdown if block.value.startswith(STUDY_BLOCK)]


def open_study(study_id: str):
    app = open_page("pages/2_Results.py")
    app.radio(key="compare_mode").set_value("A study").run()
    app.selectbox(key="study").set_value(study_id).run()
    assert not app.exception, app.exception
    return app


# -- study_view ------------------------------------------------------------------------------------
def test_list_studies_newest_first_and_a_damaged_study_listed_with_its_problem(results):
    (results / "broken").mkdir()
    (results / "broken" / "study.json").write_text('{"schema_version": 1, "study_id": "broken"')
    (results / "linked").symlink_to(results / "st")  # a link is never read as a study
    studies = list_studies(results)
    assert [s.study_id for s in studies] == ["calm", "st", "cap", "broken"]
    assert studies[-1].status == "damaged" and "study.json" in studies[-1].problem
    assert studies[1].baseline == "fcfs" and studies[1].seeds == [0, 1, 2]


def test_study_member_runs_loads_exact_ids_inside_the_folder_and_reports_the_missing(results):
    record = record_of(results, "st")
    runs = study_member_runs(results, record)
    assert list(runs) == ["fcfs", "slo-sa"]
    assert [run.run_id for run in runs["slo-sa"]] == ["st-slo-sa-s0", "st-slo-sa-s1", "st-slo-sa-s2"]
    # a missing member is reported, never replaced by a run whose id merely starts with it
    shutil.rmtree(results / "st-fcfs-s1")
    shutil.copytree(results / "st-fcfs-s2", results / "st-fcfs-s10")
    shutil.rmtree(results / "st-fcfs-s2")
    (results / "st-fcfs-s2").symlink_to(results / "st-fcfs-s0")
    problems: list[str] = []
    runs = study_member_runs(results, record, problems=problems)
    assert [run.run_id for run in runs["fcfs"]] == ["st-fcfs-s0"]
    assert len(problems) == 2
    assert "'st-fcfs-s1' is missing" in problems[0] and "'st-fcfs-s2' is a symbolic link" in problems[1]


def test_statistics_frame_shows_study_json_numbers_formatted_by_the_catalog(results):
    record = record_of(results, "st")
    frame = statistics_frame(record, record.statistics).set_index(["key", "scheduler"])
    summaries = {
        (name, seed): read_summary(results / f"st-{name}-s{seed}") for name in ("fcfs", "slo-sa") for seed in SEEDS
    }
    # attainment by hand from the member summaries: mean and Student t interval (t(0.975, 2) = 4.3027)
    values = np.array([summaries[("slo-sa", seed)].slo_attainment for seed in SEEDS]) * 100
    half = 4.302652729911275 * values.std(ddof=1) / np.sqrt(3)
    row = frame.loc[("slo_attainment", "slo-sa")]
    assert row["mean [95% CI]"] == f"{values.mean():.1f} [{values.mean() - half:.1f}, {values.mean() + half:.1f}]"
    diffs = [summaries[("slo-sa", s)].slo_attainment - summaries[("fcfs", s)].slo_attainment for s in SEEDS]
    assert row["seeds better"] == f"{sum(d > 0 for d in diffs)} of 3 seeds"
    pair = record.statistics["slo_attainment"].vs_baseline["slo-sa"]
    assert row["change vs fcfs [95% CI]"] == (
        f"{pair.diff_mean * 100:+.1f} pts [{pair.ci_low * 100:.1f}, {pair.ci_high * 100:.1f}]"
    )
    assert row["verdict"] == pair.verdict and row["judged"]
    assert frame.loc[("slo_attainment", "fcfs"), "verdict"] == "baseline"
    # TPOT in ms, G in 1/s; contention is described, never judged
    tpot = record.statistics["tpot_s.mean"].schedulers["fcfs"]
    assert frame.loc[("tpot_s.mean", "fcfs"), "mean [95% CI]"].startswith(f"{tpot.mean * 1000:.1f} [")
    peak = frame.loc[("contention.waiting_peak", "slo-sa")]
    assert peak["verdict"] == "" and not peak["judged"] and "describes the setting" in peak["note"]
    assert set(frame.index.get_level_values("key")) == {m.key for m in RUN_METRICS if not m.real_engines_only}
    assert study_counts(record) | {"by_status": None} == {
        "runs": 6,
        "by_status": None,
        "done": 6,
        "failed": 0,
        "seeds": [0, 1, 2],
        "rates": [],
        "schedulers": ["fcfs", "slo-sa"],
        "dropped_seeds": [],
    }


def test_a_scheduler_with_exactly_the_baselines_results_is_named(results):
    record = record_of(results, "st")
    assert same_as_baseline(record) == {} and same_as_baseline_lines(record) == []
    for key, entry in record.statistics.items():
        pair = entry.vs_baseline.get("slo-sa")
        if pair and pair.n_pairs and not key.startswith("queue_s."):  # where requests waited may differ
            pair.diff_mean, pair.ci_low, pair.ci_high = 0.0, 0.0, 0.0
    record.statistics_by_rate[0].statistics = record.statistics
    assert same_as_baseline(record) == {"slo-sa": [6.0]}
    assert same_as_baseline_lines(record)[0].startswith("slo-sa got exactly fcfs's results at every seed")
    record.statistics["tpot_s.p99"].vs_baseline["slo-sa"].diff_mean = 0.001
    assert same_as_baseline(record) == {}


def test_capacity_per_seed_then_its_interval_and_paired_difference_by_hand(results):
    record = record_of(results, "cap")
    per_seed = capacity_per_seed(record, member_summaries(results, record), 0.8)
    values = {(row.scheduler, row.seed): row.capacity_rps for row in per_seed.itertuples()}
    assert values[("fcfs", 0)] == pytest.approx(2.5) and values[("fcfs", 1)] == pytest.approx(1 + 0.2 / 0.3)
    assert values[("fcfs", 2)] == 4.0 and values[("slo-sa", 0)] == pytest.approx(3.0)
    assert values[("slo-sa", 1)] == pytest.approx(2.4) and np.isnan(values[("slo-sa", 2)])
    table = capacity_table(record, per_seed).set_index("seed")
    assert list(table["fcfs"]) == ["2.50", "1.67", "≥ 4.00"]
    assert list(table["slo-sa"]) == ["3.00", "2.40", "below the lowest rate"]
    stats = capacity_statistics(record, per_seed).set_index("scheduler")
    # fcfs: mean of 2.5, 1.6667, 4 = 2.7222, t(0.975, 2) interval [-0.2151, 5.6595], cut at 0 req/s
    assert stats.loc["fcfs", "mean [95% CI]"] == "2.72 [0.00, 5.66]*"
    assert stats.loc["slo-sa", "mean [95% CI]"] == "2.70 [0.00, 6.51]*"
    # paired over seeds 0 and 1 (seed 2 dropped): diffs 0.5 and 0.7333, t(0.975, 1) = 12.706
    assert stats.loc["slo-sa", "diff_mean"] == pytest.approx(0.616667, abs=1e-6)
    assert stats.loc["slo-sa", "diff_low"] == pytest.approx(-0.865724, abs=1e-5)
    assert stats.loc["slo-sa", "change vs fcfs [95% CI]"] == "+0.62 req/s [-0.87, 2.10]"
    assert stats.loc["slo-sa", "seeds better"] == "2 of 2 seeds (1 dropped)"
    assert stats.loc["slo-sa", "verdict"] == "no difference"
    # a failed member: that seed has no capacity for its scheduler
    record.runs[0].status = "failed"
    failed = capacity_per_seed(record, member_summaries(results, record), 0.8)
    assert failed.set_index(["scheduler", "seed"]).loc[("fcfs", 0), "reason"] == "no result at 1.00 req/s"


# -- study_charts and charts -----------------------------------------------------------------------
def test_metric_bars_draw_the_interval_in_display_units_and_say_when_one_seed_has_none(results):
    record = record_of(results, "st")
    fig = metric_bars(record, "slo_attainment")
    stats = record.statistics["slo_attainment"].schedulers["slo-sa"]
    bar = next(trace for trace in fig.data if trace.name == "slo-sa")
    assert bar.y[0] == pytest.approx(stats.mean * 100)
    assert bar.error_y.array[0] == pytest.approx((stats.ci_high - stats.mean) * 100)
    assert bar.error_y.arrayminus[0] == pytest.approx((stats.mean - stats.ci_low) * 100)
    assert fig.layout.yaxis.title.text == "SLO attainment (%)"
    single = metric_bars(record_of(results, "calm"), "G")
    assert all(trace.error_y.visible is False for trace in single.data)
    assert all("1 seed: no interval" in trace.customdata[0] for trace in single.data)
    by_rate = metric_bars(record_of(results, "cap"), "slo_attainment")
    assert list(by_rate.data[0].x) == ["1 req/s", "2 req/s", "4 req/s"]
    assert by_rate.data[0].y[0] == pytest.approx(np.mean([1.0, 1.0, 0.95]) * 100)


def test_pooled_cdfs_and_run_cdfs_show_tpot_in_milliseconds(results):
    record = record_of(results, "st")
    runs = study_member_runs(results, record)
    fig = pooled_cdfs(runs, "tpot_s")
    assert fig.layout.xaxis.title.text == "TPOT (ms)"
    chat = [trace for trace in fig.data if trace.legendgroup == "fcfs"][0]
    pooled = np.concatenate(
        [run.requests.loc[run.requests["task"] == "chat", "tpot_s"].dropna() for run in runs["fcfs"]]
    )
    assert chat.name == f"fcfs (3 seeds, {sum(len(run.requests) for run in runs['fcfs'])} requests)"
    assert max(chat.x) == pytest.approx(pooled.max() * 1000) and min(chat.x) == pytest.approx(pooled.min() * 1000)
    single = latency_cdfs([load_run(results, "st-fcfs-s0")], "tpot_s")
    requests = load_run(results, "st-fcfs-s0").requests
    assert single.layout.xaxis.title.text == "TPOT (ms)"
    assert max(single.data[0].x) == pytest.approx(requests.loc[requests["task"] == "chat", "tpot_s"].max() * 1000)


# -- the page --------------------------------------------------------------------------------------
def test_results_page_shows_a_study_with_intervals_verdicts_and_k_of_n(results):
    app = open_study("st")
    record = record_of(results, "st")
    tables = statistics_tables(app)
    assert len(tables) == 1
    shown = tables[0]
    assert len(shown) == 2 * len([m for m in RUN_METRICS if not m.real_engines_only])  # every row, two schedulers
    for _, row in shown.iterrows():
        entry = metric(row["key"])
        assert row["metric"] == entry.label
        stats = record.statistics[entry.key].schedulers[row["scheduler"]]
        assert stats.n == 3  # every seed: no '(n ...)' beside the mean
        assert row["mean"] == f"{entry.format(stats.mean)} {entry.format_interval(stats.ci_low, stats.ci_high)}"
        pair = record.statistics[entry.key].vs_baseline.get(row["scheduler"])
        if pair and not entry.describes_setting:
            assert row["verdict"] == pair.verdict
            assert row["seeds better"] == f"{pair.wins} of {pair.n_pairs}"
            assert row["change"] == (
                f"{entry.format_change(pair.diff_mean)} {entry.format_change_interval(pair.ci_low, pair.ci_high)}"
            )
    # verdicts coloured: better green, worse red, no difference grey; baseline and contention rows never
    for _, row in shown.iterrows():
        expected = VERDICT_COLOURS.get(row["verdict"], "")
        assert row["colour"] == expected, (row["metric"], row["scheduler"], row["verdict"])
    assert any(row["verdict"] == "baseline" for _, row in shown.iterrows())
    assert not any(row["colour"] for _, row in shown.iterrows() if row["metric"].startswith("requests waiting"))
    assert not [
        frame for frame in app.dataframe if "verdict" in frame.value.columns and "metric" in frame.value.columns
    ]
    cards = {card.label: card.value for card in app.metric}
    assert cards == {"runs done": "6 of 6", "runs failed": "0", "seeds": "3", "seeds dropped": "0"}
    assert not app.warning  # a queue formed: no identical-decisions warning
    charts = [chart.proto.id for chart in app.get("plotly_chart")]
    assert sum("study-bars" in name for name in charts) == 2 and sum("study-cdf" in name for name in charts) == 1
    # a seed's member runs open as single runs
    app.selectbox(key="study_open_seed").set_value(1).run()
    app.button(key="study_open").click().run()
    assert not app.exception, app.exception
    assert app.radio(key="compare_mode").value == "Saved runs"
    assert app.multiselect(key="compare_runs").value == ["st-fcfs-s1", "st-slo-sa-s1"]


def test_an_uncontended_study_warns_of_identical_decisions_and_its_single_seed(results):
    app = open_study("calm")
    warnings = [warning.value for warning in app.warning]
    assert any(
        "identical decisions" in text
        and "the engine never had a queue (max waiting 0)" in text
        and "higher rate" in text
        for text in warnings
    ), warnings
    assert SINGLE_SEED_NOTE in [info.value for info in app.info]
    shown = statistics_tables(app)[0]
    row = shown.set_index(["metric", "scheduler"]).loc[("SLO attainment (%)", "slo-sa")]
    assert row["mean"].endswith("[no interval]") and row["seeds better"] == "0 of 1"
    assert row["verdict"] == "no difference" and "no interval" in row["note"]


def test_single_runs_say_one_seed_has_no_interval_and_when_they_made_identical_decisions(results):
    app = open_page("pages/2_Results.py")
    app.radio(key="compare_mode").set_value("Saved runs").run()
    app.multiselect(key="compare_runs").set_value(["calm-fcfs-s0", "calm-slo-sa-s0"]).run()
    assert not app.exception, app.exception
    assert any(SINGLE_SEED_NOTE in info.value for info in app.info)
    assert any(
        w.value.startswith("these runs made identical decisions: the engine never had a queue") for w in app.warning
    )
    app.multiselect(key="compare_runs").set_value(["st-fcfs-s0", "st-slo-sa-s0"]).run()
    assert any(SINGLE_SEED_NOTE in info.value for info in app.info)
    assert not app.warning


def test_results_page_capacity_per_seed_of_a_rate_study(results):
    app = open_study("cap")
    assert len(statistics_tables(app)) == 3  # one per rate
    app.slider(key="study_target").set_value(0.8).run()
    assert not app.exception, app.exception
    frames = [table_value(element) for element in app.dataframe]
    per_seed = next(frame for frame in frames if list(frame.columns) == ["seed", "fcfs", "slo-sa"])
    assert list(per_seed["fcfs"]) == ["2.50", "1.67", "≥ 4.00"]
    assert list(per_seed["slo-sa"]) == ["3.00", "2.40", "below the lowest rate"]
    summary = next(frame for frame in frames if "seeds better" in frame.columns and "metric" not in frame.columns)
    summary = summary.set_index("scheduler")
    assert summary.loc["fcfs", "mean [95% CI]"] == "2.72 [0.00, 5.66]*"
    assert summary.loc["slo-sa", "change vs fcfs [95% CI]"] == "+0.62 req/s [-0.87, 2.10]"
    assert summary.loc["slo-sa", "seeds better"] == "2 of 2 seeds (1 dropped)"
    charts = [chart.proto.id for chart in app.get("plotly_chart")]
    assert sum("study-sweep" in name for name in charts) == 2 and any("capacity" in name for name in charts)


def test_a_damaged_study_or_a_missing_member_is_one_message_never_a_traceback(results):
    shutil.rmtree(results / "st-slo-sa-s1")
    (results / "calm" / "study.json").write_text('{"schema_version": 1, "study_id": "calm", "runs": "x"')
    cap = json.loads((results / "cap" / "study.json").read_text())
    write_json(results / "cap" / "study.json", {**cap, "rates": [1, "fast"]})
    app = open_page("pages/2_Results.py")
    assert not app.exception
    listing = table_value(app.dataframe[1])
    assert dict(zip(listing["study"], listing["problem"].notna())) == {"calm": True, "st": False, "cap": True}
    problems = dict(zip(listing["study"], listing["problem"]))
    assert problems["cap"].endswith("study.json: 'rates' is not a list of numbers; expected a study record")
    assert "2 study file(s) cannot be read" in app.warning[0].value
    app.radio(key="compare_mode").set_value("A study").run()
    app.selectbox(key="study").set_value("cap").run()
    assert not app.exception and "Study cap cannot be shown" in app.error[0].value
    app.radio(key="compare_mode").set_value("A study").run()
    app.selectbox(key="study").set_value("calm").run()
    assert not app.exception
    assert any(e.value.startswith("Study calm cannot be shown:") and "study.json" in e.value for e in app.error)
    app.selectbox(key="study").set_value("st").run()
    assert not app.exception
    assert any(
        "1 member run(s) cannot be read" in e.value and "'st-slo-sa-s1' is missing" in e.value for e in app.error
    )
    assert statistics_tables(app)  # the statistics of study.json are still shown


def test_results_page_deletes_a_whole_study_after_confirmation(results):
    app = open_page("pages/2_Results.py")
    app.selectbox(key="manage_study").set_value("st").run()
    assert app.button(key="delete_study").disabled
    app.checkbox(key="confirm_delete_study").check().run()
    app.button(key="delete_study").click().run()
    assert not app.exception, app.exception
    assert not (results / "st").exists() and not any(results.glob("st-*"))
    assert (results / "calm").exists() and (results / "calm-fcfs-s0").exists()
    assert "st" not in [study.study_id for study in list_studies(results)]


def test_a_study_with_no_finished_seed_says_there_is_nothing_to_compare_yet(results):
    """Issue 27 defect 9: before any member finishes, the page gives the planned setting (not
    "engine ?"), says there is nothing to compare, and shows no verdict on 0 of 0 seeds and no
    empty chart."""
    record = record_of(results, "st")
    runs = [run.model_copy(update={"status": "pending"}) for run in record.runs]
    statistics = study_statistics(runs, {}, record.baseline, record.schedulers)
    by_rate = [entry.model_copy(update={"statistics": statistics}) for entry in record.statistics_by_rate]
    pending = record.model_copy(
        update={"status": "running", "runs": runs, "statistics": statistics, "statistics_by_rate": by_rate}
    )
    pair = statistics["G"].vs_baseline["slo-sa"]
    assert pair.n_pairs == 0 and pair.verdict == "no difference"  # as study.json records it
    frame = statistics_frame(pending, statistics).set_index(["key", "scheduler"])
    assert frame.loc[("G", "slo-sa"), "verdict"] == "-" and frame.loc[("G", "slo-sa"), "seeds better"] == "0 of 0"
    for run in record.runs:
        shutil.rmtree(results / str(run.run_id))
    (results / "st" / "study.json").write_text(record_json(pending))
    app = open_study("st")
    header = " ".join(block.value for block in app.markdown)
    assert "**engine** sim" in header and "**requests per run** 20" in header and "?" not in header.split("arrival")[0]
    assert any(box.value.startswith("Nothing to compare yet: no member run has finished") for box in app.info)
    assert not statistics_tables(app)  # no 0-of-0 statistics table
    assert not [frame for frame in app.dataframe if "verdict" in frame.value.columns]
    assert not app.get("plotly_chart")  # no empty charts


# -- issue 27: the study table whole, grouped, verdicts first; partial members named ----------------
HEADLINE = ["slo_attainment", "G", "goodput_rps", "request_throughput_rps"]


def test_statistics_frame_puts_headline_metrics_first_and_verdict_and_k_of_n_before_the_wide_columns(results):
    """Defect 2: SLO attainment, G, goodput and throughput first, then latency means and p99, the
    rest after; the verdict and k of n right after the metric and scheduler, before the intervals."""
    record = record_of(results, "st")
    frame = statistics_frame(record, record.statistics)
    keys = list(dict.fromkeys(frame["key"]))
    assert keys[:4] == HEADLINE
    latency = keys.index("ttft_s.mean")
    assert keys[latency : latency + 6] == [
        "ttft_s.mean",
        "ttft_s.p99",
        "tpot_s.mean",
        "tpot_s.p99",
        "e2e_s.mean",
        "e2e_s.p99",
    ]
    assert keys.index("ttft_s.p90") > keys.index("e2e_s.p99") and keys[-1].startswith("contention.")
    columns = list(frame.columns)
    assert columns[:4] == ["metric", "scheduler", "verdict", "seeds better"]
    assert columns.index("seeds better") < columns.index("mean [95% CI]") < columns.index("change vs fcfs [95% CI]")
    groups = list(dict.fromkeys(frame["group"]))
    assert groups == [title for title, _ in METRIC_GROUPS]
    assert frame.loc[frame["key"] == "G", "group"].iloc[0] == "SLO attainment, G and throughput"


def test_results_page_study_table_groups_every_row_headline_first_without_a_dataframe(results):
    """Defect 2 on the page: HTML tables in the page's flow (no st.dataframe and its ten-row
    inner scroll), one per metric group under its title, every metric and scheduler shown, the
    verdict and k-of-n headers right after the scheduler."""
    app = open_study("st")
    (shown,) = statistics_tables(app)
    record = record_of(results, "st")
    expected = statistics_frame(record, record.statistics)
    assert list(zip(shown["key"], shown["scheduler"])) == list(zip(expected["key"], expected["scheduler"]))
    assert list(dict.fromkeys(shown["key"]))[:4] == HEADLINE
    assert list(dict.fromkeys(shown["group"])) == [title for title, _ in METRIC_GROUPS]
    assert shown["headers"].iloc[0] == [
        "scheduler",
        "verdict",
        "seeds better",
        "mean [95% CI]",
        "change vs fcfs [95% CI]",
        "relative change [95% CI]",
    ]
    assert not any("study_table" in frame.proto.id for frame in app.dataframe)


def make_partial(results: Path, run_id: str, cancelled: int = 4, not_run: int = 2) -> str:
    """Mark member ``run_id``'s summary as partial (requests cancelled and never sent, as a run
    stopped early records them); returns its :meth:`RunSummary.partial` text."""
    path = results / run_id / "summary.json"
    summary = json.loads(path.read_text())
    summary.update(cancelled=cancelled, not_run=not_run, completed=summary["completed"] - cancelled - not_run)
    write_json(path, summary)
    reason = RunSummary.model_validate(summary).partial()
    assert reason is not None
    return reason


def test_a_partial_member_is_named_beside_the_study_table_and_marks_the_verdicts_pairing_it(results):
    """Defect 1 on the study page: a member counted as done whose summary is partial is named
    (scheduler, seed, run id, why) beside the statistics, which keep it (as study.json does); the
    verdicts that pair it read '(partial)' with a note naming the seed; the other rows do not."""
    reason = make_partial(results, "st-slo-sa-s1")
    assert reason.startswith("done: ") and "4 cancelled, 2 never sent" in reason
    record = record_of(results, "st")
    partial = member_summaries(results, record)
    found = partial_members(record, partial)
    assert found == {"st-slo-sa-s1": reason}
    note = partial_members_note(record, found)
    assert f"slo-sa seed 1 (st-slo-sa-s1: {reason})" in note and "stay in the statistics" in note
    app = open_study("st")
    assert any(box.value == note for box in app.warning)
    (shown,) = statistics_tables(app)
    slo_sa = shown[(shown["scheduler"] == "slo-sa") & (shown["colour"] != "")]
    assert len(slo_sa) and all(verdict.endswith("(partial)") for verdict in slo_sa["verdict"])
    assert all(text.startswith("pairs a partial run at seed 1: other requests") for text in slo_sa["note"])
    fcfs = shown[shown["scheduler"] == "fcfs"]
    assert set(fcfs["verdict"]) == {"baseline", ""} and not any("partial" in text for text in fcfs["note"])
    # a partial baseline member: every verdict pairs it; the baseline's rows say it is included
    make_partial(results, "st-fcfs-s0")
    frames = study_frames(record, partial_members(record, member_summaries(results, record)))
    (_, frame), (_, whole) = frames[0], study_frames(record)[0]
    judged = frame[frame["judged"]]
    assert judged["pairs_partial"].all() and judged["note"].str.startswith("pairs a partial run at seeds 0, 1").all()
    assert frame[frame["verdict"] == "baseline"]["note"].str.startswith("partial run at seed 0 included").all()
    assert not whole["pairs_partial"].any()  # without summaries: nothing marked
