"""The serving front end's delay in the simulator, its fit, and the fidelity report (issue 13)."""

from __future__ import annotations

import math

import pytest
import yaml

from runners.app.profiler import StepSample, fit_serving_overhead, fit_step_profile, fit_table
from runners.engines.fidelity import (
    compare_level,
    fidelity_sentence,
    judged_quantity,
    missed_targets,
    nearest_level,
    parse_levels,
    quantity_keys,
    resolvable,
    target_for,
)
from runners.engines.latency_model import LatencyModel, LinearStepModel, ServingOverhead
from runners.engines.profile import load_profile
from runners.errors import ConfigError, SchedlabError
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.models import RunSummary

STEP = {
    "kind": "linear-step",
    "fixed_s": 0.002,
    "per_prefill_token_s": 1e-5,
    "per_decode_request_s": 1e-4,
    "per_context_token_s": 0.0,
    "per_request_cpu_s": 0.0,
}


def _profile(tmp_path, overhead: dict | None, name: str = "p.yaml") -> str:
    data = {
        "name": "hand",
        "step_model": STEP,
        "kv_capacity_tokens": 65536,
        "block_size": 16,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 2048,
    }
    if overhead is not None:
        data["serving_overhead"] = overhead
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _run(tmp_path, profile: str, requests: int, rate: float | None, **engine) -> RunSummary:
    arrival = {"process": "all-at-once"} if rate is None else {"process": "poisson", "rate": rate}
    config = parse_config(
        {
            "engine": {"kind": "sim", "profile": profile, **engine},
            "workload": {"requests": requests, "seed": 3, "arrival": arrival},
            "scheduler": {"name": "fcfs"},
        }
    )
    outcome = execute_run(config, tmp_path / "results")
    assert outcome.status == "done"
    return outcome.summary


# -- the simulator's serving overhead ---------------------------------------------------------------
def test_one_request_waits_the_overhead_before_the_engine(tmp_path):
    with_overhead = _profile(tmp_path, {"request_s": 0.01, "per_prompt_token_s": 0.0})
    alone = _run(tmp_path, with_overhead, 1, None)
    engine_only = _run(tmp_path, with_overhead, 1, None, serving_overhead=False)
    # one request on an idle engine: every token 10 ms later, the gaps between them unchanged
    assert alone.ttft_s.mean - engine_only.ttft_s.mean == pytest.approx(0.01, abs=1e-12)
    assert alone.e2e_s.mean - engine_only.e2e_s.mean == pytest.approx(0.01, abs=1e-12)
    assert alone.tpot_s.mean == pytest.approx(engine_only.tpot_s.mean, rel=1e-12)


def test_the_per_prompt_token_term_and_no_overhead_profile(tmp_path):
    per_token = _profile(tmp_path, {"request_s": 0.0, "per_prompt_token_s": 1e-3})
    plain = _profile(tmp_path, None, "plain.yaml")
    delayed = _run(tmp_path, per_token, 1, None)
    engine_only = _run(tmp_path, plain, 1, None)
    config = parse_config(
        {
            "engine": {"kind": "sim", "profile": plain},
            "workload": {"requests": 1, "seed": 3, "arrival": {"process": "all-at-once"}},
        }
    )
    from runners.run.benchmark import prepare_run

    prompt = prepare_run(config).workload.requests[0].input_tokens
    assert delayed.ttft_s.mean - engine_only.ttft_s.mean == pytest.approx(prompt * 1e-3, abs=1e-12)


