"""bench/reproduce.py and bench/reproduction_study.py: the verdict rule (paired test, Holm over
claim rows, magnitude against the paper's range, pilot tables), the per-seed quantities (best of
several baselines included) and a row's statistics with hand-computed numbers, recomputing a table
from its per-seed records (--render), the real-engine translation, the plans of both tables, and a
tiny paired run on the simulator."""

from __future__ import annotations

import csv
import json
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
    best_of,
    capacity_at_top,
    compare_values,
    compute_row,
    judge_records,
    magnitude_position,
    measure_values,
    plan_arms,
    run_rows,
    slope,
    unique_arms,
    verdict,
)
from runners.metrics.seed_statistics import RelativeChange

ROOT = Path(__file__).resolve().parents[2]

BASE = {0: 1.0, 1: 2.0, 2: 3.0}
TIGHT = {0: 2.0, 1: 3.1, 2: 4.0}  # differences 1.0, 1.1, 1.0
#: Six seeds, every difference positive (2, 2.5, 1.5, 2, 2.5, 1.5; mean 2): of the 2^6 sign
#: assignments only all-plus and all-minus reach |mean| 2, so the exact sign-flip p is 2 / 64.
BASE6 = {0: 10.0, 1: 12.0, 2: 9.0, 3: 11.0, 4: 10.0, 5: 8.0}  # mean 10
OURS6 = {0: 12.0, 1: 14.5, 2: 10.5, 3: 13.0, 4: 12.5, 5: 9.5}  # mean 12: +20%
P6 = 2 / 64
NO_RANGE = Claim("no number")


def summary(**values) -> dict:
    return {"G": values.get("G"), "slo_attainment": values.get("att"), "e2e_s": {"mean": values.get("e2e")}}


# -- the verdict rule ------------------------------------------------------------------------------
def test_reproduced_when_significant_and_the_interval_overlaps_the_papers_range():
    comparison = compare_values(BASE6, OURS6, higher_is_better=True)
    assert comparison.paired.p_value == pytest.approx(P6) and comparison.paired.test == "exact sign-flip"
    relative = comparison.relative  # Fieller below 10 pairs: +20.0% [+16.9, +22.9]
    assert relative.change == pytest.approx(0.2) and relative.method.startswith("Fieller")
    assert (relative.ci_low, relative.ci_high) == pytest.approx((0.16884, 0.22891), abs=1e-4)
    result, reason = verdict(comparison, Claim("+10% to +30%", 0.10, 0.30))
    assert result == "reproduced"
    assert reason == (
        "ours better (p 0.031; exact sign-flip; 6 of 6 seeds better); the change +20.0% [+16.9, +22.9] "
        "overlaps the paper's +10% to +30%"
    )
    assert verdict(comparison, Claim("+22% to +40%", 0.22, 0.40))[0] == "reproduced"  # overlaps at 22-22.9%


def test_direction_only_when_the_interval_lies_wholly_outside_the_range_saying_which_side():
    comparison = compare_values(BASE6, OURS6, higher_is_better=True)
    result, reason = verdict(comparison, Claim("+50% to +100%", 0.5, 1.0))
    assert result == "direction only"
    assert reason.endswith(
        "magnitude below the paper's range (a smaller gain): +20.0% [+16.9, +22.9] against +50% to +100%"
    )
    result, reason = verdict(comparison, Claim("+1% to +5%", 0.01, 0.05))
    assert result == "direction only" and "magnitude above the paper's range (a larger gain)" in reason
    result, reason = verdict(comparison, NO_RANGE)
    assert result == "direction only (no paper number)" and "gives no number" in reason
    # a latency that fell 20% (lower is better) against the paper's -80.8% to -91.1%: a smaller gain
    faster = {seed: 2 * BASE6[seed] - OURS6[seed] for seed in BASE6}  # mean 8: -20%
    latency = compare_values(BASE6, faster, higher_is_better=False)
    result, reason = verdict(latency, Claim("-80.8% to -91.1%", -0.911, -0.808), higher_is_better=False)
    assert result == "direction only" and "magnitude below the paper's range (a smaller gain): -20.0%" in reason


