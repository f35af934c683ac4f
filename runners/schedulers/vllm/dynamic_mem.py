"""engine-dynamic-mem and engine-dynamic-sla: 000 Alg. 1 (memory-aware dynamic batch size) and
Alg. 2 (SLA-constrained) inside vLLM's scheduler.

Before each ``schedule()`` the running limit (vLLM's admission limit ``max_num_active_reqs``, see
:mod:`.base`) is set to Alg. 1's batch size, computed by the same functions the client-side
dynamic-mem policy uses (:func:`runners.schedulers.dynamic_batching_core.memory_limit`:
``block_footprint``, ``memory_batch_size``, ``clamp_batch``). What differs is what the engine
sees, not the rule:

* eta, the KV capacity (tokens), is block-exact: the blocks free in vLLM's block pool now plus
  the distinct blocks the running requests hold (read from the KV cache manager; a prefix block
  shared by several counts once), times the block size (:func:`~runners.schedulers.dynamic_batching_core.batch_capacity_tokens`). The client can
  only estimate it from the engine's configured capacity.
* E[l_in], Var l_in: the prompt lengths of every request the engine has been given (tokens).
* E[l_out], Var l_out: ``output_prior`` (:class:`~runners.schedulers.vllm.EngineDynamicMemoryParams`)
  - ``max_tokens`` (default): the arrived requests' max_tokens (schedlab sends each request's
  target length as max_tokens; a request without one gets vLLM's default, the rest of the context
  window, which makes the limit very cautious); ``given``: output_mean/output_std (weight
  output_count) from the launcher, pooled with the finished requests' output lengths; ``cold``:
  prior_output_tokens until a request finishes, then the finished requests. The engine does not
  see tasks, so it pools all requests (the client mixes per-task moments by arrivals).
* Prefilling / decoding (Alg. 1 line 4: the size is updated only when both exist, and once
  first): decoding = running requests that have produced a token; prefilling = the other running
  requests plus the waiting ones. The limit is never below the decoding requests (``clamp_batch``)
  nor above B_max (``b_max``, default the engine's max_num_seqs).

Contract with the launcher (environment of the vLLM server): ``PYTHONPATH`` includes schedlab's
repository root; ``--scheduler-cls runners.schedulers.vllm.dynamic_mem.DynamicMemoryScheduler``;
``SCHEDLAB_ENGINE_PARAMS`` = path of a JSON object of EngineDynamicMemoryParams (unset: defaults);
``SCHEDLAB_ENGINE_DECISIONS`` = JSON-lines file for the decisions (see :mod:`.base` for the fields;
this class adds ``eta_tokens``, ``footprint_mean`` and ``footprint_std`` in tokens, ``decoding`` (requests) and ``sized``:
whether Alg. 1 updated the size this step).

engine-dynamic-sla (:class:`DynamicSLAScheduler`, ``EngineDynamicSLAParams``): Alg. 2's window
[b_low, b_high] in [B_min, B_max] moves with tau, the recent mean decode latency, and b, the
recent mean batch, by the function the client-side dynamic-sla uses
(:func:`~runners.schedulers.dynamic_batching_core.sla_window_update`, through
:class:`~runners.schedulers.dynamic_batching_core.StepSLAController`); the SLA limit is
``clamp_batch((b_low + b_high) // 2, decoding, B_max)`` (``sla_batch_size``, also the client's),
and the running limit is min(SLA limit, Alg. 1's limit above) with ``memory_cap`` (the paper's
b = min of both), the SLA limit alone without. What the engine measures that the client cannot:

* tau is the engine's own step time, taken per step: from the start of ``schedule()`` to the
  start of ``update_from_output()`` for the same scheduler output, i.e. the step's scheduling,
  forward pass and sampling. Not the wall time between consecutive ``schedule()`` calls: that
  would add the output processing and, after the engine ran dry, the idle wait for the next
  request (a gap that is no decode latency, and that only a threshold could guess at); bracketing
  one step excludes both by construction. Only steps with decoding requests (running requests
  that had produced a token and are scheduled) are timed: a step of prefills alone delays no
  running request's token. tau is the mean over the last ``samples`` timed steps, b the mean
  running requests over the same steps, and the window moves once per timed step. The client
  can only see TPOT from completed requests (lagging by a whole request) or vLLM's
  inter-token-latency histogram scraped every 0.25 s (the mean over whatever steps fell in the
  scrape, frontend delays included).
* the batch the limit acts on is the engine's running set, not the client's requests in flight.

vLLM 0.32 never preempts a running request to meet the limit (see :mod:`.base`), so a falling
limit takes effect as running requests finish. Decisions add ``tau_s`` (seconds; null before the
first timed step), ``batch_mean`` (requests), ``timed_steps`` (steps timed so far: the window moved
once per step timed), ``window_low``, ``window_high``, ``sla_limit`` and ``memory_limit``
(requests; null without memory_cap), all as they stood when the step's limit was set.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import ValidationError
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.request import Request, RequestStatus

from runners.schedulers.dynamic_batching_core import (
    StepSLAController,
    batch_capacity_tokens,
    default_alpha,
    memory_limit,
)
from runners.schedulers.predictors import RunningMoments
from runners.schedulers.vllm import (
    EngineDynamicMemoryParams,
    EngineDynamicSLAParams,
    check_window,
    load_params,
)
from runners.schedulers.vllm.base import SchedlabScheduler

_FINISHED_NORMALLY = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


class DynamicMemoryScheduler(SchedlabScheduler):
    """000 Alg. 1 in vLLM: the running limit is the largest batch the KV cache holds with
    probability 1 - eps_M (see the module doc)."""

    #: The schedlab scheduler name (in its messages) and the parameters model it reads.
    engine_name = "engine-dynamic-mem"
    params_model: type[EngineDynamicMemoryParams] = EngineDynamicMemoryParams

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        params = load_params(self.params_model)
        assert isinstance(params, EngineDynamicMemoryParams)
        self.params = params
        if params.b_max is not None and params.b_max > self.max_num_running_reqs:
            raise ValueError(
                f"schedlab {self.engine_name}: b_max {params.b_max} is more than this engine runs at "
                f"once (max_num_seqs {self.max_num_running_reqs}): raise --max-num-seqs to at least "
                f"{params.b_max}, or leave b_max unset to follow the engine"
            )
        if params.output_prior == "calibration":
            raise ValueError(
                f"schedlab {self.engine_name}: output_prior 'calibration' is filled in by schedlab's launcher "
                "(as given moments of a calibration sample); a server started by hand needs output_prior "
                "'given' with output_mean and output_std, or 'cold'"
            )
        self.b_max = params.b_max or self.max_num_running_reqs
        self.prompts = RunningMoments()
        self.outputs = RunningMoments()
        if params.output_prior == "given":
            self.outputs = RunningMoments(
                count=params.output_count,
                mean=float(params.output_mean or 0.0),
                m2=params.output_std**2 * max(params.output_count - 1, 0),
            )
        self.limit = self.b_max
        self.sized = False
        self._fields: dict[str, Any] = {}

    def add_request(self, request: Request) -> None:
        new = request.request_id not in self.requests
        super().add_request(request)
        if new:
            self.prompts.add(request.num_prompt_tokens)
            if self.params.output_prior == "max_tokens":
                self.outputs.add(request.max_tokens)

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        if self.params.output_prior != "max_tokens" and request.status in _FINISHED_NORMALLY:
            self.outputs.add(request.num_output_tokens)
        return super()._free_request(request, *args, **kwargs)

    def output_moments(self) -> tuple[float, float]:
        """(E[l_out], Var l_out), tokens."""
        if self.outputs.count == 0:
            return float(self.params.prior_output_tokens), 0.0
        return self.outputs.mean, self.outputs.variance

    def decoding_now(self) -> int:
        """Running requests that have produced a token (decoding), requests."""
        return sum(1 for request in self.running if request.num_output_tokens > 0)

    def running_limit(self) -> int | None:
        decoding = self.decoding_now()
        prefilling = len(self.running) - decoding + self.num_waiting()
        update = self.prompts.count > 0 and ((prefilling > 0 and decoding > 0) or not self.sized)
        eta = batch_capacity_tokens(self.block_size, self.free_blocks(), self.running_block_ids())
        self._fields = {"eta_tokens": eta, "decoding": decoding, "sized": update}
        if update:
            output_mean, output_variance = self.output_moments()
            self.limit, mean, std = memory_limit(
                eta,
                self.prompts.mean,
                self.prompts.variance,
                output_mean,
                output_variance,
                self.block_size,
                self.params.eps_m,
                decoding,
                self.b_max,
            )
            self.sized = True
            self._fields.update(footprint_mean=round(mean, 3), footprint_std=round(std, 3))
        return self.limit

    def decision_fields(self) -> dict[str, Any]:
        return self._fields


class DynamicMemoryAsyncScheduler(DynamicMemoryScheduler, AsyncScheduler):
    """The same policy on vLLM's AsyncScheduler (picked by DynamicMemoryScheduler when async
    scheduling is on; never on the CPU build, which turns it off)."""


DynamicMemoryScheduler.async_variant = DynamicMemoryAsyncScheduler


class DynamicSLAScheduler(DynamicMemoryScheduler):
    """000 Alg. 2 in vLLM: the running limit is the middle of a window that moves with the
    engine's measured step time against D_SLA, capped by Alg. 1's limit with memory_cap (see the
    module doc)."""

    engine_name = "engine-dynamic-sla"
    params_model = EngineDynamicSLAParams

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        params = self.params
        assert isinstance(params, EngineDynamicSLAParams)
        try:  # B_max from the engine (b_max unset) is known only here; a given b_max was checked on load
            check_window(type(params).__name__, params.b_min, self.b_max, params.alpha)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise ValueError(
                f"schedlab {self.engine_name}: {error['loc'][0]} "
                f"{error['msg'].removeprefix('Value error, ')} (B_max {self.b_max}: the engine's "
                "max_num_seqs)"
            ) from None
        alpha = params.alpha if params.alpha is not None else default_alpha(params.b_min, self.b_max)
        self.sla = StepSLAController(
            params.d_sla_s, params.eps_s, alpha, params.delta, params.b_min, self.b_max, params.samples
        )

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        started = time.monotonic()
        output = super().schedule(*args, **kwargs)
        scheduled = output.num_scheduled_tokens
        decoding = sum(
            1 for request in self.running if request.num_output_tokens > 0 and request.request_id in scheduled
        )
        self.sla.step_scheduled(id(output), started, len(self.running), decoding)
        return output

    def update_from_output(self, scheduler_output: SchedulerOutput, model_runner_output: Any) -> Any:
        self.sla.step_finished(id(scheduler_output), time.monotonic())
        return super().update_from_output(scheduler_output, model_runner_output)

    def running_limit(self) -> int | None:
        params = self.params
        assert isinstance(params, EngineDynamicSLAParams)
        memory = super().running_limit()  # Alg. 1 (and its fields), as engine-dynamic-mem
        sla = self.sla.limit(self._fields["decoding"])
        limit = min(sla, memory) if params.memory_cap and memory is not None else sla
        self._fields.update(
            tau_s=self.sla.tau_s,
            batch_mean=self.sla.batch_mean,
            timed_steps=self.sla.meter.steps,
            window_low=self.sla.window.low,
            window_high=self.sla.window.high,
            sla_limit=sla,
            memory_limit=memory if params.memory_cap else None,
        )
        return limit


class DynamicSLAAsyncScheduler(DynamicSLAScheduler, AsyncScheduler):
    """engine-dynamic-sla on vLLM's AsyncScheduler (picked when async scheduling is on; never on
    the CPU build). Steps are timed per scheduler output, so one scheduled before the last one's
    output returns is timed from its own scheduling (which then includes waiting for the step
    ahead of it: with overlapped steps that is the latency its tokens see)."""


DynamicSLAScheduler.async_variant = DynamicSLAAsyncScheduler