def test_busy_engine_term_applies_only_to_requests_arriving_while_it_runs(tmp_path):
    import pandas as pd

    frames = {}
    for busy in (0.0, 0.05):
        profile = _profile(
            tmp_path, {"request_s": 0.004, "per_prompt_token_s": 0.0, "busy_engine_s": busy}, f"busy{busy}.yaml"
        )
        config = parse_config(
            {
                "engine": {"kind": "sim", "profile": profile},
                "workload": {"requests": 2, "seed": 3, "arrival": {"process": "constant", "rate": 100.0}},
                "scheduler": {"name": "fcfs"},
            }
        )
        outcome = execute_run(config, tmp_path / "results")
        frames[busy] = pd.read_parquet(outcome.folder / "requests.parquet").sort_values("arrival_s")
    quiet, loud = frames[0.0]["ttft_s"].tolist(), frames[0.05]["ttft_s"].tolist()
    assert loud[0] == pytest.approx(quiet[0], abs=1e-12)  # the first finds the engine idle
    # the second arrives 10 ms later, while the first decodes: 50 ms more in the front end, give or
    # take where the engine's step boundaries fall (each step here is under 4 ms)
    assert 0.05 - 0.004 <= loud[1] - quiet[1] <= 0.05 + 0.004


def test_overhead_under_load_keeps_every_request_and_latency_counts_from_arrival(tmp_path):
    with_overhead = _profile(tmp_path, {"request_s": 0.005, "per_prompt_token_s": 1e-6})
    loaded = _run(tmp_path, with_overhead, 200, 40.0)
    engine_only = _run(tmp_path, with_overhead, 200, 40.0, serving_overhead=False)
    assert loaded.completed == engine_only.completed == 200
    # the front end's delay is added, never hidden: at least 5 ms more TTFT for every request
    assert loaded.ttft_s.mean >= engine_only.ttft_s.mean + 0.005 - 1e-9


def test_memory_constrained_policy_cancelling_through_the_front_end(tmp_path, monkeypatch):
    # a policy that clears in-flight requests, some still in the front end when it does
    from runners.drivers.virtual_time import VirtualTimeDriver
    from runners.schedulers.memory_constrained import AlphaBetaClearPolicy

    drivers, in_front_end = [], []
    init, decide = VirtualTimeDriver.__init__, AlphaBetaClearPolicy.decide

    def remember(self, *args, **kwargs):
        init(self, *args, **kwargs)
        drivers.append(self)

    def spy(self, now):
        decision = decide(self, now)
        in_front_end.extend(r for r in decision.cancels if r in drivers[-1]._admitting_ids)
        return decision

    monkeypatch.setattr(VirtualTimeDriver, "__init__", remember)
    monkeypatch.setattr(AlphaBetaClearPolicy, "decide", spy)
    # (a front end of 1 s, so a clear finds requests dispatched but not yet in the engine: 2 here)
    profile = _profile(tmp_path, {"request_s": 1.0, "per_prompt_token_s": 0.0})
    config = parse_config(
        {
            "engine": {"kind": "sim", "profile": profile, "kv_capacity_tokens": 4096},
            "workload": {"requests": 120, "seed": 5, "arrival": {"process": "poisson", "rate": 50}},
            "scheduler": {"name": "alpha-beta-clear"},
        }
    )
    outcome = execute_run(config, tmp_path / "results")
    assert outcome.status == "done" and outcome.summary.completed == 120, outcome.error
    assert in_front_end  # some cancels reached requests the engine had not seen yet
    assert not drivers[-1]._admitting and not drivers[-1]._admitting_ids


def test_profile_with_negative_or_missing_overhead_term(tmp_path):
    with pytest.raises(ConfigError, match=r"serving_overhead\.request_s"):
        load_profile(_profile(tmp_path, {"request_s": -0.001, "per_prompt_token_s": 0.0}))
    with pytest.raises(ConfigError, match=r"serving_overhead\.per_prompt_token_s"):
        load_profile(_profile(tmp_path, {"request_s": 0.001}))


def test_alone_latency_includes_the_overhead():
    model = LatencyModel.of_step(LinearStepModel(**STEP), ServingOverhead(request_s=0.004, per_prompt_token_s=1e-6))
    ttft, _ = model.alone_latency(100, 10)
    assert ttft == pytest.approx(0.002 + 100 * 1e-5 + 0.004 + 100 * 1e-6)


