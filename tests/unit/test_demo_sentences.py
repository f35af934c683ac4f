"""The Demo's sentence builders on hand-made study records (numbers computed by hand): a winner,
a cost or a gain is named only where the paired 95% interval excludes zero on the metric's good
or bad side, whatever verdict string the record stores; per-task tails from requests tables;
oracles labelled; mcsf's task-only guess and the interval wording said as they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from runners.store.models import MetricStatistics, PairedComparison, SeedSummary, StudyRecord
from runners.store.result_store import RunData
from runners.views.demo import (
    INTERVAL_WORDING,
    MCSF_TASK_ONLY,
    SchedulerResult,
    card_interval,
    card_verdict,
    change_words,
    clear_direction,
    demo_regime,
    headline,
    regime_text,
    tail_frame,
    task_frame,
    task_tail,
    task_tail_key,
    task_tail_statistics,
    who_pays_sentence,
)
from runners.views.demo import strategy_notes as notes

pytestmark = pytest.mark.unit
SEEDS = list(range(10))


def pair(
    diff: float, low: float, high: float, wins: int, verdict: str, n: int = 10, p: float | None = None
) -> PairedComparison:
    return PairedComparison(
        n_pairs=n, dropped=0, diff_mean=diff, ci_low=low, ci_high=high, wins=wins, verdict=verdict, p_value=p
    )


def rule(compared: int = 2) -> str:
    return (
        "paired 95% intervals over 10 seeds; a difference is named only when it is at least 1 point of attainment, "
        f"2% of G or 5% of a p99 and significant after Holm's correction over the {compared} comparisons with fcfs"
    )


def stats(mean: float, low: float, high: float, n: int = 10) -> SeedSummary:
    return SeedSummary(n=n, mean=mean, median=mean, ci_low=low, ci_high=high)


def record(attainment: dict, **entries: dict) -> StudyRecord:
    """fcfs the baseline, slo-sa and mcsf; ``attainment``: scheduler -> its vs_baseline entry."""
    names = ["fcfs", *attainment]
    statistics = {
        "slo_attainment": {
            "schedulers": {name: stats(0.5, 0.45, 0.55) for name in names},
            "vs_baseline": attainment,
        }
    }
    for key, versus in entries.items():
        statistics[key.replace("__", ".")] = {
            "schedulers": {name: stats(1.0, 0.9, 1.1) for name in names},
            "vs_baseline": versus,
        }
    return StudyRecord.model_validate(
        {
            "study_id": "demo-overload",
            "baseline": "fcfs",
            "schedulers": names,
            "seeds": SEEDS,
            "runs": [],
            "oracles": {},
            "statistics": statistics,
        }
    )


# -- deciding from the interval's numbers -----------------------------------------------------------
def test_clear_direction_reads_the_interval_in_the_metrics_direction():
    assert clear_direction("slo_attainment", pair(0.05, 0.02, 0.08, 9, "no difference")) == "better"
    assert clear_direction("slo_attainment", pair(-0.05, -0.08, -0.02, 0, "better")) == "worse"
    assert clear_direction("ttft_s.p99", pair(-5.0, -8.0, -2.0, 10, "worse")) == "better"  # lower is better
    assert clear_direction("ttft_s.p99", pair(5.0, 2.0, 8.0, 0, "better")) == "worse"
    assert clear_direction(task_tail_key("code"), pair(40.0, 30.0, 50.0, 0, "no difference")) == "worse"
    assert clear_direction("slo_attainment", pair(0.05, 0.0, 0.1, 9, "better")) is None  # touches zero
    assert clear_direction("slo_attainment", pair(0.03, -0.01, 0.07, 7, "better")) is None  # includes zero
    assert clear_direction("slo_attainment", PairedComparison(diff_mean=0.1, ci_low=None, ci_high=None)) is None
    assert clear_direction("slo_attainment", pair(0.1, 0.2, 0.05, 9, "better")) is None  # not an interval
    assert clear_direction("slo_attainment", None) is None


def test_the_headline_never_names_a_winner_whose_paired_interval_includes_zero():
    """mcsf's stored verdict says better, but its interval -1 to +7 points includes zero: it is
    not named as meeting more SLOs; slo-sa's +8 to +16 excludes zero and is named, with its cost."""
    rec = record(
        {"slo-sa": pair(0.12, 0.08, 0.16, 10, "better"), "mcsf": pair(0.03, -0.01, 0.07, 7, "better")},
        ttft_s__p99={"slo-sa": pair(40.0, 30.0, 50.0, 0, "worse"), "mcsf": pair(1.0, -2.0, 4.0, 5, "no difference")},
    )
    text = headline(rec)
    assert text == (
        "**slo-sa** met clearly more SLOs than fcfs, but the slowest 1% of requests waited clearly longer "
        f"with it (p99 TTFT or E2E); no clear difference: **mcsf** ({rule()})."
    )
    assert "**mcsf**" not in text.split("met clearly more")[0]
    assert card_verdict(
        SchedulerResult("mcsf", 10, 0.53, 0.5, 0.56, rec.statistics["slo_attainment"].vs_baseline["mcsf"]), "fcfs"
    ) == ("no clear difference from fcfs (7 of 10 seeds better)")


