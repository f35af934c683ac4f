"""The alpha-protection baselines' overflow handling (003): the paper's clear-on-overflow (every
active request, or each with probability beta, cancelled and re-prefilled), the engine-preempt
option, the livelock that ends a run as stalled, and parameters outside the paper's meaning."""

from __future__ import annotations

import pytest

from runners.errors import ConfigError
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.schedulers.base import Completion, InstanceInfo, PolicyStalled, TelemetrySample
from runners.schedulers.memory_constrained import AlphaBetaClearPolicy, AlphaBetaParams, AlphaParams, AlphaProtectPolicy
from runners.store.result_store import load_run
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO

SLO = TaskSLO(e2e_s=60.0)


def request(name: str, arrival_s: float, prompt: int = 300, output: int = 500) -> Request:
    return Request(name, "chat", "", prompt, output, arrival_s, SLO)


def started(policy) -> object:
    """A 1,000-token cache in 1-token blocks (no rounding slack), no latency model; requests
    A, B, C, D of 300-token prompts arrive at 0, 1, 2, 3 s. With alpha = 0.1 the limit is 900
    tokens, so the first decision admits A, B, C (300 + 300 + 300 = 900) and D waits."""
    policy.start([InstanceInfo(0, 1000, 1, None)], 0.0)
    for index, name in enumerate("ABCD"):
        policy.on_arrival(request(name, float(index)), float(index))
    assert [d.request_id for d in policy.decide(3.0).dispatches] == ["A", "B", "C"]
    policy.on_telemetry(TelemetrySample(0, 3.25, 0.9, 3, 0, 0), 3.25)  # the preemption count's baseline
    return policy


def sample(policy, t_s: float, preemptions: int) -> None:
    policy.on_telemetry(TelemetrySample(0, t_s, 1.0, 3, 0, preemptions), t_s)


def test_an_overflow_clears_every_active_request_and_readmits_them_in_arrival_order():
    policy = started(AlphaProtectPolicy(AlphaParams(alpha=0.1)))
    for name in "ABC":
        policy.on_first_token(name, 0, 3.3)
    sample(policy, 3.5, 1)  # the engine had to preempt: the cache overflowed
    decision = policy.decide(3.5)
    assert decision.cancels == ["A", "B", "C"]
    # back as unprocessed, ahead of D (arrival order); the cache is empty again, so the same
    # three are admitted (the last sample's 100% usage predates the clear and is not used)
    assert [d.request_id for d in decision.dispatches] == ["A", "B", "C"]
    assert list(policy.pending) == ["D"]
    assert policy.in_flight[0] == {"A", "B", "C"} and policy.cleared == 3
    assert all(policy.tokens_done[name] == 0 for name in "ABC")  # progress lost: re-prefilled


def test_a_rise_in_the_interval_of_a_clear_is_that_clear_not_a_new_overflow():
    policy = started(AlphaProtectPolicy(AlphaParams(alpha=0.1)))
    sample(policy, 3.5, 1)
    assert policy.decide(3.5).cancels == ["A", "B", "C"]
    sample(policy, 3.75, 2)  # may have come before the clear at 3.5 + a little
    assert policy.decide(3.75).cancels == []
    sample(policy, 4.0, 2)  # no rise
    assert policy.decide(4.0).cancels == []


def test_the_same_requests_cleared_twice_with_no_completion_is_a_livelock():
    policy = started(AlphaProtectPolicy(AlphaParams(alpha=0.1)))
    sample(policy, 3.5, 1)
    assert policy.decide(3.5).cancels == ["A", "B", "C"]  # first clear: readmitted from scratch
    sample(policy, 3.75, 1)
    sample(policy, 4.0, 2)  # A, B, C from scratch overflowed again before any finished
    with pytest.raises(PolicyStalled, match=r"instance 0: the same 3 requests \(A, B, C\).*cleared 2 times"):
        policy.decide(4.0)


def test_a_completion_between_clears_is_no_livelock():
    policy = started(AlphaProtectPolicy(AlphaParams(alpha=0.1)))
    sample(policy, 3.5, 1)
    assert policy.decide(3.5).cancels == ["A", "B", "C"]
    policy.on_completion(Completion("A", 0, 500, 500, True), 5.0)
    sample(policy, 5.25, 1)
    sample(policy, 5.5, 2)
    decision = policy.decide(5.5)  # B and C cleared: another set, the count starts again
    assert decision.cancels == ["B", "C"]
    assert [d.request_id for d in decision.dispatches] == ["B", "C", "D"]  # 300 + 300 + 300 = 900
    sample(policy, 5.75, 2)
    sample(policy, 6.0, 3)
    assert policy.decide(6.0).cancels == ["B", "C", "D"]  # a third set: still no livelock
    sample(policy, 6.25, 3)
    sample(policy, 6.5, 4)
    with pytest.raises(PolicyStalled, match="the same 3 requests"):
        policy.decide(6.5)


