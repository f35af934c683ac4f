"""engine-slo-sa: 004's SLO-aware simulated-annealing plan applied inside vLLM's scheduler.

Whenever the engine's waiting queue changed since the last plan (an arrival, an admission, a
preemption) or a running request left (a completion frees a slot and moves the plan's start),
the class plans over the waiting requests with slo-sa's own functions (one function, two
callers: :func:`.slo_sa_plan.plan_waiting` calls
:func:`~runners.schedulers.slo_aware.plan_inputs_of`,
:func:`~runners.schedulers.slo_aware.slot_wait_s` and
:func:`~runners.schedulers.slo_aware.plan_annealing`), reorders ``self.waiting`` in plan order
and keeps the running limit (vLLM's admission limit, see :mod:`.base`) at the plan's batch cap
``max_batch`` (default the engine's max_num_seqs), as slo-sa's default dispatch ``slots`` keeps
at most max_batch requests in flight and sends in plan order as slots free up. vLLM then admits
from the head of the queue, so the requests are served in the latest plan's order.

Why reorder the waiting queue rather than send priorities (vLLM's ``--scheduling-policy
priority``): a priority is fixed when a request is sent. A later plan (after new arrivals or
completions) that moves a newer request ahead of one already sent cannot re-rank the sent one,
so the engine would serve an order no plan chose; the client-side slo-sa avoids that only by
holding requests until slots free up. Inside the engine the plan is made over the engine's own
waiting queue whenever it changes and applied directly, so the order served is always the
latest plan's, with the engine's exact running state, and no request is held at the client.
The class therefore refuses to start under the priority policy (its queue is a heap ordered by
the priorities; reordering it would not hold).

Inputs per waiting request (:mod:`.slo_sa_plan`): tokens to prefill, the predicted output the
client sent (``PREDICTED_OUTPUT_ARG``, from slo-sa's own output-length predictor; else
max_tokens), its TTFT/TPOT/E2E SLOs (``TTFT_SLO_ARG``, ``TPOT_SLO_ARG``, ``E2E_SLO_ARG``; none:
no limit) and the time it has waited since vLLM received it (``arrival_time``). The latency
model is the run's (``prefill``/``decode`` of :class:`~runners.schedulers.vllm.EngineSLOAwareParams`,
written by the launcher from engine.profile). Waiting requests that hold KV blocks
(``kv_holding_waiting``, e.g. asynchronous KV loads) are drained by vLLM before the queue and
are not planned.

Compilation: the annealer is numba-compiled; the first call compiles it (seconds). The class
compiles it in ``__init__`` (:func:`~runners.schedulers.slo_aware.compile_plan_kernels`, the
same warm-up slo-sa's ``prepare`` makes), while the engine starts, so the first step that plans
is not stalled by the compiler.

Decisions (beside :mod:`.base`'s fields): ``planned`` (a plan was made this step), ``plans`` and
``plan_ms_total`` (plans made so far and the milliseconds they took, so the plans' cost to the
engine is visible whichever steps are recorded), and the latest plan's ``plan_size``
(requests), ``plan_ms``, ``predicted_g`` (G, 1/s), ``batches``, ``plan_start_s`` (seconds until
its first batch could start) and ``plan_head`` (its first ids, at most
:data:`PLAN_HEAD_IDS`); ``admitted_ids``: the ids this step moved from waiting to running, in
admission order (at most :data:`PLAN_HEAD_IDS`).
"""

from __future__ import annotations

import time
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.request import Request

from runners.engines.latency_model import LatencyModel
from runners.schedulers.slo_aware import compile_plan_kernels
from runners.schedulers.vllm import EngineSLOAwareParams, load_params
from runners.schedulers.vllm.base import SchedlabScheduler, logger
from runners.schedulers.vllm.slo_sa_plan import (
    EnginePlan,
    RunningRequest,
    WaitingRequest,
    plan_waiting,
    request_args,
)

#: Most request ids a decision lists (plan_head, admitted_ids).
PLAN_HEAD_IDS = 32


