"""Predictors shared by the papers' schedulers: request latency from the latency model, output
length per task (an online Gaussian, the SLO-aware paper's method, or an oracle), and each
instance's KV memory from telemetry."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import Field

from runners.engines.latency_model import LatencyModel
from runners.input_model import InputModel
from runners.workload.requests import Request

OutputMode = Literal["gaussian", "oracle", "noisy-oracle"]


class OutputPredictorParams(InputModel):
    """How a scheduler guesses output lengths (tokens)."""

    output_predictor: OutputMode = Field(
        default="gaussian",
        description="gaussian: per-task normal fitted online from finished requests (SLO-aware paper); "
        "oracle: the true target; noisy-oracle: target x (1 + N(0, noise))",
    )
    noise: float = Field(default=0.2, ge=0, description="relative error (std) of noisy-oracle")
    prior_tokens: int = Field(default=256, gt=0, description="gaussian: guess before any request of a task finished")
    predictor_seed: int = Field(default=0, ge=0)


@dataclass
class RunningMoments:
    """Running count, mean and variance (Welford), for lengths seen one at a time."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, value: float) -> None:  # Welford
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)

    @property
    def variance(self) -> float:
        return self.m2 / (self.count - 1) if self.count > 1 else 0.0

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)


@dataclass
class OutputLengthPredictor:
    """Predicts a request's output tokens. One prediction per request, kept stable once drawn."""

    mode: OutputMode = "gaussian"
    noise: float = 0.2
    prior_tokens: int = 256
    seed: int = 0
    _moments: dict[str, RunningMoments] = field(default_factory=dict)
    _cache: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    @classmethod
    def from_params(cls, params: OutputPredictorParams) -> "OutputLengthPredictor":
        return cls(params.output_predictor, params.noise, params.prior_tokens, params.predictor_seed)

    def observe(self, task: str, output_tokens: int) -> None:
        """A request of ``task`` finished with ``output_tokens``: update the task's Gaussian."""
        self._moments.setdefault(task, RunningMoments()).add(float(output_tokens))

    def fitted(self, task: str) -> tuple[float, float] | None:
        """(mean, std) of the task's fitted Gaussian, or None before any observation."""
        moments = self._moments.get(task)
        return (moments.mean, moments.std) if moments and moments.count else None

    def predict(self, request: Request) -> int:
        """Predicted output tokens (>= 1) for ``request``; drawn once, then remembered."""
        cached = self._cache.get(request.request_id)
        if cached is not None:
            return cached
        if self.mode == "oracle":
            value = request.target_output_tokens
        elif self.mode == "noisy-oracle":
            value = request.target_output_tokens * (1.0 + self._rng.normal(0.0, self.noise))
        else:
            fit = self.fitted(request.task)
            value = self.prior_tokens if fit is None else self._rng.normal(fit[0], fit[1])
        prediction = max(1, int(round(value)))
        self._cache[request.request_id] = prediction
        return prediction

    def forget(self, request_id: str) -> None:
        self._cache.pop(request_id, None)


@dataclass(frozen=True)
class LatencyPredictor:
    """Request latencies (seconds) from the latency model, for a request served in a batch of b."""

    model: LatencyModel

    def ttft(self, batch: int, input_tokens: float) -> float:
        return self.model.prefill_time(batch, input_tokens)

    def e2e(self, batch: int, input_tokens: float, output_tokens: int) -> float:
        return self.model.prefill_time(batch, input_tokens) + self.model.decode_time(batch, input_tokens, output_tokens)

    def tpot(self, batch: int, input_tokens: float, output_tokens: int) -> float | None:
        if output_tokens <= 1:
            return None
        return self.model.decode_time(batch, input_tokens, output_tokens) / (output_tokens - 1)


@dataclass
class InstanceMemory:
    """What a policy knows of one instance's KV cache: capacity (tokens) and latest usage (0-1)."""

    capacity_tokens: int | None
    usage: float | None = None
    running: int | None = None
    waiting: int | None = None
    sampled_at: float | None = None

    @property
    def free_tokens(self) -> float | None:
        if self.capacity_tokens is None:
            return None
        return self.capacity_tokens * (1.0 - (self.usage or 0.0))