def test_not_reproduced_when_significant_and_ours_is_worse():
    comparison = compare_values(BASE6, OURS6, higher_is_better=False)  # e.g. a latency that grew 20%
    result, reason = verdict(comparison, Claim("-10% to -30%", -0.3, -0.1), higher_is_better=False)
    assert result == "not reproduced"
    assert reason == "ours worse (p 0.031; exact sign-flip; 0 of 6 seeds better)"


def test_inconclusive_when_p_is_not_below_five_percent_raw_or_after_holm():
    three = compare_values(BASE, TIGHT, higher_is_better=True)
    # 3 pairs, every difference positive: p = 2 / 8, the smallest the exact test can give at 3 pairs
    assert three.paired.p_value == pytest.approx(0.25) and three.paired.verdict == "better"  # t interval > 0
    assert verdict(three, NO_RANGE) == (
        "inconclusive",
        "not significant (p 0.25 >= 0.05; exact sign-flip, 3 pairs); the exact test's smallest p at 3 pairs is 0.25",
    )
    six = compare_values(BASE6, OURS6, higher_is_better=True)
    result, reason = verdict(six, Claim("+10% to +30%", 0.1, 0.3), adjusted_p=2 * P6)  # Holm with one more claim
    assert (
        result == "inconclusive" and reason == "not significant (p 0.031, Holm 0.062 >= 0.05; exact sign-flip, 6 pairs)"
    )


def test_inconclusive_when_identical_or_without_two_pairs():
    assert verdict(compare_values(BASE, dict(BASE), True), NO_RANGE) == ("inconclusive", "identical at every seed")
    one_pair = compare_values({0: 1.0, 1: None}, {0: 2.0, 1: 3.0}, True)
    assert one_pair.paired.n_pairs == 1 and one_pair.paired.dropped == 1
    assert verdict(one_pair, NO_RANGE) == ("inconclusive", "1 seed(s) with both values: no test")


def test_the_point_estimate_stands_in_for_a_missing_interval_and_says_so():
    # baseline -1, 1, 3, -1, 1, 3: mean 1, variance of the mean 3.2 / 6; t(0.975, 5)^2 x 0.533 = 3.5
    # > 1^2: Fieller's interval is unbounded, so the change +125% is set against the range as a point
    base = {0: -1.0, 1: 1.0, 2: 3.0, 3: -1.0, 4: 1.0, 5: 3.0}
    ours = {seed: value + 1.0 + 0.1 * seed for seed, value in base.items()}
    comparison = compare_values(base, ours, True)
    assert comparison.relative.ci_low is None and "unbounded" in comparison.relative.note
    result, reason = verdict(comparison, Claim("+8% to +28%", 0.08, 0.28))
    assert result == "direction only"
    assert "+125.0% [no interval] (no interval: the point estimate is set against the range)" in reason


def test_an_at_most_worse_claim_is_judged_against_its_bound():
    bound = Claim("G falls by at most 1.9%", -0.019, 0.0, kind="at-most-worse")
    # ours = 0.999 x baseline -+ 0.01: the differences ours - 0.981 x baseline are all positive
    # (0.018 x 8..12 - 0.01 > 0), so the test against the bound gives 2 / 64
    close = {seed: 0.999 * value + (0.01 if seed % 2 else -0.01) for seed, value in BASE6.items()}
    result, reason = verdict(compare_values(BASE6, close, True), bound)
    assert result == "reproduced"
    assert reason.startswith("within the paper's bound of -1.9% (p 0.031; exact sign-flip against the bound)")
    # 10% worse: every difference ours - 0.981 x baseline negative: significantly beyond the bound
    worse = {seed: 0.9 * value + (0.01 if seed % 2 else -0.01) for seed, value in BASE6.items()}
    result, reason = verdict(compare_values(BASE6, worse, True), bound)
    assert result == "not reproduced" and reason.startswith("beyond the paper's bound of -1.9%")
    assert verdict(compare_values(BASE, {k: v * 0.999 for k, v in BASE.items()}, True), bound)[0] == "inconclusive"


def test_a_pilot_never_counts_a_row_as_reproduced():
    comparison = compare_values(BASE6, OURS6, higher_is_better=True)
    result, reason = verdict(comparison, Claim("+10% to +30%", 0.1, 0.3), pilot=True)
    assert result == "pilot: direction holds" and reason.startswith("pilot (fewer than 10 seeds on a real engine)")
    assert verdict(comparison, Claim("x", 0.1, 0.3), higher_is_better=False, pilot=True)[0] == "pilot: against"
    assert verdict(compare_values(BASE, TIGHT, True), NO_RANGE, pilot=True)[0] == "pilot: inconclusive"


