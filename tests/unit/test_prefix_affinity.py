"""prefix-affinity (issue 31), by hand: a gateway's index of the blocks it sent each instance,
routing to the instance holding most of a prompt while loads are balanced, the least-loaded one
otherwise, longest cached prefix first, and the bounded wait that keeps anyone from starving."""

from __future__ import annotations

from runners.registry import make_policy
from runners.schedulers.base import Completion, InstanceInfo
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO

SYSTEM = (7, 64)  # a 64-token system prompt: 4 blocks of 16


def _request(rid: str, segments, arrival: float = 0.0) -> Request:
    tokens = sum(length for _, length in segments)
    return Request(rid, "chat", "x", tokens, 10, arrival, TaskSLO(e2e_s=30.0), "", tuple(segments))


def _policy(**params):
    policy = make_policy("prefix-affinity", params)
    policy.start([InstanceInfo(0, 100_000, 16, 64), InstanceInfo(1, 100_000, 16, 64)], 0.0)
    return policy


def test_a_shared_prompt_follows_its_blocks_and_a_new_one_goes_to_the_least_loaded():
    policy = _policy()
    policy.on_arrival(_request("a", [SYSTEM, (1, 32)]), 0.0)
    assert [(d.request_id, d.instance) for d in policy.decide(0.0).dispatches] == [("a", 0)]
    # b shares a's 4 system blocks of its 6: instance 0 holds 4/6 >= 10%, one more in flight is balanced
    policy.on_arrival(_request("b", [SYSTEM, (2, 32)], 0.1), 0.1)
    assert policy.matched("b", 0) == 4 / 6 and policy.matched("b", 1) == 0.0
    assert [(d.request_id, d.instance) for d in policy.decide(0.1).dispatches] == [("b", 0)]
    # c shares nothing: the least-loaded instance
    policy.on_arrival(_request("c", [(3, 96)], 0.2), 0.2)
    assert [(d.request_id, d.instance) for d in policy.decide(0.2).dispatches] == [("c", 1)]


def test_affinity_gives_way_to_the_load_check():
    policy = _policy(imbalance=1)
    for index in range(3):
        policy.on_arrival(_request(f"s{index}", [SYSTEM, (10 + index, 32)]), 0.0)
        policy.decide(0.0)
    # s0 went to 0; s1 followed it (1 in flight there against 0: within 1); s2 would make it 2 against 0
    assert {rid: next(i for i, f in policy.in_flight.items() if rid in f) for rid in ("s0", "s1", "s2")} == {
        "s0": 0,
        "s1": 0,
        "s2": 1,
    }


def test_longest_cached_prefix_first_then_the_bounded_wait():
    policy = _policy(max_in_flight=1)
    policy.on_arrival(_request("warm", [SYSTEM, (1, 32)]), 0.0)
    policy.decide(0.0)  # instance 0 now holds the system prompt's blocks
    policy.on_arrival(_request("other", [(2, 96)], 0.0), 0.0)
    policy.decide(0.0)  # instance 1
    policy.on_arrival(_request("cold", [(3, 96)], 0.1), 0.1)
    policy.on_arrival(_request("shared", [SYSTEM, (4, 32)], 0.2), 0.2)
    assert policy.decide(0.3).dispatches == []  # both instances full
    policy.on_completion(Completion("warm", 0, 10, 10, True), 0.5)
    # a slot on instance 0: "shared" (4/6 of its blocks cached there) before the older "cold"
    assert [(d.request_id, d.instance) for d in policy.decide(0.5).dispatches] == [("shared", 0)]
    # past max_wait_s (2 s) a request goes first whatever its prefix
    policy.on_arrival(_request("shared2", [SYSTEM, (5, 32)], 2.2), 2.2)
    policy.on_completion(Completion("shared", 0, 10, 10, True), 2.3)
    assert [d.request_id for d in policy.decide(2.3).dispatches] == ["cold"]
