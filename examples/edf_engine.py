"""The in-engine half of examples/edf_policy.py: earliest deadline first as a vLLM scheduler
class (``--scheduler-cls edf_engine.EDFScheduler``). Imported by the vLLM server only: schedlab
puts this folder and its own repository on the server's PYTHONPATH.

Before each step it sorts vLLM's waiting queue by :func:`edf_policy.deadline_s` (vLLM's
``arrival_time`` plus the SLOs the client sent with the request) and keeps at most
``max_running`` requests running; vLLM then admits from the head of the queue.
"""

from __future__ import annotations

from typing import Any

from edf_policy import EngineEDFParams, deadline_s
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy

from runners.schedulers.vllm import load_params, sent_slos
from runners.schedulers.vllm.base import SchedlabScheduler


class EDFScheduler(SchedlabScheduler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.policy != SchedulingPolicy.FCFS:
            raise ValueError("engine-edf reorders vLLM's FCFS waiting queue: start vLLM with --scheduling-policy fcfs")
        params = load_params(EngineEDFParams)
        assert isinstance(params, EngineEDFParams)
        self.params = params

    def deadline(self, request: Any) -> float:
        ttft_s, _, e2e_s = sent_slos(request.sampling_params.extra_args)
        return deadline_s(request.arrival_time, ttft_s, e2e_s)

    def running_limit(self) -> int | None:
        if len(self.waiting) > 1:
            queued = sorted(self.waiting, key=self.deadline)
            self.waiting.clear()
            self.waiting.extend(queued)
        return self.params.max_running


class EDFAsyncScheduler(EDFScheduler, AsyncScheduler):
    """The same order on vLLM's AsyncScheduler (async scheduling on; never on the CPU build)."""


EDFScheduler.async_variant = EDFAsyncScheduler
