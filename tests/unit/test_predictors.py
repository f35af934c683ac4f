"""Output-length predictors as the SLO-aware paper (004, sections 4.2 and 5.1) uses them: a
per-task Gaussian warmed from the workload or a previous run, pooled with finished requests,
predictions following the refreshed fit; oracle and noisy-oracle for its Fig. 9."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runners.errors import ConfigError
from runners.registry import make_policy, scheduler_parameters
from runners.schedulers.predictors import (
    OutputLengthPredictor,
    OutputPriorParams,
    RunningMoments,
    history_moments,
    moments_by_task,
    oracle_knowledge,
    prior_moments,
)
from runners.store.result_store import RunWriter
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO

SLO = TaskSLO(e2e_s=30.0)


def request(rid: str, task: str, target: int) -> Request:
    return Request(rid, task, "", 10, target, 0.0, SLO)


#: the first standard-normal draw of numpy's default_rng(0): every prediction below is hand-checked from it
Z0 = float(np.random.default_rng(0).standard_normal())


def test_warm_prior_from_a_tiny_workload_is_each_tasks_mean_and_sample_std():
    workload = [
        request("a", "chat", 10),
        request("b", "chat", 20),
        request("c", "chat", 30),
        request("d", "code", 100),
        request("e", "code", 300),
    ]
    predictor = OutputLengthPredictor()
    predictor.warm(prior_moments("workload-oracle", workload=workload))
    assert predictor.fitted("chat") == pytest.approx((20.0, 10.0))  # std of 10, 20, 30 (n - 1)
    assert predictor.fitted("code") == pytest.approx((200.0, math.sqrt(20_000.0)))  # 141.42
    assert predictor.fitted("other") is None


def test_online_update_pools_finished_requests_into_the_prior_and_moves_waiting_predictions():
    predictor = OutputLengthPredictor(seed=0)
    predictor.warm(moments_by_task([("chat", 10), ("chat", 20), ("chat", 30)]))
    waiting = request("w", "chat", 999)
    assert predictor.predict(waiting) == round(20 + 10 * Z0)  # 21 (z = 0.1257)
    predictor.observe("chat", 60)
    mean, std = predictor.fitted("chat")
    assert mean == pytest.approx(30.0)  # (10 + 20 + 30 + 60) / 4
    assert std == pytest.approx(math.sqrt((400 + 100 + 0 + 900) / 3))  # 21.60
    # the same deviate, the refreshed Gaussian: 30 + 21.60 * 0.1257 = 32.7
    assert predictor.predict(waiting) == round(30 + std * Z0) == 33


def test_cold_prior_until_a_task_finishes_then_the_fit():
    predictor = OutputLengthPredictor(prior_tokens=256)
    waiting = request("w", "code", 999)
    assert predictor.predict(waiting) == 256
    predictor.observe("code", 40)
    assert predictor.predict(waiting) == 40  # one observation: mean 40, std 0


def test_merge_equals_adding_one_at_a_time():
    values = [3.0, 8.0, 1.0, 20.0, 7.0]
    pooled = RunningMoments.of(values[:2])
    pooled.merge(RunningMoments.of(values[2:]))
    assert pooled.count == 5
    assert pooled.mean == pytest.approx(np.mean(values))
    assert pooled.std == pytest.approx(np.std(values, ddof=1))


def test_oracles_stay_available():
    exact = OutputLengthPredictor(mode="oracle")
    assert exact.predict(request("r", "chat", 123)) == 123
    noisy = OutputLengthPredictor(mode="noisy-oracle", noise=0.1, seed=0)
    assert noisy.predict(request("r", "chat", 1000)) == round(1000 * (1 + 0.1 * Z0))  # 1013


def write_run(results, run_id: str, rows: list[dict]) -> str:
    writer = RunWriter(results, run_id, {"scheduler": {"name": "fcfs"}}, {"scheduler": "fcfs"})
    for row in rows:
        writer.add_request(row)
    writer.close("done", {})
    return str(writer.folder)


def test_history_prior_from_a_previous_runs_finished_requests(results_dir):
    folder = write_run(
        results_dir,
        "prev",
        [
            {"request_id": "1", "task": "chat", "output_tokens": 10},
            {"request_id": "2", "task": "chat", "output_tokens": 30},
            {"request_id": "3", "task": "code", "output_tokens": 5},
            {"request_id": "4", "task": "code", "output_tokens": 500, "error": "timeout"},  # failed: not counted
        ],
    )
    moments = history_moments(folder)
    assert (moments["chat"].count, moments["chat"].mean, moments["chat"].std) == (
        2,
        20.0,
        pytest.approx(math.sqrt(200)),
    )
    assert (moments["code"].count, moments["code"].mean) == (1, 5.0)
    policy = make_policy("slo-sa", {"output_prior": "history", "output_history": folder})
    from runners.engines.sim_config import SimulatorConfig
    from runners.schedulers.base import InstanceInfo

    policy.start([InstanceInfo(0, 10_000, 16, 4, SimulatorConfig().resolve().latency)], 0.0)
    assert policy.outputs.fitted("chat") == pytest.approx((20.0, math.sqrt(200)))


def test_bad_history_and_predictor_parameters_are_refused_naming_the_field(results_dir, tmp_path):
    def refused(params: dict, message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            make_policy("slo-sa", params)

    refused({"output_prior": "history"}, r"scheduler.params.output_history: .*needs a previous run's folder")
    refused(
        {"output_prior": "history", "output_history": str(tmp_path / "nope")},
        r"scheduler.params.output_history: .*does not exist",
    )
    parquet = tmp_path / "requests.parquet"
    parquet.write_bytes(b"PAR1")
    refused(
        {"output_prior": "history", "output_history": str(parquet)},
        r"scheduler.params.output_history: .*is a file, not a run folder",
    )
    (tmp_path / "plain").mkdir()
    refused(
        {"output_prior": "history", "output_history": str(tmp_path / "plain")},
        r"scheduler.params.output_history: .*not a run folder \(no summary.json\)",
    )
    study = tmp_path / "study"
    study.mkdir()
    (study / "study.json").write_text("{}")
    refused(
        {"output_prior": "history", "output_history": str(study)},
        r"scheduler.params.output_history: .*is a study, not a run folder",
    )
    empty = write_run(results_dir, "empty", [{"request_id": "1", "task": "chat", "output_tokens": 0, "error": "x"}])
    refused(
        {"output_prior": "history", "output_history": empty},
        r"scheduler.params.output_history: .*holds no finished request",
    )
    refused({"output_history": empty}, r"scheduler.params.output_history: is only read with output_prior 'history'")
    refused({"output_prior": "yesterday"}, r"scheduler.params.output_prior")
    refused({"noise": -0.1}, r"scheduler.params.noise")  # a negative std


def test_the_calibration_prior_is_the_held_out_sample_and_oracles_are_named():
    calibration = {"chat": [10, 20, 30], "code": [100, 300]}
    predictor = OutputLengthPredictor.from_params(
        OutputPriorParams(), workload=[request("a", "chat", 999)], calibration=calibration
    )
    assert predictor.fitted("chat") == pytest.approx((20.0, 10.0))  # the sample's, not the run's 999
    assert predictor.fitted("code") == pytest.approx((200.0, math.sqrt(20_000.0)))
    assert OutputPriorParams(output_prior="workload").output_prior == "workload-oracle"  # the old name
    assert oracle_knowledge(OutputPriorParams()) == []
    assert oracle_knowledge(OutputPriorParams(output_prior="workload-oracle")) == [
        "oracle: the mean and spread of this run's own output lengths (output_prior workload-oracle)"
    ]
    assert oracle_knowledge(OutputPriorParams(output_predictor="oracle")) == [
        "oracle: each request's exact output length (output_predictor oracle)"
    ]


def test_the_prior_source_and_its_default_are_in_the_schedulers_help():
    info = scheduler_parameters("slo-sa")
    assert info["output_prior"]["default"] == "calibration"
    for source in ("calibration:", "history:", "cold:", "workload-oracle:"):
        assert source in info["output_prior"]["description"]
    assert "previous run's folder" in info["output_history"]["description"]
