"""engine-slo-sa's plan, without vLLM: what the engine's scheduler class (:mod:`.slo_sa`) reads
from its requests and how it plans over them, as plain functions the tests run without vLLM.

The plan itself is slo-sa's, through the same functions
(:func:`~runners.schedulers.slo_aware.plan_inputs_of`,
:func:`~runners.schedulers.slo_aware.slot_wait_s`,
:func:`~runners.schedulers.slo_aware.plan_annealing`): only the inputs come from the engine's
own state instead of the client's view of it. Seconds and tokens throughout.

* A waiting request (:class:`WaitingRequest`): tokens to prefill (its prompt, plus the output
  it already produced if it was preempted and must be recomputed), predicted output tokens
  still to come (the client's prediction, ``PREDICTED_OUTPUT_ARG``, else its max_tokens, less
  the tokens it already produced; at least 1, as slo-sa), seconds waited since its arrival
  (vLLM's ``arrival_time``, set when the server received it: latency counts from arrival), and
  its SLO limits (``TTFT_SLO_ARG``, ``TPOT_SLO_ARG``, ``E2E_SLO_ARG``; inf when not sent).
* The plan starts at the earliest free slot (:func:`~runners.schedulers.slo_aware.slot_wait_s`)
  over the running requests' predicted finishes (:func:`remaining_s`), which the engine knows
  exactly: how many run (the batch size of their steps), how far each is in its prefill and how
  many tokens each has produced. slo-sa, from outside, counts from each request's first token
  at its planned batch size.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from runners.engines.latency_model import LatencyModel
from runners.schedulers.slo_aware import SLOPlanParams, plan_annealing, plan_inputs_of, slot_wait_s
from runners.schedulers.vllm import PREDICTED_OUTPUT_ARG, positive_number, sent_slos

INF = math.inf


def request_args(extra_args: Mapping[str, Any] | None, max_tokens: int) -> tuple[int, float, float, float]:
    """(predicted output tokens, TTFT, TPOT and E2E limits in seconds) from a request's
    ``sampling_params.extra_args``: the prediction falls back to ``max_tokens``, a limit not sent
    (or not a positive number) is inf (no SLO)."""
    args = extra_args or {}
    predicted = positive_number(args.get(PREDICTED_OUTPUT_ARG))
    output = max(1, int(round(predicted))) if predicted is not None else max(1, int(max_tokens))
    ttft, tpot, e2e = sent_slos(args)
    return output, ttft or INF, tpot or INF, e2e or INF


@dataclass(frozen=True)
class WaitingRequest:
    """What the plan knows of one waiting request (tokens, seconds; limits inf when unset)."""

    request_id: str
    prefill_tokens: int
    output_tokens: int  # predicted output tokens still to come, >= 1
    waited_s: float
    ttft_limit: float = INF
    tpot_limit: float = INF
    e2e_limit: float = INF


@dataclass(frozen=True)
class RunningRequest:
    """One running request: its prompt, how much of it is computed, the tokens it produced and
    its predicted output length (tokens)."""

    prompt_tokens: int
    computed_tokens: int
    produced_tokens: int
    predicted_output: int


def remaining_s(model: LatencyModel, batch: int, request: RunningRequest) -> float:
    """Predicted seconds until a running request finishes, in steps of ``batch`` requests: the
    rest of its prefill (first token) and its remaining decode steps, with eq. 14/15. A request
    that already produced its predicted output has one token left."""
    left = max(1, request.predicted_output - request.produced_tokens)
    if request.produced_tokens == 0:
        prefill = model.prefill_time(batch, max(1, request.prompt_tokens - request.computed_tokens))
        return prefill + model.decode_time(batch, request.prompt_tokens, left)
    # ``left`` decode steps from the current context (decode_time counts output - 1 steps)
    return model.decode_time(batch, request.prompt_tokens + request.produced_tokens - 1, left + 1)


@dataclass(frozen=True)
class EnginePlan:
    """A plan over the waiting requests: their ids in plan order, the batch sizes (the order is
    split into ``sizes`` consecutive batches), the predicted G (met SLOs / sum of E2E, 1/s), the
    seconds until its first batch can start and the seconds the planning took."""

    order: list[str]
    sizes: list[int]
    predicted_g: float
    start_s: float
    plan_s: float

    @property
    def batches(self) -> int:
        return len(self.sizes)


def plan_waiting(
    waiting: Sequence[WaitingRequest],
    running: Sequence[RunningRequest],
    model: LatencyModel,
    params: SLOPlanParams,
    max_batch: int,
) -> EnginePlan:
    """slo-sa's plan (start points, then simulated annealing) over ``waiting``, starting at the
    earliest slot the ``running`` requests free (``max_batch`` slots)."""
    began = time.perf_counter()
    batch = max(1, len(running))
    finishes = sorted(remaining_s(model, batch, request) for request in running)
    start_s = slot_wait_s(finishes, max_batch)
    n = len(waiting)
    inputs = plan_inputs_of(
        np.fromiter((w.prefill_tokens for w in waiting), dtype=float, count=n),
        [w.output_tokens for w in waiting],
        np.fromiter((w.waited_s for w in waiting), dtype=float, count=n),
        np.fromiter((w.ttft_limit for w in waiting), dtype=float, count=n),
        np.fromiter((w.tpot_limit for w in waiting), dtype=float, count=n),
        np.fromiter((w.e2e_limit for w in waiting), dtype=float, count=n),
        model,
        max_batch,
        start_s,
    )
    order, sizes, batches, g = plan_annealing(inputs, params)
    return EnginePlan(
        [waiting[int(i)].request_id for i in order],
        [int(size) for size in sizes[:batches]],
        float(g),
        float(start_s),
        time.perf_counter() - began,
    )
