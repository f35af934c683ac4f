"""Step-time model of a continuous-batching engine (SLO-aware paper eq. 14-15, SCLS eq. 3-4).

Prefill of a batch of ``b`` requests with ``l`` prompt tokens each takes
    t_p(b, l) = alpha_p * b * l + beta_p * b + gamma_p * l + delta_p      (seconds)
and one decode step of ``b`` requests at context length ``l`` takes
    tau_d(b, l) = alpha_d * b * l + beta_d * b + gamma_d * l + delta_d   (seconds).

For a step that mixes requests of different lengths (or prefill chunks and decodes, as chunked
prefill does) we use the token sum for ``b * l`` and the mean for ``l``:
    step = [alpha_p * P_tokens + beta_p * P + gamma_p * P_tokens / P]      (if P > 0 prefills)
         + [alpha_d * D_context + beta_d * D + gamma_d * D_context / D]    (if D > 0 decodes)
         + max(delta_p if P > 0, delta_d if D > 0)
which equals eq. 14 on a pure prefill step of equal lengths and eq. 15 on a pure decode step.

That is the paper's model of the paper's engine (kept for its preset and for slo-sa's predictor).
Profiles fitted on a real engine carry a :class:`LinearStepModel` instead, whose terms follow how
an iteration-level engine spends one step (cf. BLIS/inference-sim's beta0 + beta1 * prefill
tokens + beta2 * decode tokens):

    step = fixed_s                                   (scheduler pass, launch, sampling setup)
         + per_prefill_token_s  * prefill_tokens     (prompt tokens computed in the step)
         + per_decode_request_s * decode_requests    (one new token each)
         + per_context_token_s  * decode_context     (KV tokens the decodes attend over)
         + per_request_cpu_s    * (prefill_requests + decode_requests)   (per-request CPU work)
         + idle_start_s         * (1 if the engine was idle before this step, else 0)
         + per_prefill_context_token_s * prefill_context
                                   (sum over the step's prefill chunks of chunk tokens x tokens
                                    already in that request's KV: a cached prefix, earlier chunks)

(``idle_start_s``: a step that starts on an idle engine, which waited for a request, costs more
than the same step inside a busy loop; on the CPU vLLM one prompt alone takes 1.5-3 ms longer
than the same prompt in a mixed step. Absent in older profiles: 0.)

(``per_prefill_context_token_s``: a chunk computed after tokens already in its request's KV
attends over them, so it costs more than the same chunk of a fresh prompt; the profiler's
``prefix`` phase measures prompts that extend a cached one. Absent in older profiles: 0, and the
model is then exactly what it was.)

On a pure step it is eq. 14/15 with gamma = 0 (see :meth:`LinearStepModel.phases`), so every
caller of ``prefill``/``decode`` (slo-sa, SCLS, capacity estimates) gets the same numbers, and
a mixed step costs one ``fixed_s`` rather than both phases' constants.

A client of a real server also waits outside the steps: the HTTP request is parsed, the prompt
tokenised (chat template applied), the request handed to the engine process, and the first token
detokenised and streamed back. :class:`ServingOverhead` models that as one delay before the
engine sees a request,

    overhead(prompt) = request_s + per_prompt_token_s * prompt_tokens
                     + busy_engine_s * (1 if the engine is running requests, else 0)
                     + per_running_request_s * requests the engine is running       (seconds),

measured by the profiler as the client's TTFT minus the engine's own queue and prefill times
(vLLM's ``vllm:request_queue_time_seconds`` and ``vllm:request_prefill_time_seconds``, engine-core
clock), for prompts sent to an idle engine and prompts sent while requests decode (the front end
then shares the machine with a busy engine; on this 2-core machine that costs it time). On a big
model it is a few percent of TTFT; on the tiny CPU model it is most of it. Where it knowingly
differs from vLLM:

- the whole delay is put before the engine. The real split (tokenisation and IPC before,
  detokenisation and streaming after) changes no client metric while the delay does not depend
  on load (every request's timeline only shifts), but the engine sees a request earlier than
  modelled by the part that really comes after;
- the front end's CPU work per streamed token is no separate term: where it competes with the
  engine for the same cores it is inside the decode step times, which the profiler reads from the
  client's token gaps;
- the delay depends on load only through the requests the engine runs when a request arrives
  (the front end streams their tokens and, on a machine whose cores it shares with the engine,
  competes with it); queueing inside the front end itself is not modelled.

Where the front end shares cores with the engine, its work on each arriving request (HTTP,
tokenising, handing it over, answering) also takes time from the engine's steps, a cost no step's
composition shows: ``busy_request_engine_s`` is the engine time lost per request that arrives
while the engine runs requests, added by the simulator to the engine's next step. The profiler
measures it (its ``interference`` windows: decoding with and without a stream of short requests
arriving); 0 in profiles without them, and on a GPU server whose front end has cores of its own
it is about 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from runners.input_model import InputModel

#: Largest coefficient, seconds (per token, request or step): a step of one token taking an hour
#: is no engine; finite and bounded so a step time never overflows to inf.
MAX_COEFFICIENT_S = 3600.0
#: A latency coefficient (seconds per its unit): 0 to MAX_COEFFICIENT_S; finite like every InputModel float.
Coefficient = Annotated[float, Field(ge=0, le=MAX_COEFFICIENT_S)]


def phase_seconds(alpha: Any, beta: Any, gamma: Any, delta: Any, batch: Any, length: Any) -> Any:
    """Eq. 14/15, the one place it is written: alpha*b*l + beta*b + gamma*l + delta, seconds, for
    ``batch`` requests at ``length`` tokens. Scalars or numpy arrays (broadcast); plain arithmetic,
    so numba kernels call it too (:mod:`runners.schedulers.slo_annealing_kernel` registers it
    with ``register_jitable``; this module does not import numba)."""
    return alpha * batch * length + beta * batch + gamma * length + delta


def mean_decode_context(input_tokens: Any, steps: Any) -> Any:
    """Mean context length (tokens) over ``steps`` decode steps after a prompt of ``input_tokens``:
    step k (k = 1..steps) attends over input + k tokens, so the mean is input + (steps + 1) / 2."""
    return input_tokens + (steps + 1) / 2.0


def decode_seconds(alpha: Any, beta: Any, gamma: Any, delta: Any, batch: Any, input_tokens: Any, steps: Any) -> Any:
    """Seconds for ``steps`` decode steps of ``batch`` requests after ``input_tokens``:
    sum_{k=1..steps} tau_d(b, input + k) = steps * tau_d(b, input + (steps + 1) / 2) in closed form
    (tau_d linear in the context; 0 for 0 steps). Scalars or numpy arrays; numba-callable as
    :func:`phase_seconds`."""
    return steps * phase_seconds(alpha, beta, gamma, delta, batch, mean_decode_context(input_tokens, steps))


class PhaseCoefficients(InputModel):
    """alpha (s per token-request), beta (s per request), gamma (s per token), delta (s); each
    finite, 0 to 3600."""

    model_config = ConfigDict(frozen=True)

    alpha: Coefficient
    beta: Coefficient
    gamma: Coefficient
    delta: Coefficient

    def at(self, batch: Any, length: Any) -> Any:
        """alpha*b*l + beta*b + gamma*l + delta, in seconds (:func:`phase_seconds`); scalars or
        numpy arrays."""
        return phase_seconds(self.alpha, self.beta, self.gamma, self.delta, batch, length)

    def line(self, length: Any) -> tuple[Any, Any]:
        """The same time as a line in the batch size b at ``length`` tokens: (alpha*l + beta,
        gamma*l + delta), seconds per request and seconds; slope * b + intercept equals
        :meth:`at` up to rounding. Scalars or numpy arrays."""
        return self.alpha * length + self.beta, self.gamma * length + self.delta

    def as_tuple(self) -> tuple[float, float, float, float]:
        """(alpha, beta, gamma, delta) as plain floats, for numba kernels."""
        return float(self.alpha), float(self.beta), float(self.gamma), float(self.delta)

    @classmethod
    def from_milliseconds(cls, alpha: float, beta: float, gamma: float, delta: float) -> "PhaseCoefficients":
        return cls(alpha=alpha / 1000, beta=beta / 1000, gamma=gamma / 1000, delta=delta / 1000)


#: Fewest measured steps per fitted term: a linear step model fitted on fewer than
#: len(BASE_STEP_TERMS) x this many steps is refused (by the profiler, and in a profile's ``fit.points``).
MIN_POINTS_PER_TERM = 3

#: The terms every step profile's loads estimate (what the minimum of measured steps counts).
BASE_STEP_TERMS: tuple[str, ...] = (
    "fixed_s",
    "per_prefill_token_s",
    "per_decode_request_s",
    "per_context_token_s",
    "per_request_cpu_s",
    "idle_start_s",
)
#: The linear step model's terms, in the order of its design-matrix columns (see
#: :meth:`LinearStepModel.features`): the base terms, then the prefill-context term, which only
#: the profiler's prefix loads estimate (0 without them).
STEP_TERMS: tuple[str, ...] = (*BASE_STEP_TERMS, "per_prefill_context_token_s")
#: Fewest measured steps a linear step model is fitted on.
MIN_STEP_POINTS = len(BASE_STEP_TERMS) * MIN_POINTS_PER_TERM


class LinearStepModel(InputModel):
    """One engine step's seconds as a linear function of what the step computes (module
    docstring). Every term finite, 0 to 3600 s per unit, and required."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["linear-step"] = "linear-step"
    fixed_s: Coefficient = Field(description="seconds per step")
    per_prefill_token_s: Coefficient = Field(description="seconds per prompt token computed")
    per_decode_request_s: Coefficient = Field(description="seconds per decoding request")
    per_context_token_s: Coefficient = Field(description="seconds per KV token a decoding request attends over")
    per_request_cpu_s: Coefficient = Field(description="seconds per request in the step (prefill or decode)")
    idle_start_s: Coefficient = Field(default=0.0, description="seconds added to a step that starts on an idle engine")
    per_prefill_context_token_s: Coefficient = Field(
        default=0.0,
        description="seconds per (prompt token computed x token already in its request's KV: a cached prefix "
        "or earlier chunks); 0 when absent",
    )

    @staticmethod
    def features(
        prefill_requests: float,
        prefill_tokens: float,
        decode_requests: float,
        decode_context: float,
        idle_start: bool = False,
        prefill_context: float = 0.0,
    ) -> tuple[float, ...]:
        """The design-matrix row of one step, in :data:`STEP_TERMS` order (1 for the fixed term,
        0 everywhere for an empty step). ``prefill_context``: sum over the prefill chunks of chunk
        tokens x tokens already in that request's KV (token^2)."""
        if not prefill_requests and not decode_requests:
            return (0.0,) * len(STEP_TERMS)
        return (
            1.0,
            float(prefill_tokens),
            float(decode_requests),
            float(decode_context),
            float(prefill_requests + decode_requests),
            1.0 if idle_start else 0.0,
            float(prefill_context),
        )

    def step_time(
        self,
        prefill_requests: int,
        prefill_tokens: int,
        decode_requests: int,
        decode_context: int,
        idle_start: bool = False,
        prefill_context: int = 0,
    ) -> float:
        """Seconds for one step (started on an idle engine when ``idle_start``; its prefill chunks
        after ``prefill_context`` chunk x KV tokens, see :meth:`features`); 0 for an empty step."""
        row = self.features(
            prefill_requests, prefill_tokens, decode_requests, decode_context, idle_start, prefill_context
        )
        return sum(getattr(self, term) * value for term, value in zip(STEP_TERMS, row))

    def phases(self) -> tuple[PhaseCoefficients, PhaseCoefficients]:
        """(prefill, decode) eq. 14/15 coefficients equal to this model on pure steps:
        prefill of b prompts of l tokens = per_prefill_token*b*l + per_request_cpu*b + fixed;
        decode of b requests at context l = per_context_token*b*l + (per_decode_request +
        per_request_cpu)*b + fixed."""
        prefill = PhaseCoefficients(
            alpha=self.per_prefill_token_s, beta=self.per_request_cpu_s, gamma=0.0, delta=self.fixed_s
        )
        decode = PhaseCoefficients(
            alpha=self.per_context_token_s,
            beta=min(MAX_COEFFICIENT_S, self.per_decode_request_s + self.per_request_cpu_s),
            gamma=0.0,
            delta=self.fixed_s,
        )
        return prefill, decode


