"""The Demo's bundled study (results/demo/ and its member runs demo-<scheduler>-s<seed>/): complete,
at least 5 seeds fixed in advance, contended; the Demo page's headline numbers are study.json's
statistics formatted by the metric catalog, with intervals, and claim no difference the intervals
do not support; the live rerun is one seed; regeneration replaces only its own folders."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from runners.cli import main
from runners.demo import (
    DEMO_BASELINE,
    DEMO_KV_TOKENS,
    DEMO_RATE_RPS,
    DEMO_SCHEDULERS,
    DEMO_SLOTS,
    DEMO_STUDY_ID,
    LIVE_PREFIX,
    SchedulerResult,
    card_delta,
    card_interval,
    card_verdict,
    clear_demo_results,
    demo_plan,
    headline,
    make_demo_results,
    read_demo_study,
    scheduler_sentence,
)
from runners.errors import SchedlabError
from runners.metrics.catalog import metric
from runners.result_store import read_summary
from tests.integration.test_app import open_page

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "results"
ATTAINMENT = metric("slo_attainment")


@pytest.fixture
def results(monkeypatch, results_dir: Path) -> Path:
    monkeypatch.setattr("runners.result_store.DEFAULT_RESULTS_DIR", results_dir)
    return results_dir


def bundled_record() -> dict:
    return json.loads((BUNDLED / DEMO_STUDY_ID / "study.json").read_text())


def copy_bundle(results: Path) -> None:
    for folder in BUNDLED.glob("demo*"):
        shutil.copytree(folder, results / folder.name)


# -- the bundle -----------------------------------------------------------------------------------
#: static batches of the engine's slots; the predicting schedulers share the warm Gaussian (mcsf not the oracle)
EXPECTED_PARAMS = {
    "static": {"batch_size": DEMO_SLOTS},
    "slo-sa": {"output_predictor": "gaussian"},
    "mcsf": {"output_predictor": "gaussian"},
}


def test_the_bundled_study_has_every_member_done_at_five_or_more_fixed_seeds():
    record = read_demo_study(BUNDLED)
    assert record["status"] == "done" and record["baseline"] == "fcfs"
    seeds = record["seeds"]
    assert len(seeds) >= 5 and seeds == list(range(len(seeds)))  # 0..N-1, fixed in advance
    assert record["schedulers"] == list(DEMO_SCHEDULERS)
    runs = {(run["scheduler"], run["seed"]): run for run in record["runs"]}
    assert set(runs) == {(name, seed) for name in DEMO_SCHEDULERS for seed in seeds}
    waiting_peaks = []
    for (name, seed), run in runs.items():
        assert run["status"] == "done" and run["run_id"] == f"demo-{name}-s{seed}"
        summary = read_summary(BUNDLED / run["run_id"])
        config = json.loads((BUNDLED / run["run_id"] / "config.json").read_text())["config"]
        assert summary["status"] == "done" and summary["scheduler"] == name and summary["completed"] == 1000
        assert config["workload"]["seed"] == seed and config["workload"]["arrival"]["rate"] == DEMO_RATE_RPS
        assert config["engine"]["max_num_seqs"] == DEMO_SLOTS and config["slo"]["preset"] == "paper"
        assert config["engine"]["kv_capacity_tokens"] == DEMO_KV_TOKENS
        if name == DEMO_BASELINE:  # memory binds: the cache fills and the engine preempts at every seed
            kv = pd.read_parquet(BUNDLED / run["run_id"] / "timeseries.parquet")["kv_usage"]
            assert kv.max() > 0.95 and summary["preemptions"] > 0
        assert config["scheduler"]["params"] == EXPECTED_PARAMS.get(name, {})
        waiting_peaks.append(summary["contention"]["waiting_peak"])
    assert min(waiting_peaks) > DEMO_SLOTS  # the setting has contention: requests always queued
    for key in ("slo_attainment", "G"):
        per = record["statistics"][key]["schedulers"]
        assert all(per[name]["n"] == len(seeds) for name in DEMO_SCHEDULERS)
        assert all(pair["n_pairs"] == len(seeds) for pair in record["statistics"][key]["vs_baseline"].values())
    # no other demo folder is bundled (the one-seed demo-<scheduler> runs are gone)
    expected = {DEMO_STUDY_ID} | {run["run_id"] for run in record["runs"]}
    assert {folder.name for folder in BUNDLED.glob("demo*")} == expected


def test_the_bundled_study_is_what_the_demo_setting_plans():
    record = bundled_record()
    plan = demo_plan(record["seeds"])
    assert [run["run_id"] for run in record["runs"]] == [member.run_id for member in plan.members]
    assert {member.scheduler: member.config.scheduler.params for member in plan.members} == {
        name: EXPECTED_PARAMS.get(name, {}) for name in DEMO_SCHEDULERS
    }


# -- the page -------------------------------------------------------------------------------------
def test_demo_page_states_each_headline_with_its_interval(results):
    copy_bundle(results)
    record = bundled_record()
    app = open_page("pages/3_Demo.py")
    n = len(record["seeds"])
    attainment = record["statistics"]["slo_attainment"]
    cards = {card.label: card for card in app.metric[: len(DEMO_SCHEDULERS)]}
    under_cards = [caption.value for caption in app.caption[: len(DEMO_SCHEDULERS)]]
    text = " ".join(markdown.value for markdown in app.markdown)
    for name, under in zip(DEMO_SCHEDULERS, under_cards):
        stats = attainment["schedulers"][name]
        mean, low, high = (ATTAINMENT.format(stats[k]) for k in ("mean", "ci_low", "ci_high"))
        half = ATTAINMENT.format((stats["ci_high"] - stats["ci_low"]) / 2)
        assert cards[name].value == f"{mean}%"
        assert under.startswith(f"± {half} (95% interval {low} to {high}%); ")
        assert f"**{name}** served {mean}% of requests on time (95% interval {low} to {high}%, {n} seeds)" in text
        if name == DEMO_BASELINE:
            assert cards[name].delta == "" and under.endswith("the baseline")
            continue
        pair = attainment["vs_baseline"][name]
        assert f"better at {pair['wins']} of {pair['n_pairs']} paired seeds" in text or pair["diff_mean"] == 0
        assert cards[name].delta == f"{ATTAINMENT.format_change(pair['diff_mean'])} vs fcfs"
        seeds = f"({pair['wins']} of {pair['n_pairs']} seeds better)"
        if pair["verdict"] == "no difference":
            assert under.endswith(f"no clear difference from fcfs {seeds}")
        else:
            assert under.endswith(f"clearly {pair['verdict']} than fcfs {seeds}")
    # the headline names as clearly better exactly the schedulers whose paired interval is above 0
    title = next(markdown.value for markdown in app.markdown if markdown.value.startswith("### "))
    better = [name for name, pair in attainment["vs_baseline"].items() if pair["verdict"] == "better"]
    assert all(pair["ci_low"] > 0 for name, pair in attainment["vs_baseline"].items() if name in better)
    clearly_more = title.split("served clearly more")[0] if better else ""
    assert sorted(clearly_more.replace("*", "").replace("### ", "").replace(",", " ").split()) == sorted(better)
    assert f"{n} seeds" in title
    e2e = record["statistics"]["e2e_s.mean"]["schedulers"]
    assert [card.value for card in app.metric[len(DEMO_SCHEDULERS) :]] == [
        f"{metric('e2e_s.mean').format(e2e[name]['mean'])} s" for name in DEMO_SCHEDULERS
    ]
    captions = " ".join(caption.value for caption in app.caption)
    assert "One seed only (seed 0)" in captions  # the memory sawtooth is one seed, and says so
    charts = app.get("plotly_chart")
    assert len(charts) == 3
    kv = json.loads(charts[2].proto.spec)["layout"]
    assert kv["title"]["text"] == "KV-cache usage over time" and kv["yaxis"]["range"] == [0, 100]  # % of the cache
    links = [link.proto for link in app.get("page_link")]  # the link opens exactly this study on Results
    assert [(link.page, link.query_string) for link in links] == [("Results", f"study={record['study_id']}")]


def test_the_live_rerun_is_one_seed_of_the_study(results, monkeypatch):
    started = []
    monkeypatch.setattr("runners.jobs.start_job", lambda spec, root: started.append(spec) or root / ".jobs" / "x")
    copy_bundle(results)
    app = open_page("pages/3_Demo.py")
    app.selectbox(key="demo-seed").set_value(3).run()
    app.button[0].click().run()
    (spec,) = started
    assert "one seed of the study" in spec.label and "not the verdict" in spec.label
    assert [config.scheduler.name for config in spec.runs] == list(DEMO_SCHEDULERS)
    assert {config.workload.seed for config in spec.runs} == {3}
    assert all(
        str(config.run_id).startswith(LIVE_PREFIX) and str(config.run_id).endswith("-s3") for config in spec.runs
    )
    assert not any(config.trials.seeds for config in spec.runs)


def test_no_clear_difference_is_said_and_no_winner_is_claimed():
    """A scheduler ahead on average whose interval includes 0 is 'no clear difference'."""
    pair = {
        "n_pairs": 5,
        "dropped": 0,
        "diff_mean": 0.04,
        "ci_low": -0.01,
        "ci_high": 0.09,
        "wins": 3,
        "verdict": "no difference",
    }
    result = SchedulerResult("slo-sa", 5, 0.70, 0.60, 0.80, pair)
    sentence = scheduler_sentence("slo_attainment", result, "fcfs", "served {value} of requests on time")
    assert sentence == (
        "**slo-sa** served 70.0% of requests on time (95% interval 60.0 to 80.0%, 5 seeds): "
        "**no clear difference** from fcfs: 4.0 points more on average (95% interval -1.0 to +9.0 "
        "points); better at 3 of 5 paired seeds."
    )
    assert card_delta("slo_attainment", result, "fcfs") == "+4.0 pts vs fcfs"
    assert card_verdict(result, "fcfs") == "no clear difference from fcfs (3 of 5 seeds better)"
    assert card_interval("slo_attainment", result) == "± 10.0 (95% interval 60.0 to 80.0%)"
    record = {
        "baseline": "fcfs",
        "schedulers": ["fcfs", "slo-sa"],
        "seeds": [0, 1, 2, 3, 4],
        "statistics": {
            "slo_attainment": {
                "schedulers": {
                    "fcfs": {"n": 5, "mean": 0.66, "ci_low": 0.5, "ci_high": 0.8},
                    "slo-sa": {"n": 5, "mean": 0.70, "ci_low": 0.6, "ci_high": 0.8},
                },
                "vs_baseline": {"slo-sa": pair},
            }
        },
    }
    assert headline(record) == (
        "No strategy served clearly more requests on time than fcfs; **slo-sa** no clear "
        "difference (95% confidence, 5 seeds)."
    )


def test_demo_page_without_the_bundle_says_how_to_make_it(results):
    (results / "demo-fcfs-s0").mkdir()  # a stray member without its study
    app = open_page("pages/3_Demo.py")
    assert not app.exception
    assert "is missing" in app.warning[0].value and "python -m runners demo" in app.warning[0].value
    assert not app.metric


@pytest.mark.parametrize(
    "record, expected",
    [
        ("not json", "damaged"),
        (
            '{"schema_version": 1, "study_id": "demo", "baseline": "fcfs", "runs": [], "statistics": {}, '
            '"status": "running"}',
            "not finished",
        ),
        (
            '{"schema_version": 1, "study_id": "demo", "baseline": "static", "runs": [], "statistics": {}, '
            '"status": "done"}',
            "not the demo's study",
        ),
        (
            '{"schema_version": 1, "study_id": "demo", "baseline": "fcfs", "runs": [], "statistics": {}, '
            '"status": "done"}',
            "statistics of 'slo_attainment' are missing",
        ),
    ],
)
def test_a_damaged_study_record_is_one_line_naming_the_file(results, record, expected):
    (results / "demo").mkdir()
    (results / "demo" / "study.json").write_text(record)
    with pytest.raises(SchedlabError, match=expected) as info:
        read_demo_study(results)
    assert "python -m runners demo" in str(info.value) and "\n" not in str(info.value)


# -- regeneration ---------------------------------------------------------------------------------
def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): (path.read_bytes() if path.is_file() and not path.is_symlink() else b"")
        for path in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize(
    "foreign", ["study-link", "study-file", "study-extra", "member-link", "member-file", "member-not-a-run"]
)
def test_regeneration_refuses_a_foreign_folder_before_removing_anything(results, tmp_path, foreign, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")
    (results / "demo-fcfs-s1").mkdir()  # an own member: would be replaced
    (results / "demo-fcfs-s1" / "summary.json").write_text("{}")
    (results / f"{LIVE_PREFIX}20260101-000000-fcfs-s0").mkdir()  # a live rerun: never touched
    if foreign == "study-link":
        (results / "demo").symlink_to(outside, target_is_directory=True)
    elif foreign == "study-file":
        (results / "demo").write_text("a file\n")
    elif foreign == "study-extra":
        (results / "demo").mkdir()
        (results / "demo" / "notes.txt").write_text("mine\n")
    elif foreign == "member-link":
        (results / "demo-slo-sa-s4").symlink_to(outside, target_is_directory=True)
    elif foreign == "member-file":
        (results / "demo-static-s0").write_text("a file\n")
    else:
        (results / "demo-static-s0").mkdir()
        (results / "demo-static-s0" / "thesis.tex").write_text("mine\n")
    before, before_outside = snapshot(results), snapshot(outside)
    code = main(["demo", "--out", str(results)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(("error: demo:", "error: replace:")), err
    assert len(err.strip().splitlines()) == 1
    assert snapshot(results) == before and snapshot(outside) == before_outside


def test_regeneration_replaces_its_own_study_and_nothing_else(results):
    """Tiny demo studies (30 requests): a second one replaces the first, and members the first
    listed that the second does not plan are removed too; other runs stay."""
    (results / "other-run").mkdir()
    (results / "other-run" / "summary.json").write_text("{}")
    first = make_demo_results(results, seeds=(0, 1), requests=30)
    assert first.record["status"] == "done" and len(first.record["runs"]) == 2 * len(DEMO_SCHEDULERS)
    old_summary = read_summary(results / "demo-fcfs-s0")
    second = make_demo_results(results, seeds=(0,), requests=30)
    assert second.record["seeds"] == [0] and second.record["status"] == "done"
    names = {path.name for path in results.iterdir()}
    assert names == {"other-run", "demo"} | {f"demo-{name}-s0" for name in DEMO_SCHEDULERS}
    again = read_summary(results / "demo-fcfs-s0")  # same seed, same results: the design is deterministic
    assert again["slo_attainment"] == old_summary["slo_attainment"]
    assert again["started_at"] >= old_summary["started_at"]


def test_a_damaged_own_study_folder_is_replaced(results):
    (results / "demo").mkdir()
    (results / "demo" / "study.json").write_text("garbage")
    removed = clear_demo_results(results, demo_plan((0,), requests=30))
    assert removed == ["demo"] and not os.path.lexists(results / "demo")