def test_magnitude_position_in_the_size_of_the_gain():
    table_one = Claim("+8% to +28%", 0.08, 0.28)
    assert magnitude_position(RelativeChange(3, 0.2, 0.1, 0.25), table_one) == ("within", False)
    assert magnitude_position(RelativeChange(3, 0.2, 0.25, 0.3), table_one) == ("within", False)  # overlaps
    assert magnitude_position(RelativeChange(3, 0.05, 0.01, 0.07), table_one) == ("below", False)
    assert magnitude_position(RelativeChange(2, 0.5, None, None), table_one) == ("above", True)  # the point
    eight_times = Claim(">= 8x", None, -0.875)  # 003 low demand: slope down by at least 87.5%
    assert magnitude_position(RelativeChange(3, -0.5, -0.6, -0.4), eight_times, False) == ("below", False)
    assert magnitude_position(RelativeChange(3, -0.9, -0.95, -0.88), eight_times, False) == ("within", False)
    assert magnitude_position(RelativeChange(3, -0.99, -0.995, -0.98), eight_times, False) == ("within", False)
    assert magnitude_position(RelativeChange(3, 0.5, 0.4, 0.6), NO_RANGE) == (None, False)


# -- a table judged as one: Holm over the claim rows, the records alone ------------------------------
def record(scenario: str, role: str, base: dict, ours: dict, low=None, high=None, higher: bool = True) -> dict:
    """A hand-written row record, as reproduction_<name>.seeds.json holds it."""
    seeds = sorted(base)
    return {
        "id": scenario,
        "scenario": scenario,
        "setting": "a setting",
        "role": role,
        "note": "",
        "claim": {"text": "the paper's claim", "low": low, "high": high, "kind": "gain"},
        "quantity": {"kind": "metric", "key": "G", "higher_is_better": higher},
        "seeds": seeds,
        "baseline": {"label": "fcfs", "values": [base[s] for s in seeds], "why": {}},
        "ours": {"label": "slo-sa", "values": [ours[s] for s in seeds], "why": {}},
        "also": [],
    }


BASE10 = {seed: value for seed, value in enumerate([10.0, 12.0, 9.0, 11.0, 10.0, 8.0, 10.0, 12.0, 9.0, 11.0])}
DIFF10 = [2.0, 2.5, 1.5, 2.0, 2.5, 1.5, 2.0, 2.5, 1.5, 2.0]  # mean 2, s^2 = 1.5 / 9: t = 15.49, 9 df
OURS10 = {seed: BASE10[seed] + DIFF10[seed] for seed in BASE10}


def hand_table() -> list[dict]:
    """Three claim rows (10 seeds: p about 1e-7; 6 seeds: p 2/64; 3 seeds: p 2/8) and one
    supporting row (6 seeds, p 2/64, no paper number). Holm over the three claims: sorted
    p x 3, x 2, x 1 -> 3e-7, 0.0625, 0.25: only the first stays below 5%."""
    return [
        record("A first claim", "claim", BASE10, OURS10, 0.1, 0.3),
        record("B second claim", "claim", BASE6, OURS6, 0.1, 0.3),
        record("C third claim", "claim", BASE, TIGHT, 0.1, 0.3),
        record("D supporting", "supporting", BASE6, OURS6),
    ]


def test_holm_runs_over_the_claim_rows_only():
    rows = judge_records(hand_table())
    first, second, third, support = rows
    t = 2.0 / (math.sqrt(1.5 / 9) / math.sqrt(10))
    from scipy import stats

    p_first = 2 * stats.t.sf(t, 9)
    assert first["test"] == "paired t" and first["p_value"] == pytest.approx(p_first)
    assert first["p_holm"] == pytest.approx(3 * p_first)
    assert first["verdict"] == "reproduced" and first["change_method"].startswith("Fieller")
    assert second["p_value"] == pytest.approx(P6) and second["p_holm"] == pytest.approx(2 * P6)
    assert second["verdict"] == "inconclusive"  # significant alone (0.031), not after Holm (0.0625)
    assert second["p"] == "p 0.031 (Holm 0.062), exact sign-flip"
    assert third["p_holm"] == pytest.approx(0.25) and third["verdict"] == "inconclusive"
    assert support["p_holm"] is None and support["p"] == "p 0.031, exact sign-flip"
    assert support["verdict"] == "direction only (no paper number)"  # unadjusted: significant
    # a row judged alone (compute_row) is a family of one: its p unadjusted
    assert judge_records([hand_table()[1]])[0]["verdict"] == "reproduced"