# -- fitting it ------------------------------------------------------------------------------------
def _overhead_samples(n: int) -> list[StepSample]:
    """4 ms + 2 us per prompt token, + 1.5 ms when sent while 4 or 16 requests decode."""
    rows = [(tokens, decodes) for decodes in (0, 4, 16) for tokens in (16, 128, 512, 1500)]
    return [
        StepSample("overhead", 1, tokens, decodes, 0, 0.004 + 2e-6 * tokens + (0.0015 if decodes else 0.0), "hand")
        for tokens, decodes in rows[:n]
    ]


def test_fit_serving_overhead_recovers_exact_terms_and_refuses_too_few():
    overhead, report = fit_serving_overhead(_overhead_samples(12))
    assert overhead.request_s == pytest.approx(0.004, rel=1e-9)
    assert overhead.per_prompt_token_s == pytest.approx(2e-6, rel=1e-9)
    assert overhead.busy_engine_s == pytest.approx(0.0015, rel=1e-9)
    assert overhead.per_running_request_s == pytest.approx(0.0, abs=1e-12)
    assert overhead.seconds(100, running=4) == pytest.approx(0.004 + 2e-4 + 0.0015)
    assert ServingOverhead(request_s=0.001, per_prompt_token_s=0.0, per_running_request_s=1e-4).seconds(
        10, running=8
    ) == pytest.approx(0.0018)
    assert report["n"] == 12 and report["n_busy"] == 8 and report["mape_out_of_fold"] < 1e-9
    assert report["mean_idle_s"] == pytest.approx(0.004 + 2e-6 * (16 + 128 + 512 + 1500) / 4)
    assert fit_serving_overhead([]) is None
    with pytest.raises(SchedlabError, match="need at least 12 measured requests .* got 8"):
        fit_serving_overhead(_overhead_samples(8))


def test_profile_fit_keeps_overhead_samples_out_of_the_step_model():
    steps = [StepSample("prefill", 1, t, 0, 0, 0.002 + 1e-5 * t, "hand") for t in (16, 64, 256, 512, 1024, 2000)]
    steps += [StepSample("decode", 0, 0, d, d * 100, 0.002 + 1e-4 * d, "hand") for d in (1, 2, 4, 8, 16, 32, 64)]
    steps += [
        StepSample("mixed", 1, t, d, d * 100, 0.002 + 1e-5 * t + 1e-4 * d, "hand")
        for t, d in ((100, 4), (400, 16), (700, 48), (250, 8), (900, 2))
    ]
    profile = fit_step_profile(steps + _overhead_samples(12), "t", "hand", 65536, 16, 64, 2048)
    assert profile.fit["points"] == {"prefill": 6, "decode": 7, "mixed": 5}
    assert profile.step_model.fixed_s == pytest.approx(0.002, rel=1e-6)
    assert profile.serving_overhead.request_s == pytest.approx(0.004, rel=1e-6)
    rows = dict(map(tuple, fit_table(profile)[1:]))
    assert rows["serving overhead request_s"] == "0.004"
    assert rows["serving overhead busy_engine_s"] == "0.0015"
    assert rows["out-of-fold MAPE serving overhead"].endswith("(n=12)")


# -- the report ------------------------------------------------------------------------------------
def _summary(ttft: float, tpot: float = 0.002, e2e: float = 0.5, tps: float = 1000.0) -> dict:
    return {
        "ttft_s": {"mean": ttft, "p90": 2 * ttft},
        "tpot_s": {"mean": tpot, "p90": 2 * tpot},
        "e2e_s": {"mean": e2e, "p90": 2 * e2e},
        "output_throughput_tps": tps,
    }


