"""Issue 27 defect 12: ETAs estimated from the plan until enough requests have ended, then measured
(runners.views.live: run_eta, job_eta, planned_clock_s, planned_wall_s), with hand-computed
numbers. The issue's early ETAs (2,625 s and 267 s for a job of about 70 s) came from the rate of
the first request or two, over a clock that counted the worker's own start."""

from __future__ import annotations

import tempfile

import pytest

from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.views.live import (
    Eta,
    job_eta,
    job_eta_s,
    measured_after,
    planned_clock_s,
    planned_wall_s,
    run_eta,
)


def test_enough_requests_is_a_tenth_and_at_least_twenty():
    assert measured_after(200) == 20
    assert measured_after(50) == 20
    assert measured_after(10) == 10  # never more than the run plans
    assert measured_after(10_000) == 1_000
    assert measured_after(0) == 0


def test_a_run_is_estimated_from_its_plan_until_twenty_requests_ended():
    # 2 of 200 ended 0.3 s into a run planned for 1.25 s: 0.95 s left, from the plan (the
    # measured rate would say 0.3 * 198 / 2 = 29.7 s)
    early = run_eta(0.3, 2, 200, planned_s=1.25)
    assert early == Eta(pytest.approx(0.95), False)
    assert early.text() == "about 1 s left (estimate from the plan)"
    # 20 of 200 in 0.6 s: measured, 0.6 * 180 / 20 = 5.4 s
    assert run_eta(0.6, 20, 200, planned_s=1.25) == Eta(pytest.approx(5.4), True)
    assert run_eta(0.6, 20, 200, planned_s=1.25).text() == "about 5 s left (measured)"
    # the plan ran out (2 s into a 1.25 s plan, 10 ended): measured, 2 * 190 / 10 = 38 s
    assert run_eta(2.0, 10, 200, planned_s=1.25) == Eta(pytest.approx(38.0), True)
    # no plan (as fast as possible): measured from the first request, 30 * 2 / 2 = 30 s
    assert run_eta(30.0, 2, 4, planned_s=None) == Eta(pytest.approx(30.0), True)
    assert run_eta(30.0, 0, 4, planned_s=None) is None
    assert run_eta(None, 5, 200, planned_s=1.25) is None  # not started
    assert run_eta(9.0, 200, 200, planned_s=1.25) is None  # every request ended


def test_the_issues_early_job_eta_is_estimated_from_the_plan():
    """10 runs of 200 requests, 2 at a time, each planned at 1.15 s: 3 s after the launch (the
    worker and its pool starting), one request of the first run ended. Measured, as before, that
    read 3 * 9.995 / 0.005 = 5,997 s; from the plan it is 9.995 runs * 1.15 s / 2 = 5.75 s."""
    eta = job_eta(3.0, 0, 10, 0.005, planned_run_s=1.15, workers=2, requests_per_run=200)
    assert eta == Eta(pytest.approx(9.995 * 1.15 / 2), False)
    assert eta.text(" for the whole job") == "about 6 s left for the whole job (estimate from the plan)"
    # a tenth of the job done (1 run ended, 0.2 of the running ones): measured, 2 * 8.8 / 1.2 s
    assert job_eta(2.0, 1, 10, 0.2, 1.15, 2, 200) == Eta(pytest.approx(2.0 * 8.8 / 1.2), True)
    # fewer runs left than workers: 3 runs on 4 workers run 3 at a time: 2.9 * 10 / 3 s
    assert job_eta(1.0, 0, 3, 0.1, planned_run_s=10.0, workers=4, requests_per_run=1000) == Eta(
        pytest.approx(2.9 * 10 / 3), False
    )
    # a tenth of the runs but fewer than 20 requests (2 runs of 5): still the plan, 1.5 * 4 s
    assert job_eta(1.0, 0, 2, 0.5, planned_run_s=4.0, requests_per_run=5) == Eta(pytest.approx(6.0), False)
    assert job_eta(3.0, 0, 10, 0.005) is None  # no plan and not enough done: nothing said
    assert job_eta(3.0, 10, 10, 0.0, 1.15) is None  # every run ended


def test_the_measured_job_eta_without_a_plan_is_as_before():
    # 2 runs ended and half of the third in 60 s: 2.5 of 10 runs, 7.5 left at 24 s each = 180 s
    assert job_eta_s(60.0, 2, 10, 0.5) == pytest.approx(180.0)
    assert job_eta_s(60.0, 0, 10, 0.0) is None


def test_a_real_engines_plan_is_its_arrivals_span():
    """201 requests at 4 req/s, the first at 0: the last arrives at 200 / 4 = 50 s; no capacity
    is known before the server runs, so that is the plan, in wall seconds; all at once: none."""
    attach = {"kind": "openai", "urls": "http://127.0.0.1:9"}
    paced = parse_config({"engine": attach, "workload": {"requests": 201, "arrival": {"rate": 4.0}}})
    assert planned_clock_s(paced) == pytest.approx(50.0)
    assert planned_wall_s(paced) == pytest.approx(50.0)
    burst = parse_config({"engine": attach, "workload": {"requests": 201, "arrival": {"process": "all-at-once"}}})
    assert planned_clock_s(burst) is None


def test_the_simulators_plan_is_close_to_the_run_and_scaled_by_the_pace():
    """The Launch page's default run (200 requests at 2.5 req/s on 16 slots): the plan is within
    20% of the simulated duration (the issue's early ETAs were 4 to 40 times off); at 100x it is
    that over 100 wall seconds, and as fast as possible there is no plan."""
    data = {
        "engine": {"kind": "sim", "max_num_seqs": 16},
        "workload": {"requests": 200, "arrival": {"process": "poisson", "rate": 2.5}},
    }
    fastest = parse_config(data)
    planned = planned_clock_s(fastest)
    ran = execute_run(fastest, tempfile.mkdtemp()).summary.duration_s
    assert planned == pytest.approx(ran, rel=0.2), (planned, ran)
    assert planned > 199 / 2.5  # more than the arrivals: the engine is over its capacity
    assert planned_wall_s(fastest) is None
    paced = parse_config({**data, "engine": {**data["engine"], "pace": 100.0}})
    assert planned_wall_s(paced) == pytest.approx(planned / 100)
