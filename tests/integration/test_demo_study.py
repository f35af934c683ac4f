"""The Demo's bundled studies, one per load regime (results/demo-below/, results/demo-overload/ and
their member runs <study id>-<scheduler>-s<seed>/): complete, seeds 0..9 fixed in advance, every
scheduler at registry defaults (no oracle) except static's batch size; the below-capacity rate is
80% of a capacity that measure_capacity() reproduces; the page's headline numbers are study.json's
statistics formatted by the metric catalog; the live rerun is one seed of one regime;
regeneration replaces only its own folders (and the earlier one-regime bundle)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from runners.app.cli import main
from runners.errors import SchedlabError
from runners.store.result_store import read_summary
from runners.views.demo import (
    BELOW_RATE_RPS,
    BELOW_SHARE,
    CAPACITY_SEEDS,
    DEMO_BASELINE,
    DEMO_KV_TOKENS,
    DEMO_REGIMES,
    DEMO_SCHEDULERS,
    DEMO_SEEDS,
    DEMO_SLOTS,
    DEMO_STUDY_ID,
    HEADLINE_KEYS,
    LIVE_PREFIX,
    MEASURED_CAPACITY_RPS,
    OVERLOAD_RATE_RPS,
    clear_demo_results,
    demo_plan,
    demo_plans,
    demo_regime,
    live_rerun_configs,
    make_demo_results,
    make_demo_studies,
    measure_capacity,
    read_demo_study,
)

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "results"
BELOW, OVERLOAD = (demo_regime(key) for key in ("below", "overload"))


@pytest.fixture
def results(monkeypatch, results_dir: Path) -> Path:
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    return results_dir


def bundled_record(regime) -> dict:
    return json.loads((BUNDLED / regime.study_id / "study.json").read_text())


# -- the bundle -----------------------------------------------------------------------------------
#: static batches of the engine's slots; every other parameter is the registry's default (no oracle)
EXPECTED_PARAMS = {"static": {"batch_size": DEMO_SLOTS}}


@pytest.mark.parametrize("regime", DEMO_REGIMES, ids=lambda regime: regime.key)
def test_each_bundled_study_has_every_member_done_at_the_fixed_seeds(regime):
    record = read_demo_study(BUNDLED, regime)
    assert record.status == "done" and record.baseline == "fcfs" and record.study_id == regime.study_id
    assert record.seeds == list(DEMO_SEEDS) == list(range(10))  # 0..9, fixed in advance
    assert record.schedulers == list(DEMO_SCHEDULERS)
    assert record.oracles == {}  # no scheduler used an oracle
    runs = {(run.scheduler, run.seed): run for run in record.runs}
    assert set(runs) == {(name, seed) for name in DEMO_SCHEDULERS for seed in DEMO_SEEDS}
    waiting_peaks: dict[str, list[float]] = {}
    for (name, seed), run in runs.items():
        assert run.status == "done" and run.run_id == f"{regime.study_id}-{name}-s{seed}"
        summary = read_summary(BUNDLED / run.run_id)
        config = json.loads((BUNDLED / run.run_id / "config.json").read_text())["config"]
        assert summary.status == "done" and summary.scheduler == name and summary.completed == 1000
        assert summary.oracle == []
        assert config["workload"]["seed"] == seed and config["workload"]["arrival"]["rate"] == regime.rate_rps
        assert config["workload"]["arrival"]["process"] == "poisson"
        assert config["engine"]["max_num_seqs"] == DEMO_SLOTS and config["slo"]["preset"] == "paper"
        assert config["engine"]["kv_capacity_tokens"] == DEMO_KV_TOKENS
        assert config["scheduler"]["params"] == EXPECTED_PARAMS.get(name, {})
        if name == DEMO_BASELINE and regime is OVERLOAD:  # memory binds: the cache fills, the engine preempts
            kv = pd.read_parquet(BUNDLED / run.run_id / "timeseries.parquet")["kv_usage"]
            assert kv.max() > 0.95 and summary.preemptions is not None and summary.preemptions > 0
        assert summary.contention is not None and summary.contention.waiting_peak is not None
        waiting_peaks.setdefault(name, []).append(summary.contention.waiting_peak)
    if regime is OVERLOAD:  # requests always queued
        assert min(min(peaks) for peaks in waiting_peaks.values()) > DEMO_SLOTS
    else:  # below capacity: fcfs's queue stays short at every seed
        assert max(waiting_peaks[DEMO_BASELINE]) < DEMO_SLOTS
    for key in HEADLINE_KEYS:
        per = record.statistics[key].schedulers
        assert all(per[name].n == len(DEMO_SEEDS) for name in DEMO_SCHEDULERS), key
        assert all(pair.n_pairs == len(DEMO_SEEDS) for pair in record.statistics[key].vs_baseline.values())


def test_the_bundle_holds_the_regimes_studies_and_nothing_else_of_the_demo():
    """No other demo folder is bundled: the earlier one-regime demo/ and demo-<scheduler>-s<seed> are gone."""
    expected = set()
    for regime in DEMO_REGIMES:
        record = bundled_record(regime)
        expected |= {regime.study_id} | {run["run_id"] for run in record["runs"]}
    assert {folder.name for folder in BUNDLED.glob("demo*")} == expected
    assert not (BUNDLED / DEMO_STUDY_ID).exists()


@pytest.mark.parametrize("regime", DEMO_REGIMES, ids=lambda regime: regime.key)
def test_the_bundled_study_is_what_the_regime_plans(regime):
    record = bundled_record(regime)
    plan = demo_plan(record["seeds"], regime=regime)
    assert plan.study_id == regime.study_id
    assert [run["run_id"] for run in record["runs"]] == [member.run_id for member in plan.members]
    assert {member.scheduler: member.config.scheduler.params for member in plan.members} == {
        name: EXPECTED_PARAMS.get(name, {}) for name in DEMO_SCHEDULERS
    }
    assert {member.config.workload.arrival.rate for member in plan.members} == {regime.rate_rps}


def test_the_regimes_rates_follow_the_measured_capacity():
    """The below-capacity rate is 80% of what measure_capacity() gives (rounded to 0.1 req/s),
    measured at exploration seeds that are not study seeds; the overload rate is above capacity.
    A simulator change that moves the capacity fails here: measure again, and rerun the demo."""
    assert not set(CAPACITY_SEEDS) & set(DEMO_SEEDS)
    measured = measure_capacity()
    assert measured.seeds == CAPACITY_SEEDS
    assert measured.capacity_rps == pytest.approx(MEASURED_CAPACITY_RPS, abs=5e-4), str(measured)
    assert BELOW_RATE_RPS == round(BELOW_SHARE * MEASURED_CAPACITY_RPS, 1) and BELOW.rate_rps == BELOW_RATE_RPS
    assert OVERLOAD.rate_rps == OVERLOAD_RATE_RPS > measured.capacity_rps
    assert 0.75 < BELOW.load < 0.85 and OVERLOAD.load > 1.4
    assert f"{MEASURED_CAPACITY_RPS:.3f}" in str(measured) or f"{measured.capacity_rps:.3f}" in str(measured)


def test_the_combined_plan_counts_every_regimes_runs():
    """``python -m runners demo`` sizes its progress bar by demo_plan(): every regime's runs."""
    plan = demo_plan()
    assert [member.run_id for member in plan.members] == [
        member.run_id for regime_plan in demo_plans() for member in regime_plan.members
    ]
    assert len(plan.members) == len(DEMO_REGIMES) * len(DEMO_SCHEDULERS) * len(DEMO_SEEDS)