class ServingOverhead(InputModel):
    """The serving front end's delay before the engine sees a request, seconds (module
    docstring). Every term finite, 0 to 3600; ``request_s`` and ``per_prompt_token_s`` required,
    the two busy-engine terms 0 when absent."""

    model_config = ConfigDict(frozen=True)

    request_s: Coefficient = Field(description="seconds per request (HTTP, IPC, streaming the first token)")
    per_prompt_token_s: Coefficient = Field(description="seconds per prompt token (tokenisation, chat template)")
    busy_engine_s: Coefficient = Field(default=0.0, description="seconds added while the engine is running requests")
    per_running_request_s: Coefficient = Field(default=0.0, description="seconds per request the engine is running")
    busy_request_engine_s: Coefficient = Field(
        default=0.0,
        description="engine seconds lost per request that arrives while the engine runs requests (a front end "
        "sharing the engine's cores); 0 when absent",
    )

    def seconds(self, prompt_tokens: int, running: int = 0) -> float:
        """The delay for one request of ``prompt_tokens`` that arrives while the engine runs
        ``running`` requests, seconds."""
        delay = self.request_s + self.per_prompt_token_s * prompt_tokens
        if running:
            delay += self.busy_engine_s + self.per_running_request_s * running
        return delay


@dataclass(frozen=True)
class LatencyModel:
    """Prefill and decode coefficients, in seconds; with ``step`` set, steps are costed by that
    linear step model and ``prefill``/``decode`` are its eq. 14/15 view (use :meth:`of_step`).
    ``overhead``: the serving front end's delay before the engine sees a request (None: none)."""

    prefill: PhaseCoefficients
    decode: PhaseCoefficients
    step: LinearStepModel | None = None
    overhead: ServingOverhead | None = None

    @classmethod
    def of_step(cls, step: LinearStepModel, overhead: ServingOverhead | None = None) -> "LatencyModel":
        """The latency model of a linear step model (phases derived, exact on pure steps)."""
        prefill, decode = step.phases()
        return cls(prefill=prefill, decode=decode, step=step, overhead=overhead)

    @property
    def idle_start_s(self) -> float:
        """Seconds added to a step that starts on an idle engine (0 for the phase model)."""
        return 0.0 if self.step is None else self.step.idle_start_s

    @property
    def kind(self) -> str:
        """``"linear-step"`` or ``"phase"`` (eq. 14-15)."""
        return "phase" if self.step is None else self.step.kind

    def prefill_time(self, batch: int, input_tokens: float) -> float:
        """Eq. 14: seconds to prefill ``batch`` prompts of ``input_tokens`` each."""
        return self.prefill.at(batch, input_tokens)

    def decode_step_time(self, batch: int, context_tokens: float) -> float:
        """Eq. 15: seconds for one decode step of ``batch`` requests at ``context_tokens``."""
        return self.decode.at(batch, context_tokens)

    @property
    def prefill_context_s(self) -> float:
        """Seconds per (prefill token x token already in its request's KV); 0 for the phase model."""
        return 0.0 if self.step is None else self.step.per_prefill_context_token_s

    def step_time(
        self,
        prefill_requests: int,
        prefill_tokens: int,
        decode_requests: int,
        decode_context: int,
        prefill_context: int = 0,
    ) -> float:
        """Seconds for one engine step (see module docstring); 0 for an empty step.
        ``prefill_context`` (token^2, the step model's prefill-context feature) is not a term of
        the phase model."""
        if self.step is not None:
            return self.step.step_time(
                prefill_requests, prefill_tokens, decode_requests, decode_context, prefill_context=prefill_context
            )
        total = 0.0
        fixed = 0.0
        if prefill_requests:
            p = self.prefill
            total += p.alpha * prefill_tokens + p.beta * prefill_requests + p.gamma * prefill_tokens / prefill_requests
            fixed = p.delta
        if decode_requests:
            d = self.decode
            total += d.alpha * decode_context + d.beta * decode_requests + d.gamma * decode_context / decode_requests
            fixed = max(fixed, d.delta)
        return total + fixed

    def decode_time(self, batch: int, input_tokens: float, output_tokens: int) -> float:
        """Seconds for the ``output_tokens - 1`` decode steps after the first token.

        The first token comes out of the prefill step; decode step k (k = 1..n-1) runs at context
        length input + k, so this is sum_k tau_d(batch, input + k) in closed form.
        """
        steps = max(0, int(output_tokens) - 1)
        if steps == 0:
            return 0.0
        d = self.decode
        return float(decode_seconds(d.alpha, d.beta, d.gamma, d.delta, batch, input_tokens, steps))

    def serve_time(self, batch: Any, input_tokens: Any, output_tokens: Any) -> Any:
        """Seconds to serve requests of ``input_tokens`` for ``output_tokens`` (>= 1) in batches of
        ``batch``: the prefill (eq. 14), whose step gives the first token, plus the closed form of
        the ``output_tokens - 1`` decode steps (eq. 15-16; SCLS eq. 1-4 with output = S). Scalars
        or numpy arrays (broadcast)."""
        d = self.decode
        steps = output_tokens - 1
        return self.prefill.at(batch, input_tokens) + decode_seconds(
            d.alpha, d.beta, d.gamma, d.delta, batch, input_tokens, steps
        )

    def serve_line(self, input_tokens: Any, output_tokens: int) -> tuple[Any, Any]:
        """:meth:`serve_time` as a line in the batch size N: (slope, intercept) with
        serve_time(N) = slope * N + intercept up to rounding, seconds per request and seconds, for
        each prompt length in ``input_tokens`` (scalar or numpy array)."""
        steps = output_tokens - 1
        prefill_slope, prefill_intercept = self.prefill.line(input_tokens)
        decode_slope, decode_intercept = self.decode.line(mean_decode_context(input_tokens, steps))
        return prefill_slope + steps * decode_slope, prefill_intercept + steps * decode_intercept

    def alone_latency(self, input_tokens: float, output_tokens: int) -> tuple[float, float]:
        """(TTFT, E2E) in seconds of one request served alone on an idle engine, as its client
        sees them (the serving overhead included)."""
        ttft = self.prefill_time(1, input_tokens) + self.idle_start_s
        if self.overhead is not None:
            ttft += self.overhead.seconds(round(input_tokens))
        return ttft, ttft + self.decode_time(1, input_tokens, output_tokens)