def test_render_recomputes_a_table_from_its_seeds_file_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reproduce, "OUT", tmp_path)
    (tmp_path / "reproduction_hand.seeds.json").write_text(
        json.dumps({"table": "hand", "pilot": False, "rows": hand_table()})
    )
    reproduce.render("hand")
    text = (tmp_path / "reproduction_hand.md").read_text()
    assert (
        "Holm's correction over the 3 claim rows of this table (family-wise 5%); supporting rows are shown with "
        "their unadjusted p and are not counted." in text
    )
    assert (
        "Verdicts (claim rows only): 1 reproduced, 0 on the boundary, 0 direction only, 0 not reproduced, 2 inconclusive "
        "(of 3 claim rows); 1 supporting rows not counted." in text
    )
    rows = list(csv.DictReader((tmp_path / "reproduction_hand.csv").open()))
    assert [row["verdict"] for row in rows] == [
        "reproduced",
        "inconclusive",
        "inconclusive",
        "direction only (no paper number)",
    ]
    assert [row["role"] for row in rows] == ["claim", "claim", "claim", "supporting"]
    assert float(rows[1]["p_holm"]) == pytest.approx(0.0625)
    # the seeds file is rewritten as it was read (one record a line), and rendering again agrees
    again = json.loads((tmp_path / "reproduction_hand.seeds.json").read_text())
    assert again["rows"] == hand_table() and again["pilot"] is False
    reproduce.render("hand")
    assert (tmp_path / "reproduction_hand.md").read_text() == text


def test_a_pilot_table_counts_no_row_as_reproduced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reproduce, "OUT", tmp_path)
    (tmp_path / "reproduction_pilot.seeds.json").write_text(
        json.dumps({"table": "pilot", "pilot": True, "rows": hand_table()})
    )
    reproduce.render("pilot")
    text = (tmp_path / "reproduction_pilot.md").read_text()
    assert "| pilot: direction holds |" in text and "| reproduced |" not in text
    assert (
        "Pilot (fewer than 10 seeds on a real engine): no row counts as reproduced. 1 direction holds, 0 against, "
        "2 inconclusive (of 3 claim rows); 1 supporting rows not counted." in text
    )


def test_a_computed_rows_record_survives_json_and_gives_the_same_row():
    base, ours = Arm("base", "fcfs"), Arm("ours", "slo-sa")
    results = Results()
    for seed in BASE6:
        results.outcomes[("base", seed, None)] = ("done", summary(G=BASE6[seed], att=0.5, e2e=10.0), None)
        results.outcomes[("ours", seed, None)] = ("done", summary(G=OURS6[seed], att=0.75, e2e=8.0), None)
    spec = RowSpec(
        "A",
        "s",
        Measure("fcfs", (base,)),
        Measure("slo-sa", (ours,)),
        Claim("x", 0.1, 0.3),
        ("slo_attainment",),
        "claim",
    )
    row = compute_row(spec, results, list(BASE6))
    assert row["record"]["baseline"]["values"] == [BASE6[s] for s in BASE6]
    assert row["record"]["also"] == [{"key": "slo_attainment", "baseline": [0.5] * 6, "ours": [0.75] * 6}]
    again = judge_records([json.loads(json.dumps(row["record"]))])[0]
    assert {key: again[key] for key in row if key != "record"} == {key: row[key] for key in row if key != "record"}


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
    # Fieller at 3 pairs: baseline 1, 2, 3 has mean 2 and variance of the mean 1 / 3; t(0.975, 2)^2 / 3
    # = 6.2 > 2^2, so the interval is unbounded
    assert row["change"] == "+51.7% [no interval]"
    assert row["verdict"] == "inconclusive" and row["role"] == "supporting"  # p = 2 / 8 at 3 pairs
    assert row["reason"].startswith("not significant (p 0.25 >= 0.05; exact sign-flip, 3 pairs)")
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
    assert row["reason"] == f"0 seed(s) with both values: no test; baseline: {LIVELOCK_TEXT} at 3 seed(s)"


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
    # 3 seeds x 46 runs a seed: A 7 arms (fcfs, slo-sa, paper protocol, oracle, noisy, planning exact
    # and with error); B memory 5 (tight: dynamic-mem, fcfs 128; ample: those two and static 32);
    # B SLA 2 arms x 3 rates; C 4; D 20 ((mcsf oracle + mcsf gaussian + 8 baselines) x 2 counts);
    # Baton 2 B x 2
    assert len(members) == 138
    d_params = {
        (m.scheduler, tuple(sorted(m.config.scheduler.params.items()))) for m in members if m.run_id.startswith("d-")
    }
    assert len(d_params) == 2 + len(reproduce.D_BASELINES)  # mcsf oracle and gaussian; each baseline setting