def test_the_headline_names_a_real_win_whatever_the_stored_verdict():
    """The interval +2 to +6 points excludes zero: mcsf is named even though the record's verdict
    string says no difference; no tail entry, so no cost is claimed."""
    rec = record({"mcsf": pair(0.04, 0.02, 0.06, 9, "no difference"), "slo-sa": pair(-0.05, -0.08, -0.02, 0, "better")})
    assert headline(rec) == (
        "**mcsf** met clearly more SLOs than fcfs without a clearly longer tail (p99 TTFT and E2E); "
        f"**slo-sa** clearly fewer ({rule()})."
    )


def test_the_headline_says_when_nobody_wins():
    rec = record({"slo-sa": pair(0.0, 0.0, 0.0, 0, "no difference"), "mcsf": pair(0.01, -0.02, 0.04, 6, "better")})
    assert headline(rec) == (
        f"No strategy met clearly more SLOs than fcfs; no clear difference: **slo-sa** and **mcsf** ({rule()})."
    )


def test_a_winner_below_the_minimum_effect_is_not_named_and_clear_losses_are():
    """The Demo's below-capacity regime (committed results/demo-below, 2026-12-07): mcsf +0.12 points
    of attainment [+0.004, +0.24], p 0.044, better at 6 of 10 seeds: its interval excludes zero but
    0.12 points is under the 1-point minimum (and 0.044 x 5 = 0.22 after Holm), so it is not named a
    winner; dynamic-mem meets as many SLOs but lowers G by 4.2% (p 0.009) and adds 3.2 s to the p99
    TTFT (p < 0.001): its losses are named as plainly as a win would be."""
    rec = record(
        {
            "mcsf": pair(0.0012, 0.00004, 0.0024, 6, "better", p=0.0438),
            "dynamic-mem": pair(-0.0007, -0.002, 0.0006, 2, "no difference", p=0.2419),
            "slo-sa": pair(0.0, 0.0, 0.0, 0, "no difference", p=1.0),
        },
        G={
            "mcsf": pair(0.0004, -0.00005, 0.0009, 7, "no difference", p=0.0526),
            "dynamic-mem": pair(-0.0418, -0.072, -0.013, 0, "worse", p=0.0091),  # baseline G 1.0: -4.2%
            "slo-sa": pair(0.0, 0.0, 0.0, 0, "no difference", p=1.0),
        },
        ttft_s__p99={
            "mcsf": pair(0.17, -0.06, 0.40, 1, "no difference", p=0.1244),
            "dynamic-mem": pair(3.197, 2.326, 4.068, 0, "worse", p=0.00001),
            "slo-sa": pair(0.0, 0.0, 0.0, 0, "no difference", p=1.0),
        },
    )
    assert headline(rec) == (
        "No strategy met clearly more SLOs than fcfs; **dynamic-mem** met no more SLOs but had clearly lower G "
        "and a longer p99 TTFT; a difference in SLOs met too small or too uncertain to name: **mcsf**; no clear "
        f"difference: **slo-sa** ({rule(3)})."
    )
    mcsf = SchedulerResult("mcsf", 10, 0.5, 0.45, 0.55, rec.statistics["slo_attainment"].vs_baseline["mcsf"], "mcsf")
    assert card_verdict(mcsf, "fcfs", "slo_attainment", rec) == (
        "better than fcfs, too small or too uncertain to name (6 of 10 seeds better)"
    )
    assert card_verdict(mcsf, "fcfs") == "clearly better than fcfs (6 of 10 seeds better)"  # the interval alone


