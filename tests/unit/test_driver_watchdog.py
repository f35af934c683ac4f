"""The wall-clock driver's stop and cancel rules (runners.drivers.watchdog), on hand-made states."""

from __future__ import annotations

from dataclasses import replace

from runners.drivers.watchdog import CANCELLED, DeadInstance, RunState, Watchdog, stalled_message, time_limit_message

# a run in its middle: requests still arriving, two being served, three held, nothing wrong
GOING = RunState(now_s=5.0, arrivals_done=False, requests_in_flight=2, pending=3, wake_at=None, all_done=False)


def _watchdog(max_duration_s: float = 10.0) -> Watchdog:
    return Watchdog(policy_name="static", max_duration_s=max_duration_s)


def test_a_healthy_run_goes_on():
    assert _watchdog().stop_reason(GOING) is None


def test_the_time_limit_fires_only_after_max_duration_s():
    watchdog = _watchdog(10.0)
    assert watchdog.stop_reason(replace(GOING, now_s=9.75)) is None
    assert watchdog.stop_reason(replace(GOING, now_s=10.0)) is None  # at the limit: not past it yet
    assert watchdog.stop_reason(replace(GOING, now_s=10.25)) == "time limit: not finished after max_duration_s = 10 s"
    assert _watchdog(float("inf")).stop_reason(replace(GOING, now_s=1e9)) is None  # no limit


def test_a_stall_needs_every_condition():
    stalled = replace(GOING, arrivals_done=True, requests_in_flight=0)
    assert _watchdog().stop_reason(stalled) == "3 requests never completed: static stopped dispatching"
    # any one of these means something could still dispatch the held requests (or none is held)
    assert _watchdog().stop_reason(replace(stalled, arrivals_done=False)) is None  # a request yet to arrive
    assert _watchdog().stop_reason(replace(stalled, requests_in_flight=1)) is None  # one still being served
    assert _watchdog().stop_reason(replace(stalled, wake_at=7.5)) is None  # the policy asked to be woken
    assert _watchdog().stop_reason(replace(stalled, pending=0)) is None  # nothing held
    assert _watchdog().stop_reason(replace(stalled, all_done=True)) is None


def test_an_exited_server_stops_the_run_naming_the_first():
    dead = [DeadInstance(1, "http://127.0.0.1:8001", -9), DeadInstance(2, "http://127.0.0.1:8002", 1)]
    reason = _watchdog().stop_reason(replace(GOING, dead=dead))
    assert reason == "engine instance 1 (http://127.0.0.1:8001) exited with code -9"


def test_the_first_rule_that_fires_gives_the_reason():
    everything = RunState(
        now_s=20.0,
        arrivals_done=True,
        requests_in_flight=0,
        pending=4,
        wake_at=None,
        all_done=False,
        dead=[DeadInstance(0, "http://h:1", 3)],
    )
    watchdog = _watchdog(10.0)
    assert watchdog.stop_reason(everything) == stalled_message(4, "static")
    assert watchdog.stop_reason(replace(everything, pending=0)) == "engine instance 0 (http://h:1) exited with code 3"
    assert watchdog.stop_reason(replace(everything, pending=0, dead=())) == time_limit_message(10.0)


def test_cancel_asks_should_stop_each_time():
    answers = iter([False, False, True])
    watchdog = Watchdog(policy_name="fcfs", max_duration_s=10.0, should_stop=lambda: next(answers))
    assert watchdog.cancellable
    assert [watchdog.cancel_requested() for _ in range(3)] == [False, False, True]
    assert CANCELLED == "cancelled by the user"
    without = _watchdog()
    assert not without.cancellable and not without.cancel_requested()