class SLOAwareScheduler(SchedlabScheduler):
    """004's plan in vLLM: the waiting queue in the latest plan's order, at most max_batch
    running (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        params = load_params(EngineSLOAwareParams)
        assert isinstance(params, EngineSLOAwareParams)
        self.params = params
        if self.policy != SchedulingPolicy.FCFS:
            raise ValueError(
                "schedlab engine-slo-sa applies its plan by reordering vLLM's FCFS waiting queue; this "
                f"engine runs --scheduling-policy {self.policy.value}. Start vLLM with "
                "--scheduling-policy fcfs (engine.scheduling_policy fcfs)"
            )
        if params.prefill is None or params.decode is None:
            raise ValueError(
                "schedlab engine-slo-sa needs the run's latency model (prefill and decode in "
                "SCHEDLAB_ENGINE_PARAMS); schedlab's launcher writes it from engine.profile"
            )
        if params.max_batch is not None and params.max_batch > self.max_num_running_reqs:
            raise ValueError(
                f"schedlab engine-slo-sa: max_batch {params.max_batch} is more than this engine runs at "
                f"once (max_num_seqs {self.max_num_running_reqs}): raise --max-num-seqs to at least "
                f"{params.max_batch}, or leave max_batch unset to follow the engine"
            )
        self.model = LatencyModel(prefill=params.prefill, decode=params.decode)
        self.max_batch = params.max_batch or self.max_num_running_reqs
        self.plan: EnginePlan | None = None
        self.plans = 0
        self.plan_s_total = 0.0
        self._planned_on: tuple[frozenset[str], frozenset[str]] | None = None
        self._planned_now = False
        self._waiting_before: set[str] = set()
        began = time.perf_counter()
        compile_plan_kernels(params)
        logger.info(
            "schedlab engine-slo-sa: max_batch %d, annealer compiled in %.2f s",
            self.max_batch,
            time.perf_counter() - began,
        )

    # --- the plan ------------------------------------------------------------------------------
    def _waiting_request(self, request: Request, now: float) -> WaitingRequest:
        predicted, ttft, tpot, e2e = request_args(request.sampling_params.extra_args, request.max_tokens)
        produced = request.num_output_tokens
        return WaitingRequest(
            request.request_id,
            request.num_prompt_tokens + produced,
            max(1, predicted - produced),
            max(0.0, now - request.arrival_time),
            ttft,
            tpot,
            e2e,
        )

    def _running_request(self, request: Request) -> RunningRequest:
        predicted = request_args(request.sampling_params.extra_args, request.max_tokens)[0]
        return RunningRequest(
            request.num_prompt_tokens, request.num_computed_tokens, request.num_output_tokens, predicted
        )

    def running_limit(self) -> int | None:
        self._planned_now = False
        self._waiting_before = {request.request_id for request in self.waiting}
        key = (frozenset(self._waiting_before), frozenset(request.request_id for request in self.running))
        if self.waiting and key != self._planned_on:
            now = time.time()
            queued = list(self.waiting)
            plan = plan_waiting(
                [self._waiting_request(request, now) for request in queued],
                [self._running_request(request) for request in self.running],
                self.model,
                self.params,
                self.max_batch,
            )
            by_id = {request.request_id: request for request in queued}
            self.waiting.clear()
            self.waiting.extend(by_id[request_id] for request_id in plan.order)
            self.plan, self._planned_on, self._planned_now = plan, key, True
            self.plans += 1
            self.plan_s_total += plan.plan_s
        return self.max_batch

    def decision_fields(self) -> dict[str, Any]:
        admitted = [request.request_id for request in self.running if request.request_id in self._waiting_before]
        fields: dict[str, Any] = {
            "planned": self._planned_now,
            "plans": self.plans,
            "plan_ms_total": round(self.plan_s_total * 1000.0, 3),
            "admitted_ids": admitted[:PLAN_HEAD_IDS],
        }
        if self.plan is not None:
            fields.update(
                plan_size=len(self.plan.order),
                plan_ms=round(self.plan.plan_s * 1000.0, 3),
                predicted_g=self.plan.predicted_g,
                batches=self.plan.batches,
                plan_start_s=round(self.plan.start_s, 6),
                plan_head=self.plan.order[:PLAN_HEAD_IDS],
            )
        return fields


class SLOAwareAsyncScheduler(SLOAwareScheduler, AsyncScheduler):
    """The same policy on vLLM's AsyncScheduler (picked by SLOAwareScheduler when async
    scheduling is on; never on the CPU build, which turns it off)."""


SLOAwareScheduler.async_variant = SLOAwareAsyncScheduler
