"""The linear step model: hand-computed steps, fitting, cross-validation, profile files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from runners.app.profiler import (
    StepSample,
    cross_validate,
    fit_step_model,
    fit_step_profile,
    fold_indices,
    read_step_samples,
    write_step_samples,
)
from runners.engines.latency_model import LatencyModel, LinearStepModel, PhaseCoefficients
from runners.engines.profile import QWEN25_7B_2XV100, EngineProfile, load_profile
from runners.engines.sim_config import SimulatorConfig
from runners.errors import ConfigError, SchedlabError

# fixed 4 ms, 0.1 ms per prompt token, 0.5 ms per decode, 1 us per context token, 0.2 ms per request
STEP = LinearStepModel(
    fixed_s=0.004, per_prefill_token_s=1e-4, per_decode_request_s=5e-4, per_context_token_s=1e-6, per_request_cpu_s=2e-4
)
MODEL = LatencyModel.of_step(STEP)


def test_hand_computed_pure_and_mixed_steps():
    assert MODEL.kind == "linear-step"
    # one prompt of 300 tokens: 4 + 30 + 0.2 ms
    assert MODEL.step_time(1, 300, 0, 0) == pytest.approx(0.0342)
    # 8 decodes over 800 context tokens: 4 + 8 * 0.5 + 0.8 + 8 * 0.2 ms
    assert MODEL.step_time(0, 0, 8, 800) == pytest.approx(0.0104)
    # both in one step: one fixed cost, not two (4 + 30 + 4 + 0.8 + 9 * 0.2 ms)
    assert MODEL.step_time(1, 300, 8, 800) == pytest.approx(0.0406)
    assert MODEL.step_time(1, 300, 0, 0) + MODEL.step_time(0, 0, 8, 800) == pytest.approx(0.0446)
    assert MODEL.step_time(0, 0, 0, 0) == 0.0


def test_phase_view_equals_the_step_model_on_pure_steps():
    # eq. 14: 2 prompts of 100 tokens = 0.1 ms * 200 + 0.2 ms * 2 + 4 ms
    assert MODEL.prefill_time(2, 100) == pytest.approx(0.0244)
    # eq. 15: 8 decodes at context 100 = 1 us * 800 + (0.5 + 0.2) ms * 8 + 4 ms
    assert MODEL.decode_step_time(8, 100) == pytest.approx(0.0104)
    for b in (1, 3, 16):
        for l in (10, 250, 2000):
            assert MODEL.prefill_time(b, l) == pytest.approx(MODEL.step_time(b, b * l, 0, 0))
            assert MODEL.decode_step_time(b, l) == pytest.approx(MODEL.step_time(0, 0, b, b * l))
    ttft, e2e = MODEL.alone_latency(119, 40)
    assert ttft == pytest.approx(0.004 + 0.0119 + 0.0002)
    assert e2e == pytest.approx(ttft + sum(MODEL.step_time(0, 0, 1, 119 + k) for k in range(1, 40)))


def test_table2_phase_model_unchanged():
    table2 = QWEN25_7B_2XV100.latency_model()
    assert table2.kind == "phase" and table2.step is None
    # mixed step: 2 prompts (600 tokens) + 8 decodes over 4000 context tokens, in milliseconds:
    # prefill 0.1*600 + 5.7*2 + 0.01*300 = 74.4, decode 0.0002*4000 + 0.275*8 + 0.00088*500 = 3.44,
    # plus max(delta_p, delta_d) = 43.67
    assert table2.step_time(2, 600, 8, 4000) == pytest.approx(0.12151)
    assert table2.prefill_time(1, 100) == pytest.approx((0.1 * 100 + 5.7 + 0.01 * 100 + 43.67) / 1000)


def test_old_phase_profile_file_still_loads(tmp_path):
    data = {
        "name": "old",
        "units": "seconds",
        "kv_capacity_tokens": 4096,
        "prefill": {"alpha": 5e-4, "beta": 8e-4, "gamma": 1e-4, "delta": 0.0},
        "decode": {"alpha": 2e-7, "beta": 8e-4, "gamma": 8e-7, "delta": 0.004},
    }
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data))
    profile = load_profile(path)
    assert profile.latency_kind == "phase" and profile.step_model is None
    # one prompt of 200 tokens: 5e-4*200 + 8e-4 + 1e-4*200 + 0 = 0.1208 s
    assert profile.latency_model().step_time(1, 200, 0, 0) == pytest.approx(0.1208)
    assert load_profile(profile.to_file(tmp_path / "again.yaml")) == profile


def test_step_profile_round_trip_writes_only_the_step_model(tmp_path):
    profile = EngineProfile(name="s", kv_capacity_tokens=4096, step_model=STEP)
    path = profile.to_file(tmp_path / "s.json")
    data = json.loads(path.read_text())
    assert "prefill" not in data and "decode" not in data and data["step_model"]["kind"] == "linear-step"
    loaded = load_profile(path)
    assert loaded == profile and loaded.latency_model() == MODEL
    assert loaded.prefill == PhaseCoefficients(alpha=1e-4, beta=2e-4, gamma=0.0, delta=0.004)
    resolved = SimulatorConfig(profile=str(path)).resolve()
    assert resolved.latency.step_time(1, 300, 8, 800) == pytest.approx(0.0406)


def _write(tmp_path, step_model=None, **extra) -> str:
    data = {"name": "bad", "kv_capacity_tokens": 4096, **extra}
    if step_model is not None:
        data["step_model"] = step_model
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"per_prefill_token_s": -1e-4}, "step_model.per_prefill_token_s: Input should be greater than or equal to 0"),
        ({"fixed_s": float("nan")}, "step_model.fixed_s"),
        ({"per_request_cpu_s": float("inf")}, "step_model.per_request_cpu_s"),
        ({"per_context_token_s": None}, "step_model.per_context_token_s"),
        ({"kind": "quadratic"}, "step_model.kind"),
    ],
)
def test_bad_step_model_names_the_field(tmp_path, change, message):
    terms = {**STEP.model_dump(), **change}
    terms = {k: v for k, v in terms.items() if v is not None}
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_profile(_write(tmp_path, terms))


def test_missing_or_doubled_latency_model_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="step_model: Field required"):
        load_profile(_write(tmp_path))
    with pytest.raises(ConfigError, match="decode: Field required"):
        load_profile(_write(tmp_path, prefill={"alpha": 0, "beta": 0, "gamma": 0, "delta": 1}))
    with pytest.raises(ConfigError, match="not both"):
        load_profile(_write(tmp_path, STEP.model_dump(), prefill={"alpha": 0, "beta": 0, "gamma": 0, "delta": 1}))


# -- fitting ---------------------------------------------------------------------------------------
def synthetic_steps(model: LatencyModel, noise: float, seed: int = 0) -> list[StepSample]:
    rng = np.random.default_rng(seed)
    rows = [("prefill", 1, t, 0, 0) for t in (16, 64, 256, 512, 1024, 1536) for _ in range(2)]
    rows += [("decode", 0, 0, d, d * c) for d in (1, 4, 16, 64) for c in (50, 300, 900)]
    rows += [("mixed", p, p * t, d, d * 120) for p in (1, 2, 4) for t in (64, 448) for d in (1, 16, 48)]
    return [
        StepSample(k, p, t, d, c, model.step_time(p, t, d, c) * (1 + rng.normal(0, noise)), "synthetic")
        for k, p, t, d, c in rows
    ]


def test_fit_recovers_known_coefficients():
    exact = fit_step_model(synthetic_steps(MODEL, 0.0)).model
    for term, value in STEP.model_dump(exclude={"kind"}).items():
        assert getattr(exact, term) == pytest.approx(value, rel=1e-6, abs=1e-12)
    noisy = fit_step_model(synthetic_steps(MODEL, 0.02, seed=1))
    assert noisy.model.per_prefill_token_s == pytest.approx(1e-4, rel=0.05)
    assert noisy.model.fixed_s == pytest.approx(0.004, rel=0.15)
    assert noisy.model.per_decode_request_s + noisy.model.per_request_cpu_s == pytest.approx(7e-4, rel=0.15)
    assert 0.005 < noisy.mape < 0.04  # about the 2 % noise put in


def test_too_few_points_are_refused():
    samples = synthetic_steps(MODEL, 0.0)
    with pytest.raises(SchedlabError, match="need at least 18 measured steps .* got 17"):
        fit_step_model(samples[:17])
    fit_step_model(samples[:18])


def test_fold_indices_partition():
    folds = fold_indices(11, 3, seed=4)
    joined = np.sort(np.concatenate(folds))
    assert joined.tolist() == list(range(11)) and sorted(len(f) for f in folds) == [3, 4, 4]
    with pytest.raises(SchedlabError, match="2 <= folds <= samples"):
        fold_indices(3, 4)


def test_cross_validation_by_hand():
    # seven identical prefill steps timed 10..70 ms: every fit predicts one constant c, and the
    # relative-error weighting (1 / y) makes it minimise sum((c - y) / y)^2, so
    # c = sum(1 / y) / sum(1 / y^2) over the training set. Leave-one-out leaves out y_i = 10i ms:
    # c_i = 10 ms * H_i / Q_i, H_i = sum_{j != i} 1/j, Q_i = sum_{j != i} 1/j^2; error |H_i / Q_i - i| / i
    samples = [StepSample("prefill", 1, 100, 0, 0, 0.01 * i, "hand") for i in range(1, 8)]
    report = cross_validate(samples, "linear-step", folds=7)
    errors = []
    for i in range(1, 8):
        h = sum(1 / j for j in range(1, 8) if j != i)
        q = sum(1 / j**2 for j in range(1, 8) if j != i)
        errors.append(abs(h / q - i) / i)
    assert errors[0] == pytest.approx(2.1123, abs=1e-4)  # leaving out 10 ms: c = 31.1 ms
    assert np.mean(errors) == pytest.approx(0.786970, abs=1e-6)
    assert report["prefill"]["mape"] == pytest.approx(np.mean(errors))
    assert report["prefill"]["n"] == 7 and "decode" not in report
    errors_ms = [e * 10 * i for e, i in zip(errors, range(1, 8))]  # relative error x 10i ms
    assert report["all"]["rmse_s"] == pytest.approx(np.sqrt(np.mean(np.square(errors_ms))) / 1000)


def test_phase_model_on_step_samples_overcharges_mixed_steps():
    # steps made by the linear model: the phase model fits pure steps exactly (it contains them)
    # but costs a mixed step as both phases summed
    samples = synthetic_steps(MODEL, 0.0)
    step = cross_validate(samples, "linear-step", folds=5)
    phase = cross_validate(samples, "phase", folds=5)
    assert step["mixed"]["mape"] < 1e-6 and phase["prefill"]["mape"] < 1e-6 and phase["decode"]["mape"] < 1e-6
    assert phase["mixed"]["mape"] > 0.01


def test_fit_step_profile_and_samples_csv(tmp_path):
    samples = synthetic_steps(MODEL, 0.01)
    path = write_step_samples(samples, tmp_path / "s.csv")
    again = read_step_samples(path)
    assert [(s.kind, s.prefill_tokens, s.decode_context) for s in again] == [
        (s.kind, s.prefill_tokens, s.decode_context) for s in samples
    ]
    profile = fit_step_profile(again, "t", "test", 8192, 16, 64, 2048)
    assert profile.latency_kind == "linear-step"
    # the 12 prefill steps are 6 prompt lengths measured twice: merged into their medians (issue 48)
    assert profile.fit["points"] == {"prefill": 6, "decode": 12, "mixed": 18}
    assert profile.fit["robust"]["measured_steps"] == 42 and profile.fit["robust"]["repeats_merged"] == 6
    assert set(profile.fit["cross_validation"]) == {"prefill", "decode", "mixed", "all"}
    phase = fit_step_profile(again, "t", "test", 8192, 16, 64, 2048, model="phase")
    assert phase.latency_kind == "phase" and phase.step_model is None
    loaded = load_profile(profile.to_file(tmp_path / "t.yaml"))
    assert loaded.step_model == profile.step_model


def test_decode_and_mixed_steps_from_token_times():
    from runners.app.profiler import _mixed_sample, decode_samples

    a = [0.0, 0.01, 0.02, 0.03, 0.04]
    b = [0.001, 0.011, 0.021, 0.031, 0.041]
    # after b's first token (1 ms) both decode together; every gap ending by 40 ms is 10 ms; by the
    # window's middle (20.5 ms) a has 3 tokens and b 2, so context = 2 * 10 prompt tokens + 5
    [sample] = decode_samples([a, b], prompt_tokens=10, start=0.001, windows=1)
    assert (sample.kind, sample.decode_requests, sample.decode_context) == ("decode", 2, 25)
    assert sample.seconds == pytest.approx(0.01)
    # a slow step counts: up to the window's end (60 ms) a's gaps after 1 ms are 10, 30, 10 ms and b's
    # 10, 10, 10, 10 ms -> mean 90 / 7 ms (a median says 10)
    slow = decode_samples(
        [[0.0, 0.01, 0.02, 0.05, 0.06], [0.001, 0.011, 0.021, 0.031, 0.041, 0.061]],
        prompt_tokens=10,
        start=0.001,
        windows=1,
    )
    assert slow[0].seconds == pytest.approx(0.09 / 7)
    # two prompts' first tokens at 35.1 and 35.2 ms came out of the step that ended the decoders'
    # 15 ms gap (20 -> 35 ms): one mixed step of 2 prefills + 2 decodes at context 2 * (16 + 3)
    a = [0.0, 0.01, 0.02, 0.035, 0.045]
    b = [0.0005, 0.0105, 0.0205, 0.0355]
    mixed = _mixed_sample([a, b], [0.0351, 0.0352], prefill_tokens=400, prompt_tokens=16)
    assert (mixed.kind, mixed.prefill_requests, mixed.prefill_tokens, mixed.decode_requests, mixed.decode_context) == (
        "mixed",
        2,
        400,
        2,
        38,
    )
    assert mixed.seconds == pytest.approx(0.015)
    assert _mixed_sample([a, b], [0.0351, 0.045], prefill_tokens=400, prompt_tokens=16) is None  # two steps


def test_profile_fitted_on_too_few_steps_is_refused(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"bad\.yaml: fit\.points: the step model was fitted on 14 measured steps; its 6 "
        r"terms need at least 18",
    ):
        load_profile(_write(tmp_path, STEP.model_dump(), fit={"points": {"prefill": 4, "decode": 5, "mixed": 5}}))
    assert load_profile(_write(tmp_path, STEP.model_dump(), fit={"points": 18})).step_model == STEP
