"""engine-dynamic-mem: 000 Alg. 1 (memory-aware dynamic batch size) inside vLLM's scheduler.

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
* E[l_out], Var l_out: ``output_prior`` (:class:`~runners.engines.vllm_scheduler.EngineDynamicMemoryParams`)
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
repository root; ``--scheduler-cls runners.engines.vllm_scheduler.dynamic_mem.DynamicMemoryScheduler``;
``SCHEDLAB_ENGINE_PARAMS`` = path of a JSON object of EngineDynamicMemoryParams (unset: defaults);
``SCHEDLAB_ENGINE_DECISIONS`` = JSON-lines file for the decisions (see :mod:`.base` for the fields;
this class adds ``eta_tokens``, ``footprint_mean`` and ``footprint_std`` in tokens, ``decoding`` (requests) and ``sized``:
whether Alg. 1 updated the size this step).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.request import Request, RequestStatus

from runners.engines.vllm_scheduler import IN_ENGINE_PARAMS, EngineDynamicMemoryParams, load_params
from runners.engines.vllm_scheduler.base import SchedlabScheduler
from runners.predictors import RunningMoments
from runners.schedulers.dynamic_batching_core import batch_capacity_tokens, memory_limit

_FINISHED_NORMALLY = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


class DynamicMemoryScheduler(SchedlabScheduler):
    """000 Alg. 1 in vLLM: the running limit is the largest batch the KV cache holds with
    probability 1 - eps_M (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        params = load_params(IN_ENGINE_PARAMS["engine-dynamic-mem"])
        assert isinstance(params, EngineDynamicMemoryParams)
        self.params = params
        if params.b_max is not None and params.b_max > self.max_num_running_reqs:
            raise ValueError(f"schedlab engine-dynamic-mem: b_max {params.b_max} is more than this engine runs at "
                             f"once (max_num_seqs {self.max_num_running_reqs}): raise --max-num-seqs to at least "
                             f"{params.b_max}, or leave b_max unset to follow the engine")
        self.b_max = params.b_max or self.max_num_running_reqs
        self.prompts = RunningMoments()
        self.outputs = RunningMoments()
        if params.output_prior == "given":
            self.outputs = RunningMoments(count=params.output_count, mean=float(params.output_mean or 0.0),
                                          m2=params.output_std**2 * max(params.output_count - 1, 0))
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

    def running_limit(self) -> int | None:
        decoding = sum(1 for request in self.running if request.num_output_tokens > 0)
        prefilling = len(self.running) - decoding + self.num_waiting()
        update = self.prompts.count > 0 and ((prefilling > 0 and decoding > 0) or not self.sized)
        eta = batch_capacity_tokens(self.block_size, self.free_blocks(), self.running_block_ids())
        self._fields = {"eta_tokens": eta, "decoding": decoding, "sized": update}
        if update:
            output_mean, output_variance = self.output_moments()
            self.limit, mean, std = memory_limit(eta, self.prompts.mean, self.prompts.variance, output_mean,
                                                 output_variance, self.block_size, self.params.eps_m, decoding,
                                                 self.b_max)
            self.sized = True
            self._fields.update(footprint_mean=round(mean, 3), footprint_std=round(std, 3))
        return self.limit

    def decision_fields(self) -> dict[str, Any]:
        return self._fields


class DynamicMemoryAsyncScheduler(DynamicMemoryScheduler, AsyncScheduler):
    """The same policy on vLLM's AsyncScheduler (picked by DynamicMemoryScheduler when async
    scheduling is on; never on the CPU build, which turns it off)."""


DynamicMemoryScheduler.async_variant = DynamicMemoryAsyncScheduler
