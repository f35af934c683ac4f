"""Baseline policies through the pure interface: time only arrives as an argument."""

from __future__ import annotations

import pytest

from runners.errors import ConfigError, UnknownNameError
from runners.registry import SCHEDULERS, make_policy, scheduler_parameters
from runners.schedulers.base import Completion, InstanceInfo
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO

SLO = TaskSLO(e2e_s=30)
INSTANCES = [InstanceInfo(0, 1000, 16, 256), InstanceInfo(1, 1000, 16, 256)]


def request(i: int, arrival: float = 0.0) -> Request:
    return Request(f"r{i}", "code", "p", 10, 20, arrival, SLO)


def test_registry_lists_baselines_and_rejects_unknown_names():
    assert {"fcfs", "static"} <= set(SCHEDULERS)
    assert scheduler_parameters("static")["batch_size"]["default"] == 8
    with pytest.raises(
        UnknownNameError, match="scheduler.name: unknown name 'nope'; expected one of: alpha-beta-clear"
    ):
        make_policy("nope")
    with pytest.raises(ConfigError, match="scheduler.params.batch_size"):
        make_policy("static", {"batch_size": 0})
    with pytest.raises(ConfigError, match="scheduler.params.batch_sizes"):
        make_policy("static", {"batch_sizes": 4})


def test_fcfs_dispatches_on_arrival_to_least_loaded():
    policy = make_policy("fcfs")
    policy.start(INSTANCES, 0.0)
    for i in range(3):
        policy.on_arrival(request(i), 0.0)
    decision = policy.decide(0.0)
    assert [(d.request_id, d.instance) for d in decision.dispatches] == [("r0", 0), ("r1", 1), ("r2", 0)]
    assert all(d.max_tokens is None for d in decision.dispatches)
    assert policy.decide(0.1).dispatches == []


def test_static_batches_wait_for_the_whole_previous_batch():
    policy = make_policy("static", {"batch_size": 2})
    policy.start(INSTANCES[:1], 0.0)
    for i in range(5):
        policy.on_arrival(request(i), 0.0)
    first = policy.decide(0.0).dispatches
    assert [d.request_id for d in first] == ["r0", "r1"]
    policy.on_completion(Completion("r0", 0, 20, 20, True), 1.0)
    assert policy.decide(1.0).dispatches == []  # r1 still running: no new batch
    policy.on_completion(Completion("r1", 0, 20, 20, True), 2.0)
    assert [d.request_id for d in policy.decide(2.0).dispatches] == ["r2", "r3"]


def test_static_fill_timeout_asks_to_be_woken():
    policy = make_policy("static", {"batch_size": 4, "fill_timeout_s": 0.5})
    policy.start(INSTANCES[:1], 0.0)
    policy.on_arrival(request(0, 1.0), 1.0)
    decision = policy.decide(1.0)
    assert decision.dispatches == [] and decision.wake_at == pytest.approx(1.5)
    assert [d.request_id for d in policy.decide(1.5).dispatches] == ["r0"]


def test_unfinished_slice_returns_request_to_the_pool():
    policy = make_policy("fcfs")
    policy.start(INSTANCES[:1], 0.0)
    policy.on_arrival(request(0), 0.0)
    policy.decide(0.0)
    policy.on_completion(Completion("r0", 0, 8, 8, False), 1.0)
    assert policy.remaining_tokens("r0") == 12
    assert [d.request_id for d in policy.decide(1.0).dispatches] == ["r0"]
