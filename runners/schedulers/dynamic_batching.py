"""Memory-aware and SLA-constrained dynamic batch size (Pang, Li, Wang; 000 Alg. 1 and Alg. 2),
as a per-instance cap on the requests a client keeps in flight.

Alg. 1 (memory): with eta the KV capacity (tokens), per-request mean mu = E[l_in] + E[l_out] and
standard deviation sigma = sqrt(Var l_in + Var l_out), and theta = Phi^-1(1 - eps_M), the largest
batch whose total KV demand S stays within eta with probability 1 - eps_M (CLT, eq. 10-12) is
    b* = ((sqrt((sigma theta)^2 + 4 mu eta) - sigma theta) / (2 mu))^2,
the safety buffer is L0 = theta sigma sqrt(b*), and b_t = floor((eta - L0) / mu) (eq. 13-14).
(The paper writes L0 = eta - (theta sigma_S + mu_S); the form above is the one consistent with
its eq. 12, with mu and sigma per request.) The size is updated only when both prefilling and
decoding requests exist, then clamped to [decoding now, B_max].

Alg. 2 (SLA): a window [b_low, b_high] in [B_min, B_max] moves with the recent mean decode
latency tau (TPOT of the last ``window`` finished requests, measured by the client) and the
recent mean batch b (requests in flight):
    tau > D + eps: b_high = max(b, b_low + alpha), b_low = max(b_low - delta, B_min)
    tau < D - eps: b_low = min(b, b_high - alpha), b_high = min(b_high + delta, B_max)
    otherwise:     b_high = min(b + alpha // 2, B_max), b_low = max(b - alpha // 2, B_min)
then b_t = floor((b_low + b_high) / 2), clamped as Alg. 1, and the cap is min(memory, SLA).

Statistics come from what the client sees: prompt lengths of arrived requests, output lengths of
finished ones (a prior until the first finishes), prefill = in flight without a first token.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from pydantic import Field
from scipy.stats import norm

from runners.predictors import RunningMoments
from runners.schedulers.base import Completion, Decision, InstanceInfo, PolicyParams, SchedulerPolicy
from runners.workload.requests import Request


def memory_batch_size(eta_tokens: float, mean_tokens: float, std_tokens: float, eps: float) -> tuple[int, float]:
    """(b_t, L0) of Alg. 1 for KV capacity ``eta_tokens`` and per-request token mean/std."""
    if mean_tokens <= 0 or eta_tokens <= 0:
        return 1, 0.0
    theta = float(norm.ppf(1.0 - eps))
    sigma_theta = std_tokens * theta
    root = (math.sqrt(sigma_theta**2 + 4 * mean_tokens * eta_tokens) - sigma_theta) / (2 * mean_tokens)
    b_star = root * root
    buffer = theta * std_tokens * math.sqrt(b_star)
    return max(1, int(math.floor((eta_tokens - buffer) / mean_tokens))), buffer


@dataclass(frozen=True)
class SLAWindow:
    low: int
    high: int


def sla_window_update(window: SLAWindow, tau_s: float, mean_batch: float, d_sla_s: float, eps_s: float, alpha: int,
                      delta: int, b_min: int, b_max: int) -> SLAWindow:
    """One step of Alg. 2's window rule (latencies in seconds, sizes in requests)."""
    b = int(round(mean_batch))
    if tau_s > d_sla_s + eps_s:
        high = max(b, window.low + alpha)
        low = max(window.low - delta, b_min)
    elif tau_s < d_sla_s - eps_s:
        low = min(b, window.high - alpha)
        high = min(window.high + delta, b_max)
    else:
        high = min(b + alpha // 2, b_max)
        low = max(b - alpha // 2, b_min)
    return SLAWindow(low, high)


def clamp_batch(size: int, decoding_now: int, b_max: int) -> int:
    """min(max(b, N_decode), B_max): never below what is already decoding, never above B_max."""
    return min(max(size, decoding_now), b_max)


class DynamicMemoryParams(PolicyParams):
    b_max: int = Field(default=256, gt=0, le=65_536, description="B_max: largest cap (requests in flight per instance)")
    eps_m: float = Field(default=0.05, ge=1e-9, le=1 - 1e-9,
                         description="eps_M: allowed probability of KV overflow, 1e-9 to 1 - 1e-9 (closer to 0 or 1 "
                                     "the normal quantile is infinite)")
    prior_output_tokens: int = Field(default=256, gt=0, le=10_000_000, description="E[l_out] before any request has finished")


class DynamicSLAParams(DynamicMemoryParams):
    d_sla_s: float = Field(default=0.050, gt=0, le=3600.0, description="D_SLA: decode latency target (TPOT), seconds")
    eps_s: float = Field(default=0.005, ge=0, le=3600.0, description="eps_D: tolerance around D_SLA, seconds")
    alpha: int = Field(default=8, gt=0, le=65_536, description="gap kept between b_low and b_high")
    delta: int = Field(default=2, gt=0, le=65_536, description="corrective step against noise")
    b_min: int = Field(default=1, gt=0, le=65_536, description="B_min")
    window: int = Field(default=16, gt=0, le=100_000, description="finished requests averaged for tau")
    memory_cap: bool = Field(default=True, description="also apply Alg. 1's memory cap (paper: b = min of both)")


class DynamicMemoryPolicy(SchedulerPolicy):
    name = "dynamic-mem"
    summary = "Caps requests in flight per instance at the largest batch the KV cache holds with probability 1 - eps_M."
    paper = "Pang, Li, Wang, memory-aware dynamic batching (000), Alg. 1"
    Params = DynamicMemoryParams

    def start(self, instances: list[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.capacity = {info.instance_id: info.kv_capacity_tokens for info in instances}
        self.b_max = {info.instance_id: min(self.params.b_max, info.max_num_seqs or self.params.b_max)
                      for info in instances}
        self.cap = {info.instance_id: self.b_max[info.instance_id] for info in instances}
        self.inputs = RunningMoments()
        self.outputs = RunningMoments()
        self.first_token_at: dict[str, float] = {}
        self.cap_history: list[tuple[float, int, int]] = []
        self.sized = {info.instance_id: False for info in instances}

    def on_arrival(self, request: Request, now: float) -> None:
        super().on_arrival(request, now)
        self.inputs.add(request.input_tokens)

    def on_first_token(self, request_id: str, instance: int, now: float) -> None:
        self.first_token_at[request_id] = now

    def on_completion(self, completion: Completion, now: float) -> None:
        super().on_completion(completion, now)
        if completion.done:
            self.outputs.add(completion.tokens_total)
        self.first_token_at.pop(completion.request_id, None)

    def on_failure(self, request_id: str, instance: int, reason: str, now: float) -> None:
        super().on_failure(request_id, instance, reason, now)
        self.first_token_at.pop(request_id, None)

    def _phases(self, instance: int) -> tuple[int, int]:
        """(prefilling, decoding) requests in flight on ``instance``, as the client sees them."""
        flying = self.in_flight[instance]
        decoding = sum(1 for rid in flying if rid in self.first_token_at)
        return len(flying) - decoding, decoding

    def memory_cap(self, instance: int) -> int | None:
        eta = self.capacity.get(instance)
        if eta is None or self.inputs.count == 0:
            return None
        mean_out = self.outputs.mean if self.outputs.count else float(self.params.prior_output_tokens)
        variance = self.inputs.variance + self.outputs.variance
        size, _ = memory_batch_size(eta, self.inputs.mean + mean_out, math.sqrt(variance), self.params.eps_m)
        return size

    def update_cap(self, instance: int, now: float) -> None:
        prefilling, decoding = self._phases(instance)
        if (prefilling > 0 and decoding > 0) or not self.sized[instance]:  # Alg. 1 line 4, and a first size
            size = self.memory_cap(instance)
            if size is not None:
                self.cap[instance] = clamp_batch(size, decoding, self.b_max[instance])
                self.sized[instance] = True

    def decide(self, now: float) -> Decision:
        dispatches = []
        for instance in sorted(self.in_flight):
            self.update_cap(instance, now)
            self.cap_history.append((now, instance, self.cap[instance]))
        for request_id in list(self.pending):
            open_instances = [i for i in self.in_flight if len(self.in_flight[i]) < self.cap[i]]
            if not open_instances:
                break
            instance = min(open_instances, key=lambda i: (len(self.in_flight[i]), i))
            dispatches.append(self._take(request_id, instance))
        return Decision(dispatches)


class DynamicSLAPolicy(DynamicMemoryPolicy):
    name = "dynamic-sla"
    summary = "Moves a batch-size window so the measured decode latency (TPOT) tracks D_SLA; capped by memory too."
    paper = "Pang, Li, Wang, SLA-constrained dynamic batching (000), Alg. 2"
    Params = DynamicSLAParams

    def start(self, instances: list[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        params: DynamicSLAParams = self.params  # type: ignore[assignment]
        self.windows = {i: SLAWindow(params.b_min, self.b_max[i]) for i in self.in_flight}
        self.recent_tpot = {i: deque(maxlen=params.window) for i in self.in_flight}
        self.recent_batch = {i: deque(maxlen=params.window) for i in self.in_flight}
        self.sla_cap = {i: self.b_max[i] for i in self.in_flight}

    def on_completion(self, completion: Completion, now: float) -> None:
        first = self.first_token_at.get(completion.request_id)
        if first is not None and completion.tokens_this_dispatch > 1:
            self.recent_tpot[completion.instance].append((now - first) / (completion.tokens_this_dispatch - 1))
        self.recent_batch[completion.instance].append(len(self.in_flight[completion.instance]))
        super().on_completion(completion, now)
        params: DynamicSLAParams = self.params  # type: ignore[assignment]
        instance = completion.instance
        if self.recent_tpot[instance]:
            tau = sum(self.recent_tpot[instance]) / len(self.recent_tpot[instance])
            batch = sum(self.recent_batch[instance]) / len(self.recent_batch[instance])
            window = sla_window_update(self.windows[instance], tau, batch, params.d_sla_s, params.eps_s, params.alpha,
                                       params.delta, params.b_min, self.b_max[instance])
            self.windows[instance] = window
            _, decoding = self._phases(instance)
            self.sla_cap[instance] = clamp_batch((window.low + window.high) // 2, decoding, self.b_max[instance])

    def update_cap(self, instance: int, now: float) -> None:
        params: DynamicSLAParams = self.params  # type: ignore[assignment]
        cap = self.sla_cap[instance]
        if params.memory_cap:
            memory = self.memory_cap(instance)
            if memory is not None:
                cap = min(cap, memory)
        self.cap[instance] = max(1, cap)
