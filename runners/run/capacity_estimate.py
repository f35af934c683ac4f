"""The engine's estimated capacity (req/s) for a workload, and the offered load as a share of it.

Shown on the Launch page before a launch, so a user sees whether the schedulers will have a
queue to order (schedulers only differ when requests wait; see :mod:`runners.metrics.contention`).

The model is a steady state of a saturated continuous-batching engine (the simulator of
:mod:`runners.engines.simulator`, whose step time is :class:`~runners.engines.latency_model.LatencyModel`).
Per instance, with the latency coefficients in seconds (prefill alpha_p, beta_p, gamma_p, delta_p;
decode alpha_d, beta_d, gamma_d, delta_d), and the workload's prompt and reply lengths I and O
(tokens; expectations E[.] over the length distribution the workload samples from, each task's
dataset pool weighted by its share of the requests):

- decode context, the mean context length of one decode step, weighted by how many decode steps
  each request takes (tokens):
      L = E[(O - 1) (I + O / 2)] / E[O - 1]
- KV held by a running request, time-weighted, with its last block half full (tokens):
      L_kv = L + block_size / 2
- requests decoding at once when saturated (requests):
      B = max(1, min(max_num_seqs, floor(kv_capacity_tokens / L_kv), max_num_batched_tokens))
- one decode step of B requests (eq. 15 with the token sum for b * l; seconds):
      tau = alpha_d B L + beta_d B + gamma_d L + delta_d
- decode time per request: each step gives every running request one token, the first token
  comes from the prefill (seconds per request):
      D = E[O - 1] tau / B
- prefill time per request: one prompt's prefill joins a decode step (chunked prefill) and adds
  its own terms, the step's fixed cost rising from delta_d to max(delta_p, delta_d) (seconds):
      P = (alpha_p + gamma_p) E[I] + beta_p + max(0, delta_p - delta_d)
- capacity (requests per second, all instances):
      capacity = instances / (D + P)

Offered load = arrival rate (req/s) / capacity (req/s). Whether requests will queue (and so the
schedulers can differ) is judged by the requests in the engine at the end of the arrivals, from
a fluid model of the same formula at b <= B requests at once (:func:`fluid_occupancy`): below
:data:`LOW_SLOT_SHARE` of the B slots the engine rarely has a queue (:func:`is_low`). An offered
load below 50% always falls there (the throughput is concave in b), but so can a higher one:
256 slots at 78% of the capacity hold about 60 requests and never queue.

Measured (tests/unit/test_capacity_estimate.py): the estimate is within 1.5% of the throughput of
saturated simulator runs where max_num_seqs is the limit (16, 32, 64 slots; 4% at 256 slots)
and 7-10% above it where the KV cache is. Not modelled: preemption when the KV
cache is the limit (recomputation lowers throughput further), the scheduler's own limits (a
policy that dispatches smaller batches than the engine's slots), and a static (run-to-completion)
engine.

Real engines (vLLM, LMDeploy, attached servers) have no latency model unless a profile file
from ``python -m runners profile`` is given, and their KV cache and slots are known only once
the server runs: no estimate is made for them; :func:`offered_load` says so in words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from runners.engines.latency_model import LatencyModel
from runners.workload.config import WorkloadConfig
from runners.workload.conversations import load_pairs
from runners.workload.slo import TASKS
from runners.workload.tokens import make_token_counter

if TYPE_CHECKING:
    from runners.engines.sim_config import ResolvedSimulator, SimulatorConfig
    from runners.run.config import RunConfig

#: Below this share of its slots in use (at the end of the arrivals, see :func:`is_low`) an engine
#: rarely has a queue, so schedulers tend to make identical decisions (every request is
#: dispatched as it arrives).
LOW_SLOT_SHARE = 0.6


@dataclass(frozen=True)
class LengthProfile:
    """Expectations over a workload's (prompt, reply) token lengths: ``mean_input`` E[I],
    ``mean_decode_steps`` E[O - 1], ``decode_context`` L (tokens, see the module docstring)."""

    mean_input: float
    mean_output: float
    mean_decode_steps: float
    decode_context: float

    @classmethod
    def from_lengths(cls, groups: Sequence[tuple[Sequence[int], Sequence[int], float]]) -> "LengthProfile":
        """From ``(input_tokens, output_tokens, weight)`` per task: each task's lengths are equally
        likely within it, and a task counts with its ``weight`` (its share of the requests)."""
        total = sum(weight for _, _, weight in groups if weight > 0)
        if total <= 0:
            raise ValueError("expected at least one task with a positive weight")
        mean_input = mean_output = steps = weighted_context = 0.0
        for inputs, outputs, weight in groups:
            if weight <= 0:
                continue
            i = np.asarray(inputs, dtype=float)
            o = np.asarray(outputs, dtype=float)
            if i.size == 0 or i.size != o.size:
                raise ValueError("expected as many input as output lengths, at least one")
            share = weight / total
            mean_input += share * float(i.mean())
            mean_output += share * float(o.mean())
            k = np.maximum(o - 1.0, 0.0)
            steps += share * float(k.mean())
            weighted_context += share * float((k * (i + o / 2.0)).mean())
        context = weighted_context / steps if steps > 0 else mean_input
        return cls(mean_input, mean_output, steps, context)


@dataclass(frozen=True)
class CapacityEstimate:
    """The result of the module's formula. ``capacity_rps``: requests per second over all
    instances; ``batch``: B (requests); ``limit``: what bounds B (``max_num_seqs``, ``kv cache``
    or ``max_num_batched_tokens``); ``step_s``: tau; ``decode_s`` D and ``prefill_s`` P (seconds
    per request, per instance)."""

    capacity_rps: float
    batch: int
    limit: str
    step_s: float
    decode_s: float
    prefill_s: float
    instances: int
    lengths: LengthProfile
    latency: LatencyModel

    def share(self, rate_rps: float) -> float:
        """Offered load ``rate_rps`` (req/s) as a fraction of the capacity."""
        return rate_rps / self.capacity_rps


@overload
def _per_request_s(latency: LatencyModel, lengths: LengthProfile, batch: float) -> tuple[float, float, float]: ...


@overload
def _per_request_s(
    latency: LatencyModel, lengths: LengthProfile, batch: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]: ...


def _per_request_s(latency: LatencyModel, lengths: LengthProfile, batch: Any) -> tuple[Any, Any, float]:
    """(tau, D, P) of the module docstring at ``batch`` requests decoding (seconds; ``batch`` a
    number or a numpy array of them). tau is eq. 15 at the decode context L
    (:meth:`PhaseCoefficients.at`); P is a prompt's added cost inside a decode step, so it is
    written here: its own terms at b = 1, the step's fixed cost raised to max(delta_p, delta_d)."""
    d = latency.decode
    p = latency.prefill
    step = d.at(batch, lengths.decode_context)
    decode = lengths.mean_decode_steps * step / batch
    prefill = (p.alpha + p.gamma) * lengths.mean_input + p.beta + max(0.0, p.delta - d.delta)
    return step, decode, prefill