def test_holm_keeps_a_winner_only_if_its_adjusted_p_value_stays_under_5_percent():
    """Two wins of 5 points, intervals clear of zero: p 0.03 and 0.04 become 0.06 and 0.06 after Holm
    (0.03 x 2, then max(0.06, 0.04 x 1)): neither is named. p 0.01 and 0.04 become 0.02 and 0.04:
    both are."""
    uncertain = record(
        {"slo-sa": pair(0.05, 0.01, 0.09, 8, "better", p=0.03), "mcsf": pair(0.05, 0.005, 0.095, 8, "better", p=0.04)}
    )
    assert headline(uncertain).startswith(
        "No strategy met clearly more SLOs than fcfs; a difference in SLOs met too small or too uncertain to name: "
        "**slo-sa** and **mcsf**"
    )
    sure = record(
        {"slo-sa": pair(0.05, 0.01, 0.09, 8, "better", p=0.01), "mcsf": pair(0.05, 0.005, 0.095, 8, "better", p=0.04)}
    )
    assert headline(sure).startswith("**slo-sa** and **mcsf** met clearly more SLOs than fcfs")


def test_a_certain_difference_under_one_point_is_not_named():
    rec = record({"slo-sa": pair(0.005, 0.004, 0.006, 10, "better", p=0.0001)})
    assert headline(rec).startswith(
        "No strategy met clearly more SLOs than fcfs; a difference in SLOs met too small or too uncertain to name: "
        "**slo-sa**"
    )


def test_an_oracle_is_labelled_in_the_headline_and_the_notes():
    rec = record({"mcsf": pair(0.3, 0.25, 0.35, 10, "better")})
    rec.oracles = {"mcsf": ["oracle: each request's target output length (output_predictor oracle)"]}
    assert headline(rec).startswith("**mcsf (oracle)** met clearly more SLOs than fcfs")
    assert who_pays_sentence(rec, "mcsf").startswith("**mcsf (oracle)** meets more SLOs than fcfs")
    said = " ".join(notes([rec], lambda paper: f"paper {paper}"))
    assert "**mcsf (oracle)**" in said and "true length" in said and MCSF_TASK_ONLY not in said
    plain = " ".join(notes([record({"mcsf": pair(0.3, 0.25, 0.35, 10, "better")})], lambda paper: f"paper {paper}"))
    assert f"{MCSF_TASK_ONLY}." in plain and "shortest predicted" not in plain


# -- who gains and who pays ---------------------------------------------------------------------------
def test_who_gains_and_who_pays_in_plain_words():
    rec = record(
        {"slo-sa": pair(0.12, 0.08, 0.16, 10, "better")},
        G={"slo-sa": pair(0.001, -0.001, 0.003, 6, "better")},  # a lying verdict: the interval includes 0
        slo_attainment_by_task__chat={"slo-sa": pair(0.2, 0.15, 0.25, 10, "better")},
    )
    tails = {task_tail_key("code"): MetricStatistics(vs_baseline={"slo-sa": pair(40.0, 30.0, 50.0, 0, "worse")})}
    assert who_pays_sentence(rec, "slo-sa", tails) == (
        "**slo-sa** meets more SLOs than fcfs (+12.0 points, 95% interval +8.0 to +16.0 points, better at 10 of 10 "
        "seeds); who gains: chat requests meet their SLO more often (chat on time +20.0 points, 95% interval +15.0 "
        "to +25.0 points, better at 10 of 10 seeds); who pays: long code requests wait longer (p99 E2E of code "
        "+40.000 s, 95% interval +30.000 to +50.000 s, better at 0 of 10 seeds); no clear difference in G."
    )


def test_the_nested_layout_is_the_same_sentence():
    rec = record(
        {"slo-sa": pair(0.12, 0.08, 0.16, 10, "better")},
        ttft_s__p99={"slo-sa": pair(40.0, 30.0, 50.0, 0, "worse")},
        G={"slo-sa": pair(0.001, -0.001, 0.003, 6, "better")},
    )
    plain, nested = who_pays_sentence(rec, "slo-sa"), who_pays_sentence(rec, "slo-sa", nested=True)
    assert nested.count("\n    - ") == 2 and nested.replace(";\n    - ", "; ") == plain


def test_no_clear_difference_claims_no_gain_and_nobody_paying():
    rec = record(
        {"mcsf": pair(0.03, -0.01, 0.07, 7, "better")},
        ttft_s__p99={"mcsf": pair(-1.0, -3.0, 1.0, 6, "better")},
    )
    assert who_pays_sentence(rec, "mcsf") == (
        "**mcsf**: no clear difference from fcfs in SLOs met (+3.0 points, 95% interval -1.0 to +7.0 points, "
        "better at 7 of 10 seeds); nobody clearly pays (no tail or per-task outcome is clearly worse); no clear "
        "difference in p99 TTFT."
    )


