"""The front end's cost to the engine per arriving request (ServingOverhead.busy_request_engine_s):
fitted by hand, measured against a server with a known answer, and charged by the simulator."""

from __future__ import annotations

import asyncio

import pytest

from runners.app.profiler import (
    INTERFERENCE_KIND,
    StepGrid,
    StepSample,
    fit_arrival_interference,
    fit_step_profile,
    measure_steps,
    read_step_samples,
    write_step_samples,
)
from runners.engines.latency_model import LatencyModel, LinearStepModel, ServingOverhead
from runners.engines.openai_client import Endpoint
from runners.engines.profile import EngineProfile, load_profile
from runners.engines.simulator import SimulatedInstance
from runners.errors import SchedlabError
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from tests.fakes.step_engine_server import StepEngineServer

STEP = LinearStepModel(
    fixed_s=0.004, per_prefill_token_s=1e-5, per_decode_request_s=5e-4, per_context_token_s=0.0, per_request_cpu_s=1e-4
)


def window(arrivals: int, seconds: float, steps: int, decodes: int = 8) -> StepSample:
    return StepSample(INTERFERENCE_KIND, arrivals, 64 * arrivals, decodes, 1000, seconds, "test", steps)


def test_fit_by_hand():
    windows = [window(0, 1.0, 200), window(0, 1.2, 240), window(20, 1.1, 200), window(10, 0.53, 100)]
    estimate, report = fit_arrival_interference(windows, STEP)
    # base step 2.2 / 440 = 5 ms; each arrival's prefill costs 64 * 1e-5 + 1e-4 = 0.74 ms in the model
    # window 3: 1.1 - 200 * 0.005 - 20 * 0.00074 = 0.0852 s for 20 arrivals; window 4: 0.0226 s for 10
    assert estimate == pytest.approx((0.0852 + 0.0226) / 30)
    assert report["per_window_mean_s"] == pytest.approx((0.0852 / 20 + 0.0226 / 10) / 2)
    assert report["by_decodes"]["8"]["base_step_s"] == pytest.approx(0.005)
    assert report["arrivals"] == 30 and report["windows"] == 4


def test_fit_needs_base_and_loaded_windows_and_never_goes_negative():
    assert fit_arrival_interference([window(0, 1.0, 200)], STEP) is None
    assert fit_arrival_interference([window(5, 1.0, 200)], STEP) is None
    assert fit_arrival_interference([], STEP) is None
    faster = fit_arrival_interference([window(0, 1.0, 200), window(10, 0.9, 200)], STEP)
    assert faster is not None and faster[0] == 0.0


def test_windows_round_trip_through_the_samples_file_and_old_files_read(tmp_path):
    path = write_step_samples([window(0, 1.0, 200), window(20, 1.1, 200)], tmp_path / "s.csv")
    assert [s.steps for s in read_step_samples(path)] == [200, 200]
    old = tmp_path / "old.csv"
    old.write_text(
        "kind,prefill_requests,prefill_tokens,decode_requests,decode_context,seconds,signal\ndecode,0,0,4,900,0.003,x\n"
    )
    assert read_step_samples(old)[0].steps == 1


def test_measured_against_a_server_with_a_known_answer():
    server = StepEngineServer(step_s=0.005, arrival_s=0.003).start()
    try:
        grid = StepGrid(
            interference_decodes=[4],
            interference_rates=[0.0, 40.0],
            interference_repeats=3,
            interference_output_tokens=160,
            warmup_requests=0,
        )
        endpoint = Endpoint(server.url, "fake", accepts_min_tokens=False)
        samples = asyncio.run(measure_steps(endpoint, grid, 2048, phases=("interference",)))
    finally:
        server.stop()
    assert [s.kind for s in samples] == [INTERFERENCE_KIND] * 6
    assert all(s.decode_requests == 4 and s.steps > 100 for s in samples)
    assert sum(s.prefill_requests for s in samples if "at 40/s" in s.signal) > 30
    free = LinearStepModel(
        fixed_s=0.005, per_prefill_token_s=0.0, per_decode_request_s=0.0, per_context_token_s=0.0, per_request_cpu_s=0.0
    )
    estimate, _ = fit_arrival_interference(samples, free)
    # The fit sees the fake's arrival_s (3 ms) plus the fake front end's own work per request on the
    # same event loop (HTTP parse, JSON, stream set-up): 0.2-0.6 ms measured against arrival_s=0 on a
    # quiet 2-core machine, and more under CI's two busy workers (one CI run fitted 4.09 ms). So the
    # known answer bounds the estimate from below (the injected cost cannot vanish) and the handler's
    # share bounds it loosely from above; a fit that lost the arrivals (about 0) or counted each
    # arrival per step (about 0.5 s per window) falls outside.
    assert 0.8 * 0.003 <= estimate <= 0.003 + 0.003