def test_compare_level_by_hand():
    real = [_summary(0.010), _summary(0.020), _summary(0.010)]
    sim = [_summary(0.0105), _summary(0.019), _summary(0.011)]
    level = compare_level(0.5, 4.0, [101, 102, 103], real, sim)
    q = level["quantities"]["ttft_s.mean"]
    assert q["errors"] == pytest.approx([0.05, -0.05, 0.10])
    assert q["mean_error"] == pytest.approx(0.1 / 3)
    # sd of (0.05, -0.05, 0.10) = 0.0763763, t(0.975, 2) = 4.302653: half-width 0.189729
    assert q["ci95"] == pytest.approx([0.1 / 3 - 0.189729, 0.1 / 3 + 0.189729], abs=1e-6)
    assert q["max_abs_error"] == pytest.approx(0.10)
    # judged on the mean absolute error: (0.05 + 0.05 + 0.10) / 3 = 0.0667 > 5%, although the signed
    # mean (+3.3%) is within it: errors of opposite signs do not cancel. sd of (0.05, 0.05, 0.10) =
    # 0.0288675, half-width 4.302653 x 0.0288675 / sqrt(3) = 0.071710
    assert q["mean_abs_error"] == pytest.approx(0.2 / 3)
    assert q["abs_ci95"] == pytest.approx([0.2 / 3 - 0.071710, 0.2 / 3 + 0.071710], abs=1e-6)
    assert q["target"] == 0.05 and q["met"] is False and q["met_surely"] is False
    assert level["quantities"]["tpot_s.mean"]["mean_error"] == 0.0
    assert not level["saturated"]
    over = compare_level(1.2, 9.6, [101, 102, 103], real, sim)
    assert over["saturated"] and over["quantities"]["ttft_s.mean"]["target"] == 0.10
    assert over["quantities"]["ttft_s.p90"]["target"] is None and over["quantities"]["ttft_s.p90"]["met"] is None


def test_one_seed_has_no_interval_and_a_miss_is_reported_by_how_much():
    level = compare_level(0.2, 2.0, [101], [_summary(0.010)], [_summary(0.004)])
    q = level["quantities"]["ttft_s.mean"]
    assert q["ci95"] is None and q["mean_error"] == pytest.approx(-0.6) and q["met"] is False
    assert q["abs_ci95"] is None and q["met_surely"] is None
    lines = missed_targets({"levels": [level]})
    assert lines[0] == "20% load: mean TTFT mean |error| 60.0% (target within 5%, missed by 55.0%; bias -60.0%)"
    assert any("p90 TTFT" in line for line in lines)


def test_a_miss_within_the_engines_own_noise_says_so():
    """Where the real engine run twice differed by more than the target, a miss cannot be told
    from noise on that machine: the line says so, and whether the error exceeds that difference."""
    level = compare_level(0.5, 5.0, [101], [_summary(0.010)], [_summary(0.004)])  # TTFT error -60%
    level["real_repeat"] = {"ttft_s.mean": -0.70, "ttft_s.p90": 0.02}
    lines = missed_targets({"levels": [level]})
    assert lines[0] == (
        "50% load: mean TTFT mean |error| 60.0% (target within 5%, missed by 55.0%; bias -60.0%); not resolvable "
        "here: the real engine differed from itself by 70.0%, above the target (the error is within that)"
    )
    assert lines[1].endswith("bias -60.0%)")  # p90: the engine repeated itself within 2%: a real miss
    level["real_repeat"]["ttft_s.mean"] = 0.30
    assert missed_targets({"levels": [level]})[0].endswith("(the error is larger than that)")
    assert resolvable(level, "ttft_s.mean", 0.05) is False and resolvable(level, "ttft_s.p90", 0.10) is True
    assert resolvable(level, "e2e_s.mean", 0.05) is None  # not repeated


def test_a_schema_1_report_is_judged_on_its_per_seed_errors():
    # issue 25's example: per-seed TPOT errors -9.2%, +4.2%, -2.2% read "-2.4% ok" on the signed mean
    old = {"errors": [-0.092, 0.042, -0.022], "mean_error": -0.024, "target": 0.05, "met": True}
    q = judged_quantity(old)
    assert q["mean_abs_error"] == pytest.approx(0.052) and q["met"] is False and q["met_surely"] is False
    assert judged_quantity({**old, "target": None})["met"] is None