def test_the_live_rerun_is_one_seed_of_one_regime():
    configs = live_rerun_configs(3, 20.0, stamp="20260101-000000", regime="below")
    assert [config.scheduler.name for config in configs] == list(DEMO_SCHEDULERS)
    assert {config.workload.seed for config in configs} == {3}
    assert {config.workload.arrival.rate for config in configs} == {BELOW_RATE_RPS}
    assert [str(config.run_id) for config in configs] == [
        f"{LIVE_PREFIX}20260101-000000-below-{name}-s3" for name in DEMO_SCHEDULERS
    ]
    assert not any(config.trials.seeds for config in configs)


def test_an_unknown_regime_is_one_line():
    with pytest.raises(SchedlabError, match="no regime 'peak'; expected one of: below, overload"):
        demo_regime("peak")


# -- reading it -----------------------------------------------------------------------------------
def test_a_missing_regime_says_how_to_make_it_and_names_the_earlier_bundle(results):
    with pytest.raises(SchedlabError) as info:
        read_demo_study(results, "below")
    assert "is missing" in str(info.value) and "python -m runners demo" in str(info.value)
    assert "earlier one-regime" not in str(info.value)
    (results / DEMO_STUDY_ID).mkdir()
    (results / DEMO_STUDY_ID / "study.json").write_text("{}")
    with pytest.raises(SchedlabError, match="results/demo/ is the earlier one-regime demo"):
        read_demo_study(results, "below")


