"""No leaked knowledge (issue 25): what a policy knows before a run comes from outside it, and
every oracle a user chooses is named in the run's results."""

import json
import math

import numpy as np
import pytest

from runners.engines.planning_model import PROFILE_NOISE, fit_phase_coefficients, planning_model
from runners.engines.sim_config import SimulatorConfig
from runners.run.benchmark import _calibrated_engine_params, execute_run
from runners.run.config import parse_config
from runners.run.knowledge import oracle_tag, scheduler_display
from runners.schedulers.in_engine import EngineDynamicMemoryPolicyParams
from runners.workload.builder import CALIBRATION_SAMPLE, build_workload
from runners.workload.config import WorkloadConfig
from runners.workload.slo import TaskSLO

SLOS = {"chat": TaskSLO(e2e_s=10.0), "code": TaskSLO(e2e_s=10.0)}


def test_the_calibration_sample_holds_none_of_the_runs_conversations():
    workload = build_workload(WorkloadConfig(requests=200, seed=3), SLOS)
    sent = {(r.task, r.prompt) for r in workload.requests}
    assert {task: len(lengths) for task, lengths in workload.calibration.items()} == {
        "chat": CALIBRATION_SAMPLE,
        "code": CALIBRATION_SAMPLE,
    }
    # drawn on its own stream: the run's requests are those of a build that never drew it
    again = build_workload(WorkloadConfig(requests=200, seed=3), SLOS)
    assert [r.prompt for r in again.requests] == [r.prompt for r in workload.requests]
    assert workload.calibration == again.calibration
    assert workload.reports["chat"]["calibration_sample"] == CALIBRATION_SAMPLE
    # the held-out lengths are not the run's: the run's own moments differ from the sample's
    chat_run = [r.target_output_tokens for r in workload.requests if r.task == "chat"]
    assert np.mean(workload.calibration["chat"]) != pytest.approx(np.mean(chat_run), rel=1e-6)
    assert len(sent) == 200


def test_the_simulators_policies_plan_with_a_fitted_model_and_its_error_is_reported():
    resolved = SimulatorConfig().resolve()
    args = (
        resolved.latency,
        resolved.kv_capacity_tokens,
        resolved.block_size,
        resolved.max_num_seqs,
        resolved.max_num_batched_tokens,
    )
    fitted = planning_model(*args, seed=1)
    assert fitted.source == "fitted" and not fitted.oracle
    assert fitted.model != resolved.latency  # never the engine's own object or coefficients
    assert fitted.fit["profile_noise_prefill"] == PROFILE_NOISE["prefill"]
    assert 0 < fitted.fit["error_vs_engine_prefill"] < 0.5 and 0 < fitted.fit["error_vs_engine_decode"] < 0.2
    assert fitted.fit["prefill_points"] == 30.0  # 5 batch sizes x 3 prompts x 2 outputs, all fit 256 slots
    assert planning_model(*args, seed=1).model == fitted.model  # the same seed, the same fit
    assert planning_model(*args, seed=2).model != fitted.model
    truth = planning_model(*args, source="engine-truth")
    assert truth.model is resolved.latency and truth.oracle and truth.record()["oracle"] is True
    # a known error: each coefficient times max(0, 1 + e z), the factors recorded
    erred = planning_model(*args, source="engine-truth", error=0.1, seed=5)
    assert len(erred.factors) == 8
    assert erred.model.decode.beta == pytest.approx(resolved.latency.decode.beta * erred.factors["decode.beta"])
    assert any(abs(factor - 1) > 0.01 for factor in erred.factors.values())


def test_the_phase_fit_is_the_non_negative_least_squares_solution():
    # exact data of alpha 1e-4, beta 5.7e-3, gamma 1e-5, delta 0.04367: recovered exactly
    b = np.array([1, 2, 4, 8, 1, 2, 4, 8], dtype=float)
    length = np.array([32, 32, 32, 32, 512, 512, 512, 512], dtype=float)
    y = 1e-4 * b * length + 5.7e-3 * b + 1e-5 * length + 0.04367
    fit = fit_phase_coefficients(b, length, y)
    assert fit.coefficients.alpha == pytest.approx(1e-4) and fit.coefficients.delta == pytest.approx(0.04367)
    assert fit.rmse_s == pytest.approx(0.0, abs=1e-12)
    # data whose plain least-squares slope in l is negative: NNLS clamps it at 0
    fit = fit_phase_coefficients([1, 1, 1, 1], [1, 2, 3, 4], [4.0, 3.0, 2.0, 1.0])
    assert fit.coefficients.gamma == 0.0 and fit.coefficients.alpha == 0.0