def test_beta_clears_each_request_with_probability_beta_and_never_declares_a_livelock():
    # numpy's default_rng(0) draws 0.637, 0.270, 0.041 for A, B, C: with beta = 0.5 B and C go
    policy = started(AlphaBetaClearPolicy(AlphaBetaParams(alpha=0.1, beta=0.5, clear_seed=0)))
    policy.on_first_token("A", 0, 3.3)
    sample(policy, 3.5, 1)
    decision = policy.decide(3.5)
    assert decision.cancels == ["B", "C"]
    assert "A" in policy.running[0] and policy.running[0]["A"] == 3.3  # A keeps its progress
    # A holds 300 + 1 + trunc(0.2 s / 0.03 s default step) = 307 tokens: B fits (607 <= 900), C not (907)
    assert [d.request_id for d in decision.dispatches] == ["B"] and list(policy.pending) == ["C", "D"]
    for preemptions, t_s in ((2, 4.0), (3, 4.5), (4, 5.0), (5, 5.5)):  # repeated overflows: random, no stall
        sample(policy, t_s - 0.25, preemptions - 1)
        sample(policy, t_s, preemptions)
        policy.decide(t_s)


def test_beta_one_clears_everything_and_can_livelock():
    policy = started(AlphaBetaClearPolicy(AlphaBetaParams(alpha=0.1, beta=1.0)))
    sample(policy, 3.5, 1)
    assert policy.decide(3.5).cancels == ["A", "B", "C"]
    sample(policy, 3.75, 1)
    sample(policy, 4.0, 2)
    with pytest.raises(PolicyStalled, match="cleared 2 times"):
        policy.decide(4.0)


def test_engine_preempt_leaves_the_overflow_to_the_engine():
    for policy in (
        AlphaProtectPolicy(AlphaParams(alpha=0.1, overflow="engine-preempt")),
        AlphaBetaClearPolicy(AlphaBetaParams(alpha=0.1, beta=1.0, overflow="engine-preempt")),
    ):
        started(policy)
        for preemptions, t_s in ((1, 3.5), (2, 3.75), (3, 4.0)):
            sample(policy, t_s, preemptions)
            assert policy.decide(t_s).cancels == []
        assert policy.in_flight[0] == {"A", "B", "C"}


def burst(results, run_id, scheduler, **settings):
    """80 requests at once (seed 4) on a 16,384-token KV cache, simulated; ``settings``: more
    top-level config keys (max_duration_s, ...)."""
    config = {
        "run_id": run_id,
        "workload": {"requests": 80, "seed": 4, "arrival": {"process": "all-at-once"}},
        "engine": {"kv_capacity_tokens": 16_384},
        "scheduler": scheduler,
        **settings,
    }
    return execute_run(parse_config(config), results)


def test_a_livelocked_run_ends_at_once_as_stalled_with_every_row_kept(results_dir):
    # alpha = 0 admits all 80 requests of the burst at once (their prompts fit the 16,384 tokens);
    # as they decode the cache overflows before any finishes, again after the clear: stalled at
    # the second clear, a few seconds in, not at the one-hour time limit
    outcome = burst(results_dir, "loop", {"name": "alpha-protect", "params": {"alpha": 0.0}}, max_duration_s=3600)
    assert outcome.status == "failed"
    assert outcome.error.startswith("stalled: alpha-protect: instance 0: the same 80 requests")
    run = load_run(results_dir, "loop")
    assert len(run.requests) == 80 and run.requests["e2e_s"].isna().all()
    assert (run.requests["slices"] >= 2).all()  # every request was cleared and sent again
    assert run.timeseries["t_s"].max() < 60  # ended promptly


def test_a_finished_run_with_clears_counts_latency_from_arrival(results_dir):
    # alpha = 0.1, beta = 0.2: requests are cleared and resent, and all finish
    outcome = burst(results_dir, "abc", {"name": "alpha-beta-clear", "params": {"alpha": 0.1, "beta": 0.2}})
    assert outcome.status == "done" and outcome.summary.preemptions > 0
    run = load_run(results_dir, "abc")
    requests = run.requests
    resent = requests[requests["slices"] > 1]
    assert len(resent) > 0 and (requests["output_tokens"] == requests["target_output_tokens"]).all()
    # the first clear comes at the first sample showing an engine preemption; a cleared request's
    # first token (of its last dispatch) comes after it, and is counted from its arrival at 0 s
    first_clear = run.timeseries.loc[run.timeseries["preemptions"] > 0, "t_s"].min()
    assert (requests["arrival_s"] == 0).all() and (resent["ttft_s"] > first_clear).all()


@pytest.mark.parametrize(
    "params, field",
    [
        ({"alpha": 1.0}, "alpha"),
        ({"alpha": -0.1}, "alpha"),
        ({"beta": 0.0}, "beta"),
        ({"beta": 1.5}, "beta"),
        ({"overflow": "drop"}, "overflow"),
    ],
)
def test_parameters_outside_the_papers_meaning_are_refused_by_name(params, field):
    with pytest.raises(ConfigError, match=rf"scheduler\.params\.{field}"):
        parse_config(
            {"run_id": "x", "workload": {"requests": 5}, "scheduler": {"name": "alpha-beta-clear", "params": params}}
        )