def test_fewer_slos_met_and_the_same_at_every_seed():
    rec = record(
        {"static": pair(-0.05, -0.08, -0.02, 0, "worse"), "slo-sa": pair(0.0, 0.0, 0.0, 0, "no difference")},
        e2e_s__p99={"static": pair(12.5, 10.0, 15.0, 0, "worse")},
    )
    assert who_pays_sentence(rec, "static") == (
        "**static** meets fewer SLOs than fcfs (-5.0 points, 95% interval -8.0 to -2.0 points, better at 0 of 10 "
        "seeds); who pays: the slowest 1% of requests finish later (p99 E2E +12.500 s, 95% interval +10.000 to "
        "+15.000 s, better at 0 of 10 seeds)."
    )
    assert who_pays_sentence(rec, "slo-sa") == (
        "**slo-sa**: no clear difference from fcfs in SLOs met (the same at each of the 10 seeds); nobody clearly "
        "pays (no tail or per-task outcome is clearly worse)."
    )
    assert change_words("G", pair(0.0, 0.0, 0.0, 0, "no difference"), "G") == "G: the same at each of the 10 seeds"
    # an interval from -0.0001 to +0.0011 reads -0.0 to +0.1 points, not +0.0 (wholly above zero)
    assert change_words("slo_attainment", pair(0.0005, -0.0001, 0.0011, 3, "no difference")) == (
        "+0.1 points, 95% interval -0.0 to +0.1 points, better at 3 of 10 seeds"
    )


# -- who waits, per task ----------------------------------------------------------------------------
def requests(code: list[float], chat: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {"task": ["code"] * len(code) + ["chat"] * len(chat), "e2e_s": [*code, *chat]},
    )


def test_a_tasks_tail_is_the_99th_percentile_of_its_completed_requests():
    frame = requests([float(v) for v in range(101)] + [float("nan")], [1.0, 2.0])
    assert task_tail(frame, "code") == 99.0  # 0..100: the 99th percentile (linear) is 99; the failed one left out
    assert task_tail(frame, "chat") == pytest.approx(1.99)  # 1 + 0.99 x (2 - 1)
    assert task_tail(frame.iloc[:0], "code") is None and task_tail(requests([], [1.0]), "code") is None


def test_task_tails_are_summarised_over_seeds_and_paired_by_seed():
    """fcfs's code requests take 10 s at seed 0 and 20 s at seed 1; mcsf's 15 and 30: differences
    5 and 10, mean 7.5, Student t interval 7.5 +- 12.706 x 2.5 = [-24.27, 39.27] (no clear
    difference), 0 of 2 seeds better (lower is better)."""
    run_seeds = {"fcfs": (10.0, 20.0), "mcsf": (15.0, 30.0)}
    runs = {
        name: [
            RunData(f"d-{name}-s{seed}", Path("."), {}, {}, requests([value] * 5, [1.0] * 5), pd.DataFrame())
            for seed, value in enumerate(values)
        ]
        for name, values in run_seeds.items()
    }
    rec = StudyRecord.model_validate(
        {
            "study_id": "d",
            "baseline": "fcfs",
            "schedulers": ["fcfs", "mcsf"],
            "runs": [
                {"run_id": f"d-{name}-s{seed}", "scheduler": name, "seed": seed}
                for name in run_seeds
                for seed in (0, 1)
            ],
            "statistics": {},
        }
    )
    tails = task_tail_statistics(rec, runs)
    code = tails[task_tail_key("code")]
    assert code.schedulers["fcfs"].mean == 15.0 and code.schedulers["mcsf"].mean == 22.5
    versus = code.vs_baseline["mcsf"]
    assert versus.diff_mean == 7.5 and versus.wins == 0 and versus.n_pairs == 2
    assert versus.ci_low == pytest.approx(7.5 - 12.7062 * 2.5, abs=1e-3)
    assert versus.ci_high == pytest.approx(7.5 + 12.7062 * 2.5, abs=1e-3)
    assert clear_direction(task_tail_key("code"), versus) is None
    assert tails[task_tail_key("chat")].vs_baseline["mcsf"].diff_mean == 0.0