def estimate_capacity(
    latency: LatencyModel,
    lengths: LengthProfile,
    kv_capacity_tokens: int,
    block_size: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    instances: int = 1,
) -> CapacityEstimate:
    """The capacity (req/s) of ``instances`` engines with these limits for ``lengths`` (the
    module docstring's formula)."""
    kv_slots = math.floor(kv_capacity_tokens / (lengths.decode_context + block_size / 2.0))
    limits = {"max_num_seqs": max_num_seqs, "kv cache": kv_slots, "max_num_batched_tokens": max_num_batched_tokens}
    limit = min(limits, key=lambda name: limits[name])
    batch = max(1, limits[limit])
    step, decode, prefill = _per_request_s(latency, lengths, batch)
    return CapacityEstimate(
        instances / (decode + prefill), batch, limit, step, decode, prefill, instances, lengths, latency
    )


def fluid_occupancy(estimate: CapacityEstimate, rate_rps: float, requests: int) -> float:
    """Requests in one instance at the end of the arrivals (``requests`` at ``rate_rps`` req/s,
    spread over the instances), by a fluid model: starting empty, the number in the engine, N,
    grows as dN/dt = rate / instances - X(min(N, B)), where X(b) = b / (E[O - 1] tau(b) + b P)
    is the throughput with b requests decoding (req/s; b times D + P is each one's time in the
    engine), integrated over the ``requests / rate_rps`` seconds the arrivals last. Above B
    requests the rest wait in a queue; well below B nobody waits for a slot."""
    rate = rate_rps / estimate.instances
    duration = requests / rate_rps
    steps = 2000
    dt = duration / steps
    occupancy = 0.0
    lengths = estimate.lengths
    for _ in range(steps):
        batch = min(max(occupancy, 1e-9), estimate.batch)
        step, _, prefill = _per_request_s(estimate.latency, lengths, batch)
        throughput = batch / (lengths.mean_decode_steps * step + batch * prefill)
        occupancy = min(max(0.0, occupancy + (rate - throughput) * dt), requests / estimate.instances)
    return occupancy


