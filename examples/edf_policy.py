"""A scheduler of your own, outside schedlab's code: earliest deadline first on the per-task
SLOs. Each waiting request's deadline is its arrival plus its task's TTFT limit (or its E2E
limit); the one due soonest goes first, to the least-loaded instance, with at most
``max_in_flight`` requests in flight per instance so the order matters.

Run it with ``python -m runners run --scheduler-path examples/edf_policy.py --scheduler edf``,
or set ``SCHEDLAB_SCHEDULER_PATH=examples/edf_policy.py`` for the dashboard.
"""

from __future__ import annotations

from pydantic import Field

from runners.schedulers.base import Decision, PolicyParams, SchedulerPolicy


class EDFParams(PolicyParams):
    max_in_flight: int = Field(default=8, gt=0, le=65_536, description="most requests in flight per instance")


class EarliestDeadlineFirst(SchedulerPolicy[EDFParams]):
    name = "edf"
    summary = "Earliest deadline first: arrival + the task's TTFT (else E2E) limit, soonest first."
    paper = "examples/edf_policy.py (a user's own)"
    Params = EDFParams

    def deadline(self, request_id: str) -> float:
        """Seconds since the run's start by which the request should have its first token."""
        request = self.requests[request_id]
        limit = request.slo.ttft_s or request.slo.e2e_s or 0.0
        return request.arrival_s + limit

    def decide(self, now: float) -> Decision:
        dispatches = []
        for request_id in sorted(self.pending, key=self.deadline):
            instance = self.least_loaded_instance()
            if len(self.in_flight[instance]) >= self.params.max_in_flight:
                break
            dispatches.append(self._take(request_id, instance))
        return Decision(dispatches)
