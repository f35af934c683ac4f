"""engine-mcsf: 003's MC-SF (memory-constrained shortest-first) inside vLLM's scheduler.

Before each ``schedule()``:

1. the waiting queue (``self.waiting``, vLLM's FCFS deque) is reordered shortest predicted
   remaining output first, ties by arrival (:func:`~.mcsf_core.shortest_first_key`; a stable
   sort, O(n log n), about O(n) when the queue is already in order, as it mostly is between steps);
2. MC-SF's admission count is computed by the function the client-side mcsf policy calls
   (:func:`runners.schedulers.mcsf_kernel.admit_shortest_first`, through
   :func:`~.mcsf_core.mcsf_admissions`): the longest prefix of the reordered queue whose KV demand
   stays within M at every future completion time of the running and admitted requests;
3. the running limit (vLLM's admission limit ``max_num_active_reqs``, see :mod:`.base`) is set to
   the requests that hold a slot now plus that count, so vLLM admits exactly those (or fewer, when
   its token budget or its free blocks run out first). With nothing running, at least one.

What the engine sees that the client cannot, and what stays the same rule:

* Progress is exact: a running request's remaining steps are its predicted output less the
  tokens it has generated (``num_output_tokens``), not an estimate from the time since its first
  token and a step time; the tokens it holds are ``num_tokens`` (prompt + output so far).
  Why ``num_tokens`` and not the blocks held x block size or ``num_computed_tokens``: MC-SF's
  demand model needs what the request will hold, and a request in the middle of a chunked
  prefill will hold its whole prompt within steps (``num_computed_tokens`` lags it), while the
  blocks held now x block size plus t is no upper bound of the blocks it will hold t steps later.
  Tokens plus ``block_size - 1`` per request is, and it is the client's rule (the twins agree).
* M is block-exact: the pool's usable blocks (less vLLM's null block) x block size x
  ``memory_fraction`` (the client reads the engine's ``num_gpu_blocks``, one block more).
* A preempted request (vLLM recomputes it) waits again with its output so far: it prefills
  prompt + output and has predicted - output steps left, as the client's re-dispatch.
* Requests waiting while holding blocks (``kv_holding_waiting``, drained by vLLM before the
  queue; empty without a KV connector) and paused streaming sessions count as running.

The prediction: ``request.sampling_params.extra_args[PREDICTED_OUTPUT_ARG]`` when the client sent
one (engine-mcsf's client policy sends the same prediction the client-side mcsf would use), else
``request.max_tokens`` (schedlab sends each request's target length there: the oracle). Never
capped at max_tokens, as the client does not cap it either.

Contract with the launcher (environment of the vLLM server): ``PYTHONPATH`` includes schedlab's
repository root; ``--scheduler-cls runners.schedulers.vllm.mcsf.MCSFScheduler``; vLLM's
scheduling policy fcfs (priority is refused at start-up: MC-SF orders the queue itself);
``SCHEDLAB_ENGINE_PARAMS`` = path of a JSON object of
:class:`~runners.schedulers.vllm.EngineMCSFParams` (unset: defaults);
``SCHEDLAB_ENGINE_DECISIONS`` = JSON-lines file for the decisions. Fields this class adds to
:mod:`.base`'s (all describe the plan made before the step; ``admitted``, ``running`` and
``waiting`` are after it): ``holding`` (requests holding a running slot before the step),
``planned`` (waiting requests MC-SF admits: limit = max(1, holding + planned)),
``capacity_tokens`` (M), ``demand_peak_tokens`` (the largest future demand of the holding and
planned requests, slack included, tokens), ``planned_first`` (predicted remaining output of the
first <= 8 planned requests, in admission order, tokens), ``planned_last`` and ``held_first`` (of
the last planned and of the first waiting request left out; null when none), and
``predicted_from_extra_args`` / ``predicted_from_max_tokens`` (requests received so far whose
prediction came from each).
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.request import Request

from runners.schedulers.vllm import PREDICTED_OUTPUT_ARG, EngineMCSFParams, load_params
from runners.schedulers.vllm.base import SchedlabScheduler, logger
from runners.schedulers.vllm.mcsf_core import (
    FROM_EXTRA_ARGS,
    FROM_MAX_TOKENS,
    capacity_tokens,
    demand_peak,
    mcsf_admissions,
    predicted_output_tokens,
    remaining_steps,
    shortest_first_key,
    warm_up,
)

#: How many planned requests' predicted lengths a decision lists.
PLANNED_SHOWN = 8


class MCSFScheduler(SchedlabScheduler):
    """003 MC-SF in vLLM: the waiting queue shortest predicted output first, and the running
    limit letting in exactly the requests whose future KV peak fits (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.policy == SchedulingPolicy.PRIORITY:
            message = (
                "schedlab engine-mcsf orders vLLM's waiting queue itself (shortest predicted output first) "
                "and needs --scheduling-policy fcfs; this server runs the priority policy. Set the engine's "
                "scheduling_policy to fcfs"
            )
            logger.error("%s", message)
            raise ValueError(message)
        params = load_params(EngineMCSFParams)
        assert isinstance(params, EngineMCSFParams)
        self.params = params
        self.capacity = capacity_tokens(self.total_blocks(), self.block_size, params.memory_fraction)
        self.predicted: dict[str, int] = {}  # output tokens, per request the engine holds
        self.predicted_from = {FROM_EXTRA_ARGS: 0, FROM_MAX_TOKENS: 0}
        self._warned_bad_prediction = False
        self._fields: dict[str, Any] = {}
        warm_up()
        logger.info(
            "schedlab engine-mcsf: M = %.0f tokens (%d blocks x %d x memory_fraction %g)",
            self.capacity,
            self.total_blocks(),
            self.block_size,
            params.memory_fraction,
        )

    # --- predictions ---------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        new = request.request_id not in self.requests
        super().add_request(request)
        if new:
            self.predicted[request.request_id] = self._predict(request)

    def _predict(self, request: Request) -> int:
        extra = request.sampling_params.extra_args if request.sampling_params is not None else None
        value, source = predicted_output_tokens(extra, request.max_tokens)
        self.predicted_from[source] += 1
        if source == FROM_MAX_TOKENS and extra and PREDICTED_OUTPUT_ARG in extra and not self._warned_bad_prediction:
            self._warned_bad_prediction = True
            logger.warning(
                "schedlab engine-mcsf: request %s sent %s=%r, not a number; using its max_tokens",
                request.request_id,
                PREDICTED_OUTPUT_ARG,
                extra[PREDICTED_OUTPUT_ARG],
            )
        return value

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        self.predicted.pop(request.request_id, None)
        return super()._free_request(request, *args, **kwargs)

    def remaining(self, request: Request) -> int:
        """Predicted decode steps left for ``request`` (>= 1)."""
        predicted = self.predicted.get(request.request_id)
        if predicted is None:  # not seen by add_request (should not happen): predict now
            predicted = self.predicted[request.request_id] = self._predict(request)
        return remaining_steps(predicted, request.num_output_tokens)

    # --- the step ------------------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        if len(self.waiting) > 1:
            ordered = sorted(self.waiting, key=lambda r: shortest_first_key(self.remaining(r), r.arrival_time))
            self.waiting.clear()
            self.waiting.extend(ordered)
        return super().schedule(*args, **kwargs)

    def running_limit(self) -> int | None:
        holders = [*self.running, *self.kv_holding_waiting]
        holding = len(self.running) + self.num_waiting_for_streaming_input + len(self.kv_holding_waiting)
        held = [r.num_tokens for r in holders]
        held_remaining = [self.remaining(r) for r in holders]
        # the limit cannot exceed the engine's slots, so neither can the planned requests
        candidates = list(islice(self.waiting, max(0, self.max_num_running_reqs - holding)))
        waiting_remaining = [self.remaining(r) for r in candidates]
        planned = mcsf_admissions(
            held, held_remaining, [r.num_tokens for r in candidates], waiting_remaining, self.block_size, self.capacity
        )
        peak = demand_peak(
            held + [r.num_tokens for r in candidates[:planned]],
            held_remaining + waiting_remaining[:planned],
            self.block_size,
        )
        left_out = candidates[planned] if planned < len(candidates) else next(islice(self.waiting, planned, None), None)
        self._fields = {
            "holding": holding,
            "planned": planned,
            "capacity_tokens": self.capacity,
            "demand_peak_tokens": peak,
            "planned_first": waiting_remaining[: min(planned, PLANNED_SHOWN)],
            "planned_last": waiting_remaining[planned - 1] if planned else None,
            "held_first": self.remaining(left_out) if left_out is not None else None,
            "predicted_from_extra_args": self.predicted_from[FROM_EXTRA_ARGS],
            "predicted_from_max_tokens": self.predicted_from[FROM_MAX_TOKENS],
        }
        return max(1, holding + planned)

    def decision_fields(self) -> dict[str, Any]:
        return self._fields


class MCSFAsyncScheduler(MCSFScheduler, AsyncScheduler):
    """The same policy on vLLM's AsyncScheduler (picked by MCSFScheduler when async scheduling is
    on; never on the CPU build, which turns it off)."""


MCSFScheduler.async_variant = MCSFAsyncScheduler