def test_one_claim_row_per_paper_claim_in_the_simulator_table():
    specs = reproduce.sim_rows(reproduce.SIM_SCALE)
    claims = [spec for spec in specs if spec.role == "claim"]
    # A: Fig. 7, Fig. 9 (+84%, +65%), Fig. 10; B: Table I, Table II; C: 4; D: 2; Baton: 1
    assert len(claims) == 13 and len({spec.claim.text for spec in claims}) == 13
    fig7 = [spec for spec in claims if spec.scenario == "A slo-sa vs fcfs"]
    assert len(fig7) == 1 and fig7[0].setting.startswith("10 requests at once, max batch 4")
    table_one = next(spec for spec in claims if spec.scenario.startswith("B dynamic-mem"))
    (matched,), (dynamic,) = table_one.baseline.arms, table_one.ours.arms
    assert matched.scheduler == "fcfs" and dict(matched.engine) == dict(dynamic.engine)  # same slots and KV
    assert dynamic.engine["kv_capacity_tokens"] == 60_000 and dynamic.engine["max_num_seqs"] == 1024
    paper_static = next(spec for spec in specs if spec.scenario == "B dynamic-mem vs static max batch (the paper's)")
    assert paper_static.role == "supporting" and "resources (more slots), not the algorithm" in paper_static.note
    uncapped = [spec for spec in specs if spec.scenario == "C scls vs fcfs uncapped"]
    assert len(uncapped) == 2 and all(s.role == "supporting" and "uncapped baseline" in s.note for s in uncapped)
    best = [spec for spec in claims if spec.baseline.kind == "best"]
    assert len(best) == 2 and all(len(spec.baseline.parts) == len(reproduce.D_BASELINES) for spec in best)
    planning = next(spec for spec in claims if spec.claim.kind == "at-most-worse")
    assert planning.ours.arms[0].engine["planning_error"] == reproduce.PLANNING_ERROR
    assert planning.baseline.arms[0].engine["planning_error"] == 0.0
    baton = next(spec for spec in claims if spec.scenario.startswith("Baton"))
    assert baton.setting.startswith(f"B = {reproduce.BATON_CLAIM_B}:")


