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
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ConfigDict, Field

from runners.input_model import InputModel


#: Largest coefficient, seconds (per token, request or step): a step of one token taking an hour
#: is no engine; finite and bounded so a step time never overflows to inf.
MAX_COEFFICIENT_S = 3600.0


class PhaseCoefficients(InputModel):
    """alpha (s per token-request), beta (s per request), gamma (s per token), delta (s); each
    finite, 0 to 3600."""

    model_config = ConfigDict(frozen=True)

    alpha: float = Field(ge=0, le=MAX_COEFFICIENT_S)
    beta: float = Field(ge=0, le=MAX_COEFFICIENT_S)
    gamma: float = Field(ge=0, le=MAX_COEFFICIENT_S)
    delta: float = Field(ge=0, le=MAX_COEFFICIENT_S)

    def at(self, batch: float, length: float) -> float:
        """alpha*b*l + beta*b + gamma*l + delta, in seconds."""
        return self.alpha * batch * length + self.beta * batch + self.gamma * length + self.delta

    @classmethod
    def from_milliseconds(cls, alpha: float, beta: float, gamma: float, delta: float) -> "PhaseCoefficients":
        return cls(alpha=alpha / 1000, beta=beta / 1000, gamma=gamma / 1000, delta=delta / 1000)


@dataclass(frozen=True)
class LatencyModel:
    """Prefill and decode coefficients, in seconds."""

    prefill: PhaseCoefficients
    decode: PhaseCoefficients

    def prefill_time(self, batch: int, input_tokens: float) -> float:
        """Eq. 14: seconds to prefill ``batch`` prompts of ``input_tokens`` each."""
        return self.prefill.at(batch, input_tokens)

    def decode_step_time(self, batch: int, context_tokens: float) -> float:
        """Eq. 15: seconds for one decode step of ``batch`` requests at ``context_tokens``."""
        return self.decode.at(batch, context_tokens)

    def step_time(self, prefill_requests: int, prefill_tokens: int, decode_requests: int, decode_context: int) -> float:
        """Seconds for one engine step (see module docstring); 0 for an empty step."""
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
        mean_context = input_tokens + (steps + 1) / 2.0
        return steps * self.decode.at(batch, mean_context)

    def alone_latency(self, input_tokens: float, output_tokens: int) -> tuple[float, float]:
        """(TTFT, E2E) in seconds of one request served alone on an idle engine."""
        ttft = self.prefill_time(1, input_tokens)
        return ttft, ttft + self.decode_time(1, input_tokens, output_tokens)
