"""The simulator at a million requests (issue 28): bench/sim_speed.py still runs in its quick mode
(not its timings), and the shortcuts that make a long run faster give what the long ways gave -
silent decode steps taken inside the driver, a decode step's time without the feature row, a
sample's row without the row object, the task means from the drawn lengths, and the run's
objects hidden from the garbage collector while it goes."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from runners.drivers import virtual_time
from runners.engines.latency_model import LatencyModel, LinearStepModel, PhaseCoefficients
from runners.engines.simulator import SimulatedInstance, _decode_step_time
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.timeseries import TimeseriesRow, engine_sample_values
from runners.workload.builder import Workload, build_workload
from runners.workload.config import WorkloadConfig
from runners.workload.slo import TaskSLO

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_the_simulator_benchmark_runs_in_quick_mode():
    before = (ROOT / "bench" / "results" / "sim_speed.json").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "bench.sim_speed", "--quick"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "execute_run, 10,000 requests:" in done.stdout and "done, 10,000 completed" in done.stdout
    assert "whole process, 10,000 requests:" in done.stdout
    assert "quick mode: nothing written" in done.stdout
    assert (ROOT / "bench" / "results" / "sim_speed.json").read_bytes() == before  # quick writes nothing


def _run(tmp_path: Path, name: str, **config) -> Path:
    base = {
        "workload": {"requests": 400, "seed": 21, "arrival": {"process": "poisson", "rate": 6}},
        "scheduler": {"name": "fcfs"},
        "run_id": name,
    }
    outcome = execute_run(parse_config({**base, **config}), tmp_path)
    assert outcome.status == "done"
    return outcome.folder


@pytest.mark.parametrize("engine", [{}, {"instances": 2}, {"kv_capacity_tokens": 8192}])
def test_silent_steps_taken_inside_the_driver_change_nothing(tmp_path, monkeypatch, engine):
    """The same run with the driver taking silent steps (steady decoders alone, no one finishing)
    itself, and with it taking every step through its main loop (SILENT_STEPS 0): identical
    request and time-series tables; most steps of a steady run are silent."""
    taken = []
    original = virtual_time.VirtualTimeDriver._silent_steps

    def counting(self, *args):
        before = sum(instance.steps_total for instance in self.instances)
        result = original(self, *args)
        taken.append(sum(instance.steps_total for instance in self.instances) - before)
        return result

    monkeypatch.setattr(virtual_time.VirtualTimeDriver, "_silent_steps", counting)
    config = {"engine": {"kind": "sim", **engine}}
    fused = _run(tmp_path, "fused", **config)
    steps = sum(taken)
    monkeypatch.setattr(virtual_time, "SILENT_STEPS", 0)
    taken.clear()
    each = _run(tmp_path, "each", **config)
    assert sum(taken) == 0
    assert steps > 1000  # 400 requests of ~100s of tokens: thousands of silent decode steps
    for name in ("requests.parquet", "timeseries.parquet"):
        assert pq.read_table(fused / name).equals(pq.read_table(each / name)), name


def test_a_decode_step_time_is_the_latency_models_bit_for_bit():
    rng = np.random.default_rng(5)
    step = LinearStepModel(
        fixed_s=0.0123456789,
        per_prefill_token_s=1.7e-5,
        per_decode_request_s=3.3e-4,
        per_context_token_s=1.1e-7,
        per_request_cpu_s=2.9e-5,
        idle_start_s=0.004,
    )
    phase = LatencyModel(
        prefill=PhaseCoefficients(alpha=1e-7, beta=2e-4, gamma=3e-6, delta=0.02),
        decode=PhaseCoefficients(alpha=3e-8, beta=1.3e-4, gamma=7e-7, delta=0.011),
    )
    for model in (LatencyModel.of_step(step), phase):
        quick = _decode_step_time(model)
        for requests, context in zip(rng.integers(1, 512, 300).tolist(), rng.integers(1, 10**7, 300).tolist()):
            assert quick(requests, context) == model.step_time(0, 0, requests, context)
        assert quick(3, 1000) > 0.011


def test_a_steady_decode_step_is_planned_as_the_whole_batch_plan_gives_it():
    """Three requests decoding steadily: the shortcut starts the step with the free blocks,
    duration and decoders the general plan gives."""

    def engine():
        latency = LatencyModel(
            prefill=PhaseCoefficients(alpha=1e-7, beta=2e-4, gamma=3e-6, delta=0.02),
            decode=PhaseCoefficients(alpha=3e-8, beta=1.3e-4, gamma=7e-7, delta=0.011),
        )
        instance = SimulatedInstance(instance_id=0, latency=latency, kv_capacity_tokens=4096, block_size=16)
        for number, prompt in enumerate((30, 17, 64)):
            instance.add(f"r{number}", prompt, 40)
        for now in (0.1, 0.2):  # the prefill, then the first decode step: all three steady after it
            instance.start_step()
            instance.finish_step(now)
        return instance

    quick, general = engine(), engine()
    general._start_decode_step = lambda: None  # type: ignore[method-assign]  # the general path
    assert quick.start_step() == general.start_step() > 0.011
    assert quick.free_blocks == general.free_blocks < 256
    assert quick.silent_step() and general.silent_step()
    assert quick.finish_silent_step(0.3) == 3
    outcome = general.finish_step(0.3)
    assert (outcome.tokens, outcome.first_tokens, outcome.finished) == (3, [], [])
    assert list(quick.step_times) == list(general.step_times) and quick.steps_total == general.steps_total == 3


def test_a_samples_values_are_its_rows():
    row = TimeseriesRow(
        t_s=2.5, instance=1, kv_usage=0.25, running=3, waiting=0, preemptions=2, tokens_per_s=88.0,
        gateway_pending=4, in_flight=5,
    )  # fmt: skip
    assert engine_sample_values(2.5, 1, 0.25, 3, 0, 2, 88.0, 4, 5) == row.values()


def test_task_means_from_the_drawn_lengths_are_the_requests_means():
    slos = {"chat": TaskSLO(ttft_s=1.0, tpot_s=0.1), "code": TaskSLO(e2e_s=30.0)}
    workload = build_workload(WorkloadConfig(requests=3000, seed=4), slos)
    assert workload.lengths
    plain = Workload(workload.requests)  # no drawn lengths: the means of the requests
    for task in ("chat", "code"):
        assert workload.mean_lengths(task) == plain.mean_lengths(task) is not None
    only_chat = build_workload(WorkloadConfig(requests=50, seed=4, ratio={"chat": 1, "code": 0}), slos)
    assert only_chat.mean_lengths("code") is None and only_chat.mean_lengths("chat") is not None


def test_the_run_hides_its_objects_from_the_collector_and_hands_them_back(tmp_path, monkeypatch):
    seen = []
    original = virtual_time.VirtualTimeDriver._simulate

    def watching(self):
        seen.append(gc.get_freeze_count())
        return original(self)

    monkeypatch.setattr(virtual_time.VirtualTimeDriver, "_simulate", watching)
    _run(tmp_path, "frozen", workload={"requests": 50, "arrival": {"process": "poisson", "rate": 6}})
    assert seen[0] > 1000  # the workload's requests and records among them
    assert gc.get_freeze_count() == 0