def test_the_best_baseline_per_seed_leaves_out_a_livelocking_one_and_says_so():
    counts = (10, 20)
    ours = tuple(Arm(f"mc-n{n}", "mcsf") for n in counts)
    first = tuple(Arm(f"ap-n{n}", "alpha-protect") for n in counts)
    second = tuple(Arm(f"abc-n{n}", "alpha-beta-clear") for n in counts)
    results = Results()
    slopes = {"mc": (0.05, 0.06, 0.07), "ap": (0.20, 0.10, None), "abc": (0.15, 0.30, 0.12)}
    for seed in range(3):
        for tag, arms in (("mc", ours), ("ap", first), ("abc", second)):
            value = slopes[tag][seed]
            for n, arm in zip(counts, arms):
                if value is None:  # seed 2: alpha-protect livelocks at n = 20
                    outcome = ("done", summary(e2e=1.0), None) if n == 10 else ("failed", None, "stalled: cleared")
                else:
                    outcome = ("done", summary(e2e=value * n), None)
                results.outcomes[(arm.name, seed, None)] = outcome
    parts = [
        Measure("alpha-protect", first, "slope", "e2e_s.mean", counts),
        Measure("alpha-beta-clear", second, "slope", "e2e_s.mean", counts),
    ]
    best = best_of("best alpha baseline (per seed)", parts)
    values, why = measure_values(best, results, [0, 1, 2])
    # lower slopes are better: min(0.20, 0.15), min(0.10, 0.30), and at seed 2 only 0.12 is left
    assert values == pytest.approx({0: 0.15, 1: 0.10, 2: 0.12}) and why == {}
    spec = RowSpec(
        "D", "high", best, Measure("mcsf", ours, "slope", "e2e_s.mean", counts), Claim("~3x", -2 / 3, -2 / 3)
    )
    row = compute_row(spec, results, [0, 1, 2])
    assert row["baseline"].startswith("0.1233 s/req")  # (0.15 + 0.10 + 0.12) / 3
    assert (
        "baseline: best of 2 per seed; at 1 seed(s) some had no value and the best of those present was taken "
        f"(a livelocking baseline is excluded at that seed): alpha-protect: {LIVELOCK_TEXT} at 1 seed(s)"
    ) in row["reason"]
    assert [arm.name for arm in best.arms] == ["ap-n10", "ap-n20", "abc-n10", "abc-n20"]


# -- a tiny paired run -----------------------------------------------------------------------------
def test_a_tiny_baton_row_runs_paired_on_the_simulator(tmp_path: Path):
    scale = {"baton_requests": 6, "baton_batches": (2,)}
    specs = reproduce.rows_baton(scale, reproduce.BATON_FILTERS)
    rows, results = run_rows(specs, [0, 1, 2], reproduce.sim_config, tmp_path, workers=1, log=lambda _: None)
    assert len(results.outcomes) == 6 and all(outcome[0] == "done" for outcome in results.outcomes.values())
    row = rows[0]
    assert row["n_pairs"] == 3 and row["seeds"] == 3
    # 3 pairs: the exact sign-flip test's smallest p is 2 / 8, never significant
    assert row["p_value"] >= 0.25 and row["verdict"] == "inconclusive" and row["role"] == "supporting"
    assert row["record"]["seeds"] == [0, 1, 2] and None not in row["record"]["ours"]["values"]
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


def test_rows_read_back_from_the_csv_are_judged_again_as_one_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """bench/in_engine.py merges its rows into the CSV's rows and writes them again: every row
    carries its record (JSON in the CSV), so the merged table is recomputed, Holm included."""
    monkeypatch.setattr(reproduce, "OUT", tmp_path)
    reproduce.write([{"record": r} for r in hand_table()[:2]], "merge", "cmd", 1.0, "notes\n", [], "2026-11-01")
    kept = list(csv.DictReader((tmp_path / "reproduction_merge.csv").open()))
    assert json.loads(kept[0]["record"]) == hand_table()[0]
    added = judge_records(hand_table()[2:])  # as bench/in_engine.py's run_rows gives them, judged alone
    reproduce.write(kept + added, "merge", "cmd", 1.0, "notes\n", [], "2026-11-01")
    rows = list(csv.DictReader((tmp_path / "reproduction_merge.csv").open()))
    assert [row["verdict"] for row in rows] == [
        row["verdict"] for row in judge_records(hand_table())
    ]  # the second claim is inconclusive after Holm over three claims, as in one table
    assert "Holm's correction over the 3 claim rows" in (tmp_path / "reproduction_merge.md").read_text()


def test_both_tables_notes_render_from_their_meta(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reproduce, "OUT", tmp_path)
    scale = json.loads(json.dumps(reproduce.QUICK_SCALE))  # as the .json beside the table holds it
    meta = {"engine": "sim", "command": "python -m bench.reproduce --quick", "seconds": 25.0, "scale": scale}
    (tmp_path / "reproduction_simulator-hand.json").write_text(json.dumps({**meta, "parameters": "- fcfs: none"}))
    (tmp_path / "reproduction_simulator-hand.seeds.json").write_text(
        json.dumps({"table": "simulator-hand", "pilot": False, "rows": hand_table()})
    )
    reproduce.render("simulator-hand")
    text = (tmp_path / "reproduction_simulator-hand.md").read_text()
    assert "Made by `python -m bench.reproduce --quick`" in text and "where memory binds (KV 6,000 tokens)" in text
    real_meta = json.loads((ROOT / "results" / "reproduction" / "reproduction_cpu-vllm.json").read_text())
    assert "With\nfewer than 10 seeds this table is a pilot" in reproduce.real_notes(real_meta)


