"""A scheduler of your own, outside schedlab's code: earliest deadline first on the per-task
SLOs. Each waiting request's deadline is its arrival plus its task's TTFT limit (else its E2E
limit; neither: it is due at once); the one due soonest goes first, to the least-loaded
instance, with at most ``max_in_flight`` requests in flight per instance so the order matters.

Two halves, one registration each:

- ``edf``: the client-side policy (any engine, the simulator included);
- ``engine-edf``: the same order inside vLLM. The client sends each request on arrival with its
  SLOs; the engine class ``edf_engine.EDFScheduler`` (the file beside this one, imported by the
  vLLM server only) orders vLLM's waiting queue by the same :func:`deadline_s` and keeps at most
  ``max_running`` requests running.

Run it with ``python -m runners run --scheduler-path examples/edf_policy.py --scheduler edf``,
check it with ``python -m runners check-scheduler examples/edf_policy.py``, or set
``SCHEDLAB_SCHEDULER_PATH=examples/edf_policy.py`` for the dashboard.
"""

from __future__ import annotations

from pydantic import Field

from runners.input_model import InputModel
from runners.schedulers.base import Decision, PolicyParams, SchedulerPolicy
from runners.schedulers.in_engine import InEnginePolicy, InEnginePolicyParams, slo_args
from runners.workload.requests import Request


def deadline_s(arrival_s: float, ttft_s: float | None, e2e_s: float | None) -> float:
    """When a request should have its first token: its arrival plus its TTFT limit, else its E2E
    limit, else at once (seconds, on the caller's clock). Both halves order by this one function."""
    return arrival_s + (ttft_s or e2e_s or 0.0)


class EDFParams(PolicyParams):
    max_in_flight: int = Field(default=8, gt=0, le=65_536, description="most requests in flight per instance")


class EarliestDeadlineFirst(SchedulerPolicy[EDFParams]):
    name = "edf"
    summary = "Earliest deadline first: arrival + the task's TTFT (else E2E) limit, soonest first."
    paper = "examples/edf_policy.py (a user's own)"
    Params = EDFParams

    def deadline(self, request_id: str) -> float:
        """Seconds since the run's start by which the request should have its first token."""
        request: Request = self.requests[request_id]
        return deadline_s(request.arrival_s, request.slo.ttft_s, request.slo.e2e_s)

    def decide(self, now: float) -> Decision:
        dispatches = []
        for request_id in sorted(self.pending, key=self.deadline):
            instance = self.least_loaded_instance()
            if len(self.in_flight[instance]) >= self.params.max_in_flight:
                break
            dispatches.append(self._take(request_id, instance))
        return Decision(dispatches)


class EngineEDFParams(InputModel):
    """What the engine class reads (from the file at ``SCHEDLAB_ENGINE_PARAMS``)."""

    max_running: int = Field(default=8, gt=0, le=65_536, description="most requests running in the engine")


class EngineEDFPolicyParams(EngineEDFParams, InEnginePolicyParams):
    """engine-edf's parameters, as a policy's (the engine class reads the same fields)."""


class EngineEDF(InEnginePolicy[EngineEDFPolicyParams]):
    name = "engine-edf"
    summary = "Earliest deadline first inside vLLM: the engine orders its waiting queue by deadline."
    paper = "examples/edf_policy.py (a user's own)"
    Params = EngineEDFPolicyParams
    twin = "edf"
    engine_class = "edf_engine.EDFScheduler"
    engine_params = EngineEDFParams

    def request_args(self, request: Request) -> dict[str, int | float]:
        return slo_args(request)