def test_targets_and_quantities():
    assert quantity_keys() == [
        "ttft_s.mean",
        "ttft_s.p90",
        "tpot_s.mean",
        "tpot_s.p90",
        "e2e_s.mean",
        "e2e_s.p90",
        "output_throughput_tps",
    ]
    assert target_for("e2e_s.mean", False) == 0.05 and target_for("e2e_s.p90", False) == 0.10
    assert target_for("output_throughput_tps", False) is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("abc", "expected comma-separated fractions"),
        ("", "at least one load level"),
        ("0.5,0", "0 is not a load level"),
        ("4", "4 is not a load level"),
        ("nan", "nan is not a load level"),
    ],
)
def test_bad_levels_name_the_option(text, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_levels(text)
    assert caught.value.field == "--levels"


def test_levels_are_sorted_and_distinct():
    assert parse_levels("1.2,0.2,0.5,0.2") == [0.2, 0.5, 1.2]


def test_sentence_picks_the_nearest_level():
    real = [_summary(0.010)] * 2
    report = {
        "workload": "mixed chat + code",
        "levels": [
            compare_level(0.2, 2.0, [1, 2], real, [_summary(0.0104)] * 2),
            compare_level(1.2, 12.0, [1, 2], real, [_summary(0.0130)] * 2),
        ],
    }
    assert nearest_level(report, 3.0)["level"] == 0.2
    assert nearest_level(report, None)["level"] == 1.2
    light = fidelity_sentence("tiny", report, 3.0)
    assert light.startswith("simulated with profile tiny: mean TTFT within 4.0% of the real engine")
    assert "at 20% of its capacity (2 req/s, 2 seeds, mixed chat + code)" in light
    assert light.endswith("meets the fidelity targets there")
    heavy = fidelity_sentence("tiny", report, 11.0)
    assert "within 30.0%" in heavy and "misses the target for mean TTFT" in heavy
    assert fidelity_sentence("tiny", None, 3.0) == (
        "simulated with profile tiny: not validated here (no fidelity report: bench/sim_fidelity.py makes one)"
    )
    assert fidelity_sentence("qwen2.5-7b-2xv100-vllm", None, 3.0) == (
        "simulated with profile qwen2.5-7b-2xv100-vllm: paper coefficients, not validated here"
    )
    assert not math.isnan(report["levels"][0]["quantities"]["e2e_s.mean"]["mean_error"])


def _bench():
    from bench import sim_fidelity

    return sim_fidelity


def test_a_level_the_engine_cannot_serve_is_named_and_the_measured_levels_kept():
    bench = _bench()
    assert bench.unserved({"_status": "done", "failed": 0, "completed": 200}, 200) is None
    assert bench.unserved({"_status": "done", "failed": 3, "completed": 197}, 200) == "3 of 200 requests failed"
    assert bench.unserved({"_status": "stopped", "_error": "time limit", "failed": 0}, 200) == "run stopped: time limit"
    real = [_summary(0.010)] * 3
    report = {
        "date": "d",
        "engine": "e",
        "profile": "p",
        "workload": "w",
        "requests_per_run": 200,
        "seeds": [1, 2, 3],
        "capacity_rps": 10.0,
        "capacity_note": "n",
        "levels": [compare_level(0.2, 2.0, [1, 2, 3], real, [_summary(0.0102)] * 3)],
        "failed_levels": [
            {
                "level": 1.5,
                "rate_rps": 15.0,
                "error": "the real engine cannot be measured here (seed 1: 9 of 200 requests failed)",
            }
        ],
    }
    text = bench.markdown(report)
    assert "| mean TTFT (ms) real / sim | 10 / 10.2: 2.0% [2.0%, 2.0%] (bias +2.0%, max 2.0%)" in text
    assert "## Levels not measured" in text
    assert "- 150% (15.00 req/s): the real engine cannot be measured here (seed 1: 9 of 200 requests failed)" in text