def test_every_real_row_translates_to_its_server_group():
    """The --real groups as reproduce.real() runs them: every arm's engine settings are what its
    servers were launched with (memory binds only on the small-KV servers)."""
    scale = reproduce.real_scale(reproduce.REAL_SCALE)
    extra = {"filters": scale["filters"]}
    one = reproduce.RealTarget(["http://127.0.0.1:8000/v1"], 64, None, extra)
    small = reproduce.RealTarget(["http://127.0.0.1:8001/v1"], 64, 3072, extra)
    two = reproduce.RealTarget(["http://127.0.0.1:8002/v1", "http://127.0.0.1:8003/v1"], 64, None, extra)
    groups = (
        (
            one,
            reproduce.rows_a(scale, protocol=False, planning=False)
            + reproduce.rows_b_memory(scale, None, tight=False)
            + reproduce.rows_b_sla(scale)
            + reproduce.rows_baton(scale, scale["filters"]),
        ),
        (small, reproduce.rows_b_memory(scale, 3072, tight=True) + reproduce.rows_d(scale, 3072)),
        (two, reproduce.rows_c(scale)),
    )
    claims = 0
    for target, specs in groups:
        claims += sum(1 for spec in specs if spec.role == "claim")
        for arm in unique_arms(specs):
            assert target(arm)["engine"]["kind"] == "openai"
    assert claims == 12  # the simulator's 13 less Fig. 10 (no planning error on a real engine)


def test_holdout_agreement_checks_the_direction_of_every_directional_row(tmp_path: Path, monkeypatch):
    from bench import holdout_agreement

    monkeypatch.setattr(holdout_agreement, "OUT", tmp_path)
    # main: ours +2 at every one of 10 seeds (reproduced: +20% in the paper's +10% to +30%);
    # check, other seeds: the same row with ours 1 below the baseline each time (direction lost)
    main = record("A first claim", "claim", BASE10, OURS10, 0.1, 0.3)
    worse = record("A first claim", "claim", BASE10, {seed: value - 1.0 for seed, value in BASE10.items()}, 0.1, 0.3)
    for name, rows in (("main", [main]), ("check", [worse]), ("same", [main])):
        (tmp_path / f"reproduction_{name}.seeds.json").write_text(
            json.dumps({"table": name, "pilot": False, "rows": rows})
        )
    lost = holdout_agreement.agreement("main", "check")
    assert lost["directional_rows"] == 1 and lost["judged"] == 1 and lost["held"] == 0
    assert lost["rows"][0]["main_verdict"] == "reproduced" and lost["rows"][0]["direction_held"] is False
    assert lost["rows"][0]["check_verdict"] == "not reproduced"
    kept = holdout_agreement.agreement("main", "same")
    assert kept["held"] == 1 and kept["rows"][0]["direction_held"] is True


def test_real_capacity_row_bounds_are_scaled_to_the_tiny_engine():
    from bench.vllm_cpu_common import tiny_sla_target_s

    scale = reproduce.real_scale(reproduce.REAL_SCALE)
    target = tiny_sla_target_s()
    assert 0.001 < target < 0.02  # a decode step of the tiny CPU model, not the paper's 50 ms
    assert scale["b_tpot_s"] == target and scale["b_ttft_s"] == pytest.approx(target * 200, abs=1e-4)
    (row,) = reproduce.rows_b_sla(scale)
    static, dynamic = row.baseline.arms[0], row.ours.arms[0]
    assert static.slo["chat"] == {"tpot_s": target, "ttft_s": scale["b_ttft_s"]}
    assert dynamic.params == {"d_sla_s": target, "eps_s": round(target / 10, 6)}
    assert f"TPOT <= {target * 1000:g} ms" in row.setting
    # the simulator's row keeps the paper's values and its parameters as before
    (sim,) = reproduce.rows_b_sla(reproduce.SIM_SCALE)
    assert sim.ours.arms[0].params == {"d_sla_s": 0.05} and "TPOT <= 50 ms and TTFT <= 10 s" in sim.setting