def needed_batch(estimate: CapacityEstimate, rate_rps: float) -> int | None:
    """The fewest requests decoding at once per instance (B in the module docstring's formula)
    whose throughput, instances / (D + P), carries ``rate_rps`` (req/s); None when even the
    full batch cannot (the offered load is above the capacity and the queue grows)."""
    batches = np.arange(1, estimate.batch + 1, dtype=float)
    _, decode, prefill = _per_request_s(estimate.latency, estimate.lengths, batches)
    enough = np.nonzero(estimate.instances / (decode + prefill) >= rate_rps)[0]
    return int(batches[enough[0]]) if enough.size else None


def workload_lengths(workload: WorkloadConfig) -> LengthProfile:
    """The length profile of the pools ``workload`` samples from (each task's dataset after the
    length filter, weighted by the chat:code ratio). DatasetError when a source cannot be read."""
    counts = workload.ratio.counts(workload.requests)
    counter = make_token_counter(workload.tokenizer)
    groups = []
    for task in TASKS:
        if counts.get(task, 0) <= 0:
            continue
        pairs, _ = load_pairs(getattr(workload, task), task, counter, workload.filters)
        groups.append(
            ([pair.input_tokens for pair in pairs], [pair.output_tokens for pair in pairs], float(counts[task]))
        )
    return LengthProfile.from_lengths(groups)


@dataclass(frozen=True)
class OfferedLoad:
    """What the Launch page says before a launch: the estimate (None when it cannot be made),
    the offered rate (req/s; None for all-at-once or replayed arrivals), ``share`` = rate /
    capacity, ``occupancy`` (requests per instance in the engine at the end of the arrivals, by
    :func:`fluid_occupancy`; every request for all-at-once), ``text`` (one or two sentences) and
    ``low``: the schedulers will likely make identical decisions (see :func:`is_low`)."""

    estimate: CapacityEstimate | None
    rate_rps: float | None
    share: float | None
    occupancy: float | None
    text: str
    low: bool = False
    #: how close the simulator with this profile came to the real engine near this load
    #: (:func:`runners.engines.fidelity.fidelity_sentence`); None for a real engine
    fidelity: str | None = None


def is_low(estimate: CapacityEstimate, occupancy: float) -> bool:
    """Whether requests will rarely wait for a slot: the engine holds fewer than
    :data:`LOW_SLOT_SHARE` of its B slots at the end of the arrivals. Measured on the simulator
    (fcfs vs slo-sa, 5 seeds, 200-1,000 requests): at 43-50% of the slots the decisions were
    identical at 9 of 10 seeds, at 61-69% they differed at 6 of 10; an offered load below 50% of
    the capacity always falls below 50% of the slots (the throughput is concave in b)."""
    return occupancy < LOW_SLOT_SHARE * estimate.batch