def test_unknown_phase_is_refused():
    with pytest.raises(SchedlabError, match="unknown phase"):
        asyncio.run(measure_steps(Endpoint("http://127.0.0.1:9", "x"), StepGrid(), 2048, phases=("prefil",)))


def test_profile_carries_the_fitted_cost(tmp_path):
    from tests.unit.test_step_model import synthetic_steps

    overhead = [StepSample("overhead", 1, 10 * i, 4 * (i % 3), 0, 0.003 + 1e-5 * i, "test") for i in range(1, 16)]
    windows = [window(0, 1.0, 200), window(20, 1.1, 200)]
    profile = fit_step_profile(
        synthetic_steps(LatencyModel.of_step(STEP), 0.0) + overhead + windows, "t", "test", 8192, 16, 64, 2048
    )
    assert profile.serving_overhead is not None
    assert profile.serving_overhead.busy_request_engine_s == pytest.approx((1.1 - 1.0 - 20 * 7.4e-4) / 20, rel=0.05)
    assert profile.fit["arrival_interference"]["arrivals"] == 20
    again = load_profile(profile.to_file(tmp_path / "t.yaml"))
    assert again.serving_overhead == profile.serving_overhead


def test_simulator_adds_the_charge_to_the_next_step_only():
    latency = LatencyModel.of_step(STEP, ServingOverhead(request_s=0.0, per_prompt_token_s=0.0))
    instance = SimulatedInstance(instance_id=0, latency=latency, kv_capacity_tokens=4096)
    instance.add("a", 10, 5)
    first = instance.start_step()
    instance.finish_step(first)
    plain = instance.start_step()
    instance.finish_step(first + plain)
    instance.charge_front_end(0.002)
    charged = instance.start_step()
    instance.finish_step(first + plain + charged)
    after = instance.start_step()
    assert plain == pytest.approx(STEP.step_time(0, 0, 1, 11))
    assert charged == pytest.approx(STEP.step_time(0, 0, 1, 12) + 0.002)
    assert after == pytest.approx(STEP.step_time(0, 0, 1, 13))


def _run(tmp_path, name: str, cost: float, arrival: dict) -> dict:
    profile = EngineProfile(
        name=name,
        source="test",
        step_model=STEP,
        serving_overhead=ServingOverhead(request_s=0.001, per_prompt_token_s=0.0, busy_request_engine_s=cost),
        kv_capacity_tokens=200_000,
        block_size=16,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
    )
    path = profile.to_file(tmp_path / f"{name}.yaml")
    config = {
        "engine": {"kind": "sim", "profile": str(path)},
        "workload": {"requests": 30, "seed": 3, "arrival": arrival},
        "scheduler": {"name": "fcfs"},
    }
    return execute_run(parse_config(config), tmp_path / name).summary


def test_a_run_pays_only_for_requests_that_arrive_while_the_engine_runs(tmp_path):
    poisson = {"process": "poisson", "rate": 20.0}
    free, charged = _run(tmp_path, "free", 0.0, poisson), _run(tmp_path, "charged", 0.002, poisson)
    assert charged.tpot_s.mean > free.tpot_s.mean
    assert charged.e2e_s.mean > free.e2e_s.mean
    # all at once: every request is dispatched before the engine runs any, so nothing is charged
    burst = {"process": "all-at-once"}
    assert _run(tmp_path, "burst-free", 0.0, burst).e2e_s == _run(tmp_path, "burst-charged", 0.002, burst).e2e_s