# -- tables and the regime's words ------------------------------------------------------------------
def test_the_tail_and_task_tables_state_means_intervals_and_changes():
    rec = record(
        {"mcsf": pair(0.3, 0.25, 0.35, 10, "better")},
        ttft_s__p99={"mcsf": pair(166.3, 151.4, 181.2, 0, "better")},  # a lying verdict
        e2e_s__p99={"mcsf": pair(-2.0, -5.0, 1.0, 4, "better")},
        slo_attainment_by_task__chat={"mcsf": pair(0.6, 0.56, 0.64, 10, "better")},
        slo_attainment_by_task__code={"mcsf": pair(0.3, 0.26, 0.33, 10, "better")},
    )
    tails = tail_frame(rec)
    assert list(tails.columns) == [
        "tail",
        "strategy",
        "verdict",  # before the wide columns: seen at 1,024 px
        "seeds better",
        "mean [95% interval]",
        "change vs fcfs [95% interval]",
    ]
    assert tails.values.tolist() == [
        ["TTFT p99 (s)", "fcfs", "baseline", "", "1.000 [0.900, 1.100]", ""],
        [
            "TTFT p99 (s)",
            "mcsf",
            "clearly worse",
            "0 of 10 seeds",
            "1.000 [0.900, 1.100]",
            "+166.300 s [151.400, 181.200]",
        ],
        ["E2E p99 (s)", "fcfs", "baseline", "", "1.000 [0.900, 1.100]", ""],
        [
            "E2E p99 (s)",
            "mcsf",
            "no clear difference",
            "4 of 10 seeds",
            "1.000 [0.900, 1.100]",
            "-2.000 s [-5.000, 1.000]",
        ],
    ]
    extra = {
        task_tail_key(task): MetricStatistics(
            schedulers={"fcfs": stats(30.0, 27.0, 33.0), "mcsf": stats(70.0, 60.0, 80.0)},
            vs_baseline={"mcsf": pair(40.0, 30.0, 50.0, 0, "worse")},
        )
        for task in ("chat", "code")
    }
    tasks = task_frame(rec, extra).set_index(["task", "outcome", "strategy"])
    assert len(tasks) == 2 * 2 * 2  # tasks x outcomes x strategies
    assert tasks.loc[("chat", "on time (%)", "mcsf")].tolist() == [
        "clearly better",
        "10 of 10 seeds",
        "100.0 [90.0, 100.0]*",  # a share's interval cut at 100% (the stored t-interval reaches 110)
        "+60.0 pts [56.0, 64.0]",
    ]
    assert tasks.loc[("code", "E2E p99 (s)", "mcsf")].tolist() == [
        "clearly worse",
        "0 of 10 seeds",
        "70.000 [60.000, 80.000]",
        "+40.000 s [30.000, 50.000]",
    ]
    assert tasks.loc[("code", "E2E p99 (s)", "fcfs")].tolist() == ["baseline", "", "30.000 [27.000, 33.000]", ""]


def test_a_regime_says_its_load_and_how_long_the_queue_grew():
    rec = StudyRecord(
        study_id="demo-overload",
        baseline="fcfs",
        runs=[],
        statistics={"contention.waiting_peak": MetricStatistics(schedulers={"fcfs": stats(285.4, 263.0, 308.0)})},
    )
    overload = regime_text(demo_regime("overload"), rec)
    assert overload.startswith("Requests arrive at 4 per second, about 148% of the 2.69 per second")
    assert "overload" in overload and overload.endswith(
        "up to 285 requests waited at once (each run's peak, mean over seeds)."
    )
    below = regime_text(demo_regime("below"))
    assert (
        below.startswith("Requests arrive at 2.2 per second, about 82% of the 2.69 per second")
        and "below capacity" in below
    )


def test_small_values_are_written_without_an_exponent():
    """G of 0.0003903 1/s with a 95% interval 0.0003077 to 0.0004728: half its width is
    0.00008255, written out (the catalog's 4 significant digits would read 8.255e-05)."""
    result = SchedulerResult("static", 10, 0.0003903, 0.0003077, 0.0004728, None)
    assert card_interval("G", result) == "± 0.00008255 (95% interval 0.0003077 to 0.0004728 1/s)"
    assert change_words("G", pair(-0.00001234, -0.00002, -0.000005, 0, "worse")) == (
        "-0.00001234 1/s, 95% interval -0.00002 to -0.000005 1/s, better at 0 of 10 seeds"
    )


def test_the_interval_wording_is_the_frequentist_one():
    assert INTERVAL_WORDING == ("95% interval: an interval computed this way covers the true mean in 95 of 100 studies")
    assert "confidence" not in INTERVAL_WORDING
    assert np.isclose(demo_regime("below").load, 2.2 / 2.695)