@pytest.mark.parametrize(
    "record, expected",
    [
        ("not json", "damaged"),
        (
            '{"schema_version": 1, "study_id": "demo-below", "baseline": "fcfs", "runs": [], "statistics": {}, '
            '"status": "running"}',
            "not finished",
        ),
        (
            '{"schema_version": 1, "study_id": "demo-below", "baseline": "static", "runs": [], "statistics": {}, '
            '"status": "done"}',
            "not the demo's study",
        ),
        (
            '{"schema_version": 1, "study_id": "demo-overload", "baseline": "fcfs", "runs": [], "statistics": {}, '
            '"status": "done"}',
            "not the demo's study",
        ),
        (
            '{"schema_version": 1, "study_id": "demo-below", "baseline": "fcfs", "runs": [], "statistics": {}, '
            '"status": "done"}',
            "statistics of 'slo_attainment' are missing",
        ),
    ],
)
def test_a_damaged_study_record_is_one_line_naming_the_file(results, record, expected):
    (results / "demo-below").mkdir()
    (results / "demo-below" / "study.json").write_text(record)
    with pytest.raises(SchedlabError, match=expected) as info:
        read_demo_study(results, "below")
    assert "python -m runners demo" in str(info.value) and "\n" not in str(info.value)


# -- regeneration ---------------------------------------------------------------------------------
def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): (path.read_bytes() if path.is_file() and not path.is_symlink() else b"")
        for path in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize(
    "foreign",
    [
        "study-link",
        "study-file",
        "study-extra",
        "member-link",
        "member-file",
        "member-not-a-run",
        "legacy-study-extra",
        "legacy-member-link",
    ],
)
def test_regeneration_refuses_a_foreign_folder_before_removing_anything(results, tmp_path, foreign, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine\n")
    (results / "demo-below-fcfs-s1").mkdir()  # an own member: would be replaced
    (results / "demo-below-fcfs-s1" / "summary.json").write_text("{}")
    (results / "demo-fcfs-s1").mkdir()  # a member of the earlier one-regime bundle: would be removed
    (results / "demo-fcfs-s1" / "summary.json").write_text("{}")
    (results / f"{LIVE_PREFIX}20260101-000000-below-fcfs-s0").mkdir()  # a live rerun: never touched
    if foreign == "study-link":
        (results / "demo-overload").symlink_to(outside, target_is_directory=True)
    elif foreign == "study-file":
        (results / "demo-below").write_text("a file\n")
    elif foreign == "study-extra":
        (results / "demo-overload").mkdir()
        (results / "demo-overload" / "notes.txt").write_text("mine\n")
    elif foreign == "member-link":
        (results / "demo-overload-slo-sa-s4").symlink_to(outside, target_is_directory=True)
    elif foreign == "member-file":
        (results / "demo-below-static-s0").write_text("a file\n")
    elif foreign == "member-not-a-run":
        (results / "demo-overload-static-s0").mkdir()
        (results / "demo-overload-static-s0" / "thesis.tex").write_text("mine\n")
    elif foreign == "legacy-study-extra":
        (results / "demo").mkdir()
        (results / "demo" / "notes.txt").write_text("mine\n")
    else:
        (results / "demo-mcsf-s9").symlink_to(outside, target_is_directory=True)
    before, before_outside = snapshot(results), snapshot(outside)
    code = main(["demo", "--out", str(results)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(("error: demo:", "error: replace:")), err
    assert len(err.strip().splitlines()) == 1
    assert snapshot(results) == before and snapshot(outside) == before_outside


def test_regeneration_replaces_its_own_studies_and_nothing_else(results):
    """Tiny demo studies (10 requests): a second one replaces the first, and members the first
    listed that the second does not plan are removed too; other runs stay."""
    (results / "other-run").mkdir()
    (results / "other-run" / "summary.json").write_text("{}")
    first = make_demo_studies(results, seeds=(0, 1), requests=10)
    assert [result.study_id for result in first] == [regime.study_id for regime in DEMO_REGIMES]
    assert all(result.record.status == "done" for result in first)
    assert all(len(result.record.runs) == 2 * len(DEMO_SCHEDULERS) for result in first)
    old_summary = read_summary(results / "demo-below-fcfs-s0")
    second = make_demo_results(results, seeds=(0,), requests=10)  # the one a caller reports: the last
    assert second.study_id == "demo-overload" and second.record.seeds == [0]
    names = {path.name for path in results.iterdir()}
    assert names == {"other-run"} | {
        name
        for regime in DEMO_REGIMES
        for name in [regime.study_id] + [f"{regime.study_id}-{scheduler}-s0" for scheduler in DEMO_SCHEDULERS]
    }
    again = read_summary(results / "demo-below-fcfs-s0")  # same seed, same results: the design is deterministic
    assert again.slo_attainment == old_summary.slo_attainment
    assert again.started_at is not None and old_summary.started_at is not None
    assert again.started_at >= old_summary.started_at


def test_a_stop_ends_the_regimes_after_the_cancelled_one(results):
    studies = make_demo_studies(results, seeds=(0,), requests=10, should_stop=lambda: True)
    assert [(result.study_id, result.record.status) for result in studies] == [("demo-below", "cancelled")]
    assert not (results / "demo-overload").exists()


def test_the_earlier_one_regime_bundle_is_removed(results):
    """results/demo/ with its record and its members demo-<scheduler>-s<seed> is the demo's own:
    regeneration removes it (members its record lists, and those at the planned seeds)."""
    (results / "demo").mkdir()
    listed = [f"demo-{name}-s{seed}" for name in ("fcfs", "mcsf") for seed in (0, 12)]
    (results / "demo" / "study.json").write_text(
        json.dumps(
            {
                "schema_version": 3,
                "study_id": "demo",
                "baseline": "fcfs",
                "status": "done",
                "runs": [{"run_id": name} for name in listed],
                "statistics": {},
            }
        )
    )
    for name in [*listed, "demo-static-s0", "demo-notes"]:
        (results / name).mkdir()
        (results / name / "summary.json").write_text("{}")
    removed = clear_demo_results(results, demo_plans((0,), requests=10))
    assert set(removed) == {"demo", *listed, "demo-static-s0"}
    assert {path.name for path in results.iterdir()} == {"demo-notes"}  # not a demo member id: kept


def test_a_damaged_own_study_folder_is_replaced(results):
    (results / "demo-below").mkdir()
    (results / "demo-below" / "study.json").write_text("garbage")
    removed = clear_demo_results(results, demo_plans((0,), requests=10))
    assert removed == ["demo-below"] and not os.path.lexists(results / "demo-below")


def test_a_leftover_of_an_interrupted_study_stops_it(results):
    (results / ".demo-overload.creating").mkdir()
    (results / "demo-below-fcfs-s0").mkdir()
    with pytest.raises(SchedlabError, match="left from an interrupted study"):
        clear_demo_results(results, demo_plans((0,), requests=10))
    assert (results / "demo-below-fcfs-s0").is_dir()