def low_load_warning(load: OfferedLoad) -> str:
    """The warning shown when the schedulers will likely make identical decisions."""
    held = (
        ""
        if load.occupancy is None or load.estimate is None
        else (f" (about {load.occupancy:.0f} of its {load.estimate.batch} slots in use)")
    )
    share = "" if load.share is None else f"At {load.share:.0%} of the estimated capacity, "
    return (
        f"{share}the engine rarely has a queue{held}: the schedulers will likely make identical decisions "
        "(each request dispatched as it arrives). For a comparison that can differ, raise the rate, use fewer "
        "slots (max_num_seqs) or less KV (kv_capacity_tokens)."
    )


def real_engine_load(kind: str) -> OfferedLoad:
    """No estimate for a real engine (``kind``: vllm, lmdeploy, openai), and why, in words."""
    return OfferedLoad(
        None,
        None,
        None,
        None,
        f"No capacity estimate for a real engine ({kind}): its speed, KV cache "
        "and slots are known only once its server runs. Watch the waiting requests in the live view, or "
        "profile it ('python -m runners profile') and try the setting on the simulator first.",
    )


def offered_load(config: RunConfig) -> OfferedLoad:
    """The offered load of a run config (:class:`runners.run.config.RunConfig`) against its engine.
    The simulator gets the estimate; a real engine gets a sentence saying why there is none.
    ConfigError / DatasetError when the engine or workload cannot be resolved."""
    from runners.engines.sim_config import SimulatorConfig

    engine = config.engine
    if not isinstance(engine, SimulatorConfig):
        return real_engine_load(engine.kind)
    from runners.engines.fidelity import fidelity_sentence

    resolved = engine.resolve()
    load = _simulated_load(config, engine, resolved)
    return replace(
        load,
        fidelity=fidelity_sentence(
            resolved.profile.name, resolved.profile.fidelity, load.rate_rps, resolved.profile.source
        ),
    )


def _simulated_load(config: RunConfig, engine: SimulatorConfig, resolved: ResolvedSimulator) -> OfferedLoad:
    """The offered load of ``config`` on its simulator ``engine`` (``config.engine``), resolved."""
    estimate = estimate_capacity(
        resolved.latency,
        workload_lengths(config.workload),
        resolved.kv_capacity_tokens,
        resolved.block_size,
        resolved.max_num_seqs,
        resolved.max_num_batched_tokens,
        engine.instances,
    )
    static = (
        " (continuous batching; this engine runs each batch to completion, so it carries less)"
        if engine.run_to_completion
        else ""
    )
    capacity = (
        f"estimated capacity of {estimate.capacity_rps:.2f} req/s{static}: {estimate.batch} requests at once "
        f"per instance, limited by {estimate.limit}; mean prompt {estimate.lengths.mean_input:.0f} and reply "
        f"{estimate.lengths.mean_output:.0f} tokens"
    )
    requests = config.workload.requests
    arrival = config.workload.arrival
    if arrival.process == "replay" or arrival.rate is None:
        return OfferedLoad(
            estimate,
            None,
            None,
            None,
            f"Arrivals are replayed from a file: no offered rate to compare with the engine's {capacity}.",
        )
    if arrival.process == "all-at-once":
        occupancy = requests / engine.instances
        return OfferedLoad(
            estimate,
            None,
            None,
            occupancy,
            f"All {requests} requests arrive at once, against the engine's {capacity}.",
            low=occupancy <= estimate.batch,
        )
    share = estimate.share(arrival.rate)
    occupancy = fluid_occupancy(estimate, arrival.rate, requests)
    return OfferedLoad(
        estimate,
        arrival.rate,
        share,
        occupancy,
        f"Offered load {arrival.rate:g} req/s is {share:.0%} of the engine's {capacity}. By the end of "
        f"the arrivals about {min(occupancy, estimate.batch):.0f} of its {estimate.batch} slots are in "
        f"use" + (f" and {occupancy - estimate.batch:.0f} requests wait." if occupancy > estimate.batch else "."),
        low=is_low(estimate, occupancy),
    )