def test_an_in_engine_calibration_prior_reaches_the_engine_as_given_moments():
    params = EngineDynamicMemoryPolicyParams()
    assert params.output_prior == "calibration"
    # chat [100, 300] (mean 200, var 20,000), code [400] (mean 400, var 0), mixed 3 chat : 1 code:
    # mean 250, variance 0.75 (20,000 + 200^2) + 0.25 (0 + 400^2) - 250^2 = 22,500
    given = _calibrated_engine_params(params, {"chat": [100, 300], "code": [400]}, {"chat": 3, "code": 1})
    assert given.output_prior == "given"
    assert given.output_mean == pytest.approx(250.0) and given.output_std == pytest.approx(math.sqrt(22_500))
    assert _calibrated_engine_params(params, {}, {"chat": 1}).output_prior == "cold"
    oracle = EngineDynamicMemoryPolicyParams(output_prior="max_tokens")
    assert _calibrated_engine_params(oracle, {"chat": [1]}, {"chat": 1}) is oracle


def run(results, run_id, scheduler, params=None, **engine):
    config = {
        "run_id": run_id,
        "engine": {"kind": "sim", "max_num_seqs": 4, **engine},
        "workload": {"requests": 30, "arrival": {"process": "all-at-once"}},
        "scheduler": {"name": scheduler, "params": params or {}},
    }
    return execute_run(parse_config(config), results)


def test_a_run_records_what_its_policy_knew_and_names_every_oracle(results_dir):
    plain = run(results_dir, "plain", "slo-sa")
    assert plain.summary.oracle == [] and oracle_tag(plain.summary) == ""
    assert scheduler_display(plain.summary) == "slo-sa"
    knowledge = json.loads((plain.folder / "config.json").read_text())["resolved"]["knowledge"]
    assert set(knowledge["calibration"]) == {"chat", "code"}
    assert knowledge["calibration"]["chat"]["count"] == CALIBRATION_SAMPLE
    assert knowledge["planning_model"]["source"] == "fitted" and knowledge["planning_model"]["fit"]["mape_decode"] > 0
    oracle = run(results_dir, "oracle", "slo-sa", {"output_prior": "workload"}, planning_model="engine-truth")
    assert oracle.summary.oracle == [
        "oracle: the mean and spread of this run's own output lengths (output_prior workload-oracle)",
        "oracle: the simulated engine's own latency model (engine.planning_model engine-truth)",
    ]
    assert scheduler_display(oracle.summary) == "slo-sa (oracle)"


def test_the_phase_fit_is_the_same_bits_whatever_blas_and_matches_scipy():
    """The fit goes through no BLAS kernel (runners.engines.least_squares): scipy's NNLS gives the
    same coefficients to rounding, and a design with a negative unconstrained slope is clamped as
    NNLS clamps it."""
    from scipy.optimize import nnls

    from runners.engines.least_squares import least_squares, nonnegative_least_squares

    rng = np.random.default_rng(3)
    for trial in range(40):
        n = int(rng.integers(4, 60))
        columns = [rng.uniform(0, 10, n) for _ in range(int(rng.integers(1, 6)))]
        y = rng.normal(0, 5, n) + (trial % 3) * columns[0]
        got = nonnegative_least_squares(columns, y)
        want = nnls(np.column_stack(columns), y)[0]
        assert got == pytest.approx(list(want), rel=1e-7, abs=1e-9)
    # exact data: recovered exactly by the unconstrained solve; dependent columns: None
    assert least_squares([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]], [5.0, 7.0, 9.0]) == pytest.approx([2.0, 3.0])
    assert least_squares([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]], [1.0, 2.0, 3.0]) is None
    with pytest.raises(ValueError, match="at most 8"):
        nonnegative_least_squares([[1.0]] * 9, [1.0])