def test_partial_real_rerun_replaces_only_its_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(reproduce, "OUT", tmp_path)
    (tmp_path / "reproduction_t.json").write_text(
        json.dumps({"command": "first", "made_on": "2026-11-26", "seconds": 100.0, "problems": ["old"], "load": [1.0]})
    )
    with (tmp_path / "reproduction_t.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["scenario", "verdict"])
        writer.writeheader()
        writer.writerows(
            [{"scenario": "A x", "verdict": "a"}, {"scenario": "B dynamic-sla vs static (capacity)", "verdict": "old"}]
        )
    meta = {
        "command": "again",
        "made_on": "2026-11-27",
        "seconds": 5.0,
        "runs": 4,
        "problems": [],
        "launch_s": [9.0],
        "load": [2.0],
        "scale": {"b": 1},
    }
    merged, table = reproduce.merged_rerun(
        "t", meta, [{"scenario": "B dynamic-sla vs static (capacity)", "verdict": "new"}], ("B dynamic-sla",)
    )
    assert [(row["scenario"][0], row["verdict"]) for row in table] == [("A", "a"), ("B", "new")]
    assert merged["command"] == "first" and merged["made_on"] == "2026-11-26" and merged["seconds"] == 100.0
    assert merged["reruns"] == [
        {
            "command": "again",
            "made_on": "2026-11-27",
            "seconds": 5.0,
            "runs": 4,
            "problems": [],
            "launch_s": [9.0],
            "load": [2.0],
            "rows": ["B dynamic-sla"],
        }
    ]
    assert merged["scale"] == {"b": 1} and merged["load"] == [1.0, 2.0] and merged["problems"] == ["old"]


def test_a_rendered_row_names_the_oracle_its_scenario_does_not():
    """Issue 43 item 8: D's claim rows give mcsf the known lengths; the .md row says so."""
    row = {"scenario": "D mcsf vs the best alpha baseline (per seed)", "ours_label": "mcsf (oracle: known lengths, 003's premise)", "baseline_label": "best alpha baseline (per seed)"}  # fmt: skip
    assert reproduce.scenario_cell(row) == (
        "D mcsf vs the best alpha baseline (per seed) (ours: mcsf (oracle: known lengths, 003's premise))"
    )
    leak_free = dict(row, scenario="D mcsf (no oracle) vs the best alpha baseline (per seed)", ours_label="mcsf (per-task Gaussian, no oracle)")  # fmt: skip
    assert reproduce.scenario_cell(leak_free) == leak_free["scenario"]
    named = {"scenario": "A slo-sa oracle vs fcfs", "ours_label": "slo-sa oracle", "baseline_label": "fcfs"}
    assert reproduce.scenario_cell(named) == "A slo-sa oracle vs fcfs"
    committed = (reproduce.OUT / "reproduction_simulator.md").read_text()
    assert "| D mcsf vs the best alpha baseline (per seed) (ours: mcsf (oracle: known lengths" in committed


def test_the_b_capacity_row_verdict_depends_on_no_random_number_generator(monkeypatch):
    """Issue 43 item 5: the committed B dynamic-sla vs static (capacity) row sat at the paper's
    +10% low end, and its verdict flipped with the bootstrap's random seed. Its verdict is now a
    function of the per-seed values alone: the same with scipy's bootstrap and every random
    generator made to fail, and under any numpy global seed."""
    import json

    import numpy as np
    import scipy.stats

    from bench.reproduction_study import judge_records

    seeds_file = Path(__file__).resolve().parents[2] / "results" / "reproduction" / "reproduction_simulator.seeds.json"
    [record] = [
        row
        for row in json.loads(seeds_file.read_text())["rows"]
        if row["scenario"] == "B dynamic-sla vs static (capacity)" and row["role"] == "claim"
    ]
    first = judge_records([record])[0]

    def refuse(*args, **kwargs):
        raise AssertionError("a verdict must not resample")

    monkeypatch.setattr(scipy.stats, "bootstrap", refuse)
    monkeypatch.setattr(np.random, "default_rng", refuse)
    for seed in range(5):
        np.random.seed(seed)
        again = judge_records([record])[0]
        assert (again["verdict"], again["change"]) == (first["verdict"], first["change"])
    assert first["verdict"] in ("reproduced", "on the boundary", "direction only")
