"""bench/reproduce.py and bench/reproduction_study.py: the verdict rule, the per-seed quantities
and a row's statistics with hand-computed numbers, the real-engine translation, the plans of both
tables, and a tiny paired run on the simulator."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from bench import reproduce
from bench.reproduction_study import (
    LIVELOCK_TEXT,
    Arm,
    Claim,
    Measure,
    Results,
    RowSpec,
    capacity_at_top,
    compare_values,
    compute_row,
    magnitude_note,
    measure_values,
    plan_arms,
    run_rows,
    slope,
    unique_arms,
    verdict,
)
from runners.metrics.seed_statistics import RelativeChange  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

T_975_2 = 4.302652729911275  # Student t, 97.5th percentile, 2 degrees of freedom
BASE = {0: 1.0, 1: 2.0, 2: 3.0}
TIGHT = {0: 2.0, 1: 3.1, 2: 4.0}  # differences 1.0, 1.1, 1.0
LOOSE = {0: 2.0, 1: 3.0, 2: 5.0}  # differences 1, 1, 2
NO_RANGE = Claim("no number")


def summary(**values) -> dict:
    return {"G": values.get("G"), "slo_attainment": values.get("att"), "e2e_s": {"mean": values.get("e2e")}}


# -- the verdict rule ------------------------------------------------------------------------------
def test_reproduced_when_the_interval_excludes_no_change_on_the_papers_side():
    comparison = compare_values(BASE, TIGHT, higher_is_better=True)
    # differences 1.0, 1.1, 1.0: mean 31/30, s = sqrt(3/900), half = t * s / sqrt(3)
    half = T_975_2 * math.sqrt(3 / 900) / math.sqrt(3)
    assert comparison.paired.diff_mean == pytest.approx(31 / 30)
    assert comparison.paired.ci_low == pytest.approx(31 / 30 - half)  # 0.8899
    assert comparison.paired.ci_high == pytest.approx(31 / 30 + half)  # 1.1768
    assert comparison.paired.wins == 3
    assert comparison.relative.change == pytest.approx((9.1 / 3) / 2 - 1)  # +51.7%
    result, reason = verdict(comparison, NO_RANGE)
    assert result == "reproduced"
    assert reason == "ours better: the interval excludes no change (3 of 3 seeds better)"
    # every resample's ratio of means is at least 4/3 - 1 (all seeds 2: 4 / 3), above +28%
    result, reason = verdict(comparison, Claim("+8% to +28%", 0.08, 0.28), higher_is_better=True)
    assert result == "reproduced" and reason.endswith("; a larger gain than the paper's +8% to +28%")


def test_not_reproduced_when_ours_is_worse_in_the_quantitys_direction():
    comparison = compare_values(BASE, TIGHT, higher_is_better=False)  # e.g. a latency that grew
    result, reason = verdict(comparison, Claim("-10% to -30%", -0.3, -0.1), higher_is_better=False)
    assert result == "not reproduced"
    assert reason.startswith("ours worse: the interval excludes no change on the other side (0 of 3 seeds better)")
    assert reason.endswith("a smaller gain than the paper's -30% to -10%")


def test_inconclusive_when_the_interval_contains_no_change():
    comparison = compare_values(BASE, LOOSE, higher_is_better=True)
    # differences 1, 1, 2: mean 4/3, s = sqrt(1/3); the interval [-0.101, 2.768] holds 0
    half = T_975_2 * math.sqrt(1 / 3) / math.sqrt(3)
    assert comparison.paired.ci_low == pytest.approx(4 / 3 - half)
    assert comparison.paired.ci_low < 0 < comparison.paired.ci_high
    assert comparison.paired.wins == 3  # every seed better, yet no verdict: the spread is too wide
    assert verdict(comparison, NO_RANGE) == ("inconclusive", "the interval contains no change")


def test_inconclusive_when_identical_or_without_two_pairs():
    assert verdict(compare_values(BASE, dict(BASE), True), NO_RANGE) == ("inconclusive", "identical at every seed")
    one_pair = compare_values({0: 1.0, 1: None}, {0: 2.0, 1: 3.0}, True)
    assert one_pair.paired.n_pairs == 1 and one_pair.paired.dropped == 1
    assert verdict(one_pair, NO_RANGE) == ("inconclusive", "1 seed(s) with both values: no interval")


def test_magnitude_note_only_when_the_whole_interval_is_outside_the_papers_range():
    table_one = Claim("+8% to +28%", 0.08, 0.28)
    assert magnitude_note(RelativeChange(3, 0.2, 0.1, 0.25), table_one) is None
    assert magnitude_note(RelativeChange(3, 0.2, 0.25, 0.3), table_one) is None  # overlaps at 0.25-0.28
    assert (
        magnitude_note(RelativeChange(3, 0.05, 0.01, 0.07), table_one) == "a smaller gain than the paper's +8% to +28%"
    )
    assert (
        magnitude_note(RelativeChange(2, 0.5, None, None), table_one) == "a larger gain than the paper's +8% to +28%"
    )  # no interval: the point
    eight_times = Claim(">= 8x", None, -0.875)  # 003 low demand: slope down by at least 87.5%
    assert (
        magnitude_note(RelativeChange(3, -0.5, -0.6, -0.4), eight_times, higher_is_better=False)
        == "a smaller gain than the paper's <= -87.5%"
    )
    assert magnitude_note(RelativeChange(3, -0.9, -0.95, -0.88), eight_times, higher_is_better=False) is None
    assert magnitude_note(RelativeChange(3, 0.5, 0.4, 0.6), NO_RANGE) is None


# -- per-seed quantities ---------------------------------------------------------------------------
def test_slope_is_the_least_squares_slope():
    assert slope((100, 200, 400), (10.0, 20.0, 40.0)) == pytest.approx(0.1)
    assert slope((1, 2, 3), (1.0, 3.0, 2.0)) == pytest.approx(0.5)  # sum dx*dy = 1, sum dx^2 = 2


def test_capacity_per_seed_from_a_rate_sweep():
    arm = Arm("cap", "fcfs", rates=(0.5, 1.0, 1.5))
    measure = Measure("static", (arm,), "capacity", "slo_attainment")
    results = Results()
    for seed, attainments in ((0, (1.0, 0.95, 0.5)), (1, (1.0, 0.92, 0.91))):
        for rate, value in zip(arm.rates, attainments):
            results.outcomes[("cap", seed, rate)] = ("done", summary(att=value), None)
    results.outcomes[("cap", 2, 0.5)] = ("done", summary(att=1.0), None)
    results.outcomes[("cap", 2, 1.0)] = ("failed", None, "stalled: the same 3 requests ...")
    results.outcomes[("cap", 2, 1.5)] = ("done", summary(att=0.2), None)
    values, why = measure_values(measure, results, [0, 1, 2])
    # seed 0: 1.0 meets 90%, 1.5 does not: linear between, 1.0 + (0.95 - 0.9) / (0.95 - 0.5) * 0.5
    assert values[0] == pytest.approx(1.0 + 0.05 / 0.45 * 0.5)  # 1.0556 req/s
    assert values[1] == 1.5  # every rate met 90%: the top of the sweep, a lower bound
    assert values[2] is None and why[2].startswith("cap: failed: stalled:")
    assert capacity_at_top(measure, values) == 1


def test_a_row_from_paired_runs():
    base, ours = Arm("base", "fcfs"), Arm("ours", "slo-sa")
    results = Results()
    for seed in BASE:
        results.outcomes[("base", seed, None)] = ("done", summary(G=BASE[seed], att=0.5, e2e=10.0), None)
        results.outcomes[("ours", seed, None)] = ("done", summary(G=TIGHT[seed], att=0.75, e2e=8.0), None)
    spec = RowSpec(
        "A",
        "setting",
        Measure("fcfs", (base,)),
        Measure("slo-sa", (ours,)),
        Claim("G +0.3% to +30%", 0.003, 0.30),
        also=("slo_attainment", "e2e_s.mean"),
    )
    row = compute_row(spec, results, [0, 1, 2])
    assert row["baseline_mean"] == pytest.approx(2.0) and row["ours_mean"] == pytest.approx(9.1 / 3)
    assert row["diff_mean"] == pytest.approx(31 / 30)
    assert row["k_of_n"] == "3/3" and row["n_pairs"] == 3
    assert row["change"].startswith("+51.7% [")
    assert row["verdict"] == "reproduced"
    # every resampled ratio of means is at least 4/3 - 1 (all seeds 2), above +30%
    assert row["reason"].endswith("a larger gain than the paper's +0.3% to +30%")
    assert row["also"] == "SLO attainment (%) +50.0% [+50.0, +50.0]; E2E mean (s) -20.0% [-20.0, -20.0]"


def test_a_livelocking_baseline_is_said_not_numbered():
    counts = (10, 20)
    base = tuple(Arm(f"ap-n{n}", "alpha-protect") for n in counts)
    ours = tuple(Arm(f"mc-n{n}", "mcsf") for n in counts)
    results = Results()
    for seed in range(3):
        for n, arm in zip(counts, ours):
            results.outcomes[(arm.name, seed, None)] = ("done", summary(e2e=n / 10), None)
        results.outcomes[(base[0].name, seed, None)] = ("done", summary(e2e=1.0), None)
        results.outcomes[(base[1].name, seed, None)] = ("failed", None, "stalled: alpha-protect: cleared twice")
    spec = RowSpec(
        "D",
        "high",
        Measure("alpha-protect", base, "slope", "e2e_s.mean", counts),
        Measure("mcsf", ours, "slope", "e2e_s.mean", counts),
        Claim("~3x", -2 / 3, -2 / 3),
    )
    row = compute_row(spec, results, [0, 1, 2])
    assert row["baseline"] == f"{LIVELOCK_TEXT} at 3 seed(s)"
    assert row["ours"].startswith("0.1000 s/req")  # (2.0 - 1.0) / (20 - 10)
    assert row["verdict"] == "inconclusive"
    assert row["reason"] == f"0 seed(s) with both values: no interval; baseline: {LIVELOCK_TEXT} at 3 seed(s)"


# -- the real engine's translation -----------------------------------------------------------------
def test_real_target_holds_a_smaller_max_batch_in_the_client():
    target = reproduce.RealTarget(["http://127.0.0.1:8000/v1"], 64, None, {"filters": {"max_total_tokens": 256}})
    config = target(Arm("a", "fcfs", {}, {"max_num_seqs": 4}, {"requests": 10}))
    assert config["scheduler"] == {"name": "fcfs", "params": {"max_in_flight": 4}}
    assert config["engine"]["kind"] == "openai" and config["workload"]["filters"] == {"max_total_tokens": 256}
    static = target(Arm("s", "static", {"batch_size": 4}, {"max_num_seqs": 4, "run_to_completion": True}))
    assert static["scheduler"]["params"] == {"batch_size": 4}
    assert target(Arm("d", "dynamic-mem", {"b_max": 64}, {"max_num_seqs": 64}))["scheduler"]["params"] == {"b_max": 64}
    with pytest.raises(ValueError, match="no cap of 4"):
        target(Arm("x", "slo-sa", {}, {"max_num_seqs": 4}))
    with pytest.raises(ValueError, match="run-to-completion"):
        target(Arm("x", "fcfs", {}, {"run_to_completion": True}))
    with pytest.raises(ValueError, match="KV capacity"):
        target(Arm("x", "fcfs", {}, {"kv_capacity_tokens": 3072}))
    with pytest.raises(ValueError, match="priority"):
        target(Arm("x", "slo-sa", {"max_batch": 64}, {"scheduling_policy": "priority"}))


def test_real_rows_come_in_the_simulator_tables_order():
    rows = [
        {"scenario": name}
        for name in (
            "A slo-sa vs fcfs",
            "B dynamic-sla vs static (capacity)",
            "Baton continuous vs static batches",
            "A slo-sa oracle vs fcfs",
            "D mcsf vs alpha-protect",
            "B dynamic-mem vs static max batch",
            "C scls vs fcfs uncapped",
        )
    ]
    assert [row["scenario"] for row in reproduce.in_table_order(rows)] == [
        "A slo-sa vs fcfs",
        "A slo-sa oracle vs fcfs",
        "B dynamic-sla vs static (capacity)",
        "B dynamic-mem vs static max batch",
        "C scls vs fcfs uncapped",
        "D mcsf vs alpha-protect",
        "Baton continuous vs static batches",
    ]


# -- the plans -------------------------------------------------------------------------------------
def test_the_simulator_table_plans_every_row_with_valid_settings():
    """Every arm's config and parameters pass the registry (plan_study checks them), at the full
    scale: 10 seeds, the nine 004 settings, capacity steps of 0.5 req/s from 0.5 to 8."""
    scale = reproduce.SIM_SCALE
    specs = reproduce.sim_rows(scale)
    members, keys = plan_arms(unique_arms(specs), list(range(scale["seeds"])), reproduce.sim_config)
    assert scale["seeds"] == 10
    settings = {spec.setting.split(";")[0] for spec in specs if spec.scenario == "A slo-sa vs fcfs"}
    assert len(settings) == 9
    rates = scale["b_rates"]
    assert rates[0] == 0.5 and rates[-1] == 8.0 and all(b - a == 0.5 for a, b in zip(rates, rates[1:]))
    assert len(keys) == len(members) == len({member.run_id for member in members})
    assert sum(1 for spec in specs if spec.scenario.startswith("Baton")) == 5
    slots = {member.config.engine.max_num_seqs for member in members if member.scheduler == "dynamic-mem"}
    assert slots == {scale["b_slots"]}


def test_the_quick_table_plans():
    specs = reproduce.sim_rows(reproduce.QUICK_SCALE)
    members, _ = plan_arms(unique_arms(specs), [0, 1, 2], reproduce.sim_config)
    assert len(members) == 117  # 3 seeds x 39 arms, 18 of them D: (mcsf + 8 baselines) x 2 counts
    d_params = {
        (m.scheduler, tuple(sorted(m.config.scheduler.params.items()))) for m in members if m.run_id.startswith("d-")
    }
    assert len(d_params) == 1 + len(reproduce.D_BASELINES)  # every baseline setting is its own arm


# -- a tiny paired run -----------------------------------------------------------------------------
def test_a_tiny_baton_row_runs_paired_on_the_simulator(tmp_path: Path):
    scale = {"baton_requests": 6, "baton_batches": (2,)}
    specs = reproduce.rows_baton(scale, reproduce.BATON_FILTERS)
    rows, results = run_rows(specs, [0, 1, 2], reproduce.sim_config, tmp_path, workers=1, log=lambda _: None)
    assert len(results.outcomes) == 6 and all(outcome[0] == "done" for outcome in results.outcomes.values())
    row = rows[0]
    assert row["n_pairs"] == 3 and row["seeds"] == 3
    expected = "reproduced" if row["diff_low"] > 0 else "not reproduced" if row["diff_high"] < 0 else "inconclusive"
    assert row["verdict"] == expected
    # paired: at each seed both arms got the identical requests (lengths and arrival times)
    for seed in (0, 1, 2):
        static = pd.read_parquet(tmp_path / f"baton-b2-static-static-s{seed}" / "requests.parquet")
        continuous = pd.read_parquet(tmp_path / f"baton-b2-continuous-fcfs-s{seed}" / "requests.parquet")
        columns = ["request_id", "arrival_s", "input_tokens", "target_output_tokens"]
        pd.testing.assert_frame_equal(
            static[columns].sort_values("request_id").reset_index(drop=True),
            continuous[columns].sort_values("request_id").reset_index(drop=True),
        )
        assert (static["task"] == "chat").all() and len(static) == 6
