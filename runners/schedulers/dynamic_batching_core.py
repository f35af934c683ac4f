"""The pure decision functions of 000's dynamic batching (Alg. 1 memory, Alg. 2 SLA), shared by
the client-side policies (:mod:`runners.schedulers.dynamic_batching`) and the in-engine vLLM
scheduler (:mod:`runners.schedulers.vllm.dynamic_mem`): one function, two callers, so the
twins cannot drift.

Standard library only: the in-engine caller runs inside the vLLM server's Python, which has
neither scipy nor schedlab's other dependencies. The normal quantile is
:class:`statistics.NormalDist`'s (Wichura's AS241, relative error below 1e-15 against scipy's
``norm.ppf``). Token counts are tokens, latencies seconds, batch sizes requests.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from statistics import NormalDist

_STANDARD_NORMAL = NormalDist()


def normal_quantile(p: float) -> float:
    """Phi^-1(p), the standard normal quantile, for 0 < p < 1."""
    return _STANDARD_NORMAL.inv_cdf(p)


def memory_batch_size(eta_tokens: float, mean_tokens: float, std_tokens: float, eps: float) -> tuple[int, float]:
    """(b_t, L0) of Alg. 1 for KV capacity ``eta_tokens`` and per-request token mean/std (tokens);
    ``eps`` is eps_M, the allowed overflow probability. b_t >= 1; L0 is the safety buffer (tokens)."""
    if mean_tokens <= 0 or eta_tokens <= 0:
        return 1, 0.0
    theta = normal_quantile(1.0 - eps)
    sigma_theta = std_tokens * theta
    root = (math.sqrt(sigma_theta**2 + 4 * mean_tokens * eta_tokens) - sigma_theta) / (2 * mean_tokens)
    b_star = root * root
    buffer = theta * std_tokens * math.sqrt(b_star)
    return max(1, int(math.floor((eta_tokens - buffer) / mean_tokens))), buffer


def block_footprint(mean_tokens: float, variance_tokens: float, block_size: int | None) -> tuple[float, float]:
    """(mean, variance) in tokens of a request's KV footprint block * ceil(x / block) for x tokens
    of mean ``mean_tokens`` and variance ``variance_tokens``, the rounding residue taken as uniform
    over the block: + (block - 1) / 2 to the mean, + (block^2 - 1) / 12 to the variance."""
    if not block_size or block_size <= 1:
        return mean_tokens, variance_tokens
    return mean_tokens + (block_size - 1) / 2, variance_tokens + (block_size**2 - 1) / 12


def clamp_batch(size: int, decoding_now: int, b_max: int) -> int:
    """min(max(b, N_decode), B_max): never below what is already decoding, never above B_max."""
    return min(max(size, decoding_now), b_max)


@dataclass(frozen=True)
class SLAWindow:
    """Alg. 2's search window [low, high], requests."""

    low: int
    high: int


def sla_window_update(
    window: SLAWindow,
    tau_s: float,
    mean_batch: float,
    d_sla_s: float,
    eps_s: float,
    alpha: int,
    delta: int,
    b_min: int,
    b_max: int,
) -> SLAWindow:
    """One step of Alg. 2's window rule (latencies in seconds, sizes in requests). The window
    stays inside [B_min, B_max], the paper's hard bounds (its lines 6 and 10 alone could leave
    them: b above B_max, or b below B_min when few requests are in flight)."""
    b = int(round(mean_batch))
    if tau_s > d_sla_s + eps_s:
        high = min(max(b, window.low + alpha), b_max)
        low = max(window.low - delta, b_min)
    elif tau_s < d_sla_s - eps_s:
        low = max(min(b, window.high - alpha), b_min)
        high = min(window.high + delta, b_max)
    else:
        high = min(b + alpha // 2, b_max)
        low = max(b - alpha // 2, b_min)
    return SLAWindow(low, high)


def sla_batch_size(window: SLAWindow, decoding_now: int, b_max: int) -> int:
    """Alg. 2's batch size from its window (lines 17-18): floor((b_low + b_high) / 2), clamped
    as Alg. 1's (:func:`clamp_batch`), requests."""
    return clamp_batch((window.low + window.high) // 2, decoding_now, b_max)


class RecentMeans:
    """Alg. 2's "recent average decode latency" and "recent average decode batch size": the
    means of the last ``size`` (latency, batch) pairs added (seconds, requests)."""

    def __init__(self, size: int) -> None:
        self._latency: deque[float] = deque(maxlen=size)
        self._batch: deque[float] = deque(maxlen=size)

    def add(self, latency_s: float, batch: float) -> tuple[float, float]:
        """Add one pair; return (mean latency, mean batch) over the last ``size`` pairs."""
        self._latency.append(latency_s)
        self._batch.append(batch)
        return sum(self._latency) / len(self._latency), sum(self._batch) / len(self._batch)

    def __len__(self) -> int:
        return len(self._latency)


class StepLatencyMeter:
    """tau for the in-engine Alg. 2: the engine's own step time, measured per step.

    :meth:`scheduled` is called when a step has been scheduled (``started``: the time its
    scheduling began, seconds on a monotonic clock; ``batch``: running requests in it;
    ``decoding``: those of them that had produced a token, i.e. decode in this step);
    :meth:`finished` when that step's model output comes back (``now``, same clock). A step is
    timed only when it has decoding requests: a step of prefills alone delays no token of a
    running request, so it is no decode latency. The time from a step's scheduling to its output
    counts only that step's work (scheduling, the forward pass, sampling): the engine's idle
    waits for requests come between steps, not inside one, and so do the output processing and
    the hand-off to the API server. Steps are matched by ``key`` (any value naming the step,
    e.g. the id of the scheduler's output), so a pipeline that schedules the next step before
    the last one's output returns is timed per step too. At most ``max_pending`` steps are held
    awaiting their output (an output that never comes, e.g. a failed step, is dropped oldest
    first)."""

    def __init__(self, samples: int, max_pending: int = 64) -> None:
        self.recent = RecentMeans(samples)
        self.steps = 0  # decode steps timed so far
        self._max_pending = max_pending
        self._pending: dict[Hashable, tuple[float, int]] = {}

    def scheduled(self, key: Hashable, started: float, batch: int, decoding: int) -> None:
        """A step was scheduled; it is timed when ``decoding`` > 0."""
        if decoding <= 0:
            return
        self._pending[key] = (started, batch)
        while len(self._pending) > self._max_pending:
            del self._pending[next(iter(self._pending))]

    def finished(self, key: Hashable, now: float) -> tuple[float, float] | None:
        """The output of step ``key`` came back at ``now``: (tau, mean batch) over the last
        ``samples`` timed steps (seconds, requests), or None when the step was not timed."""
        step = self._pending.pop(key, None)
        if step is None:
            return None
        started, batch = step
        self.steps += 1
        return self.recent.add(max(0.0, now - started), batch)


class StepSLAController:
    """000 Alg. 2 driven by the engine's own step times, for the in-engine scheduler: the step
    timing of :class:`StepLatencyMeter` moves the window with :func:`sla_window_update` (the
    client-side policy's function) each time a timed step's output comes back, and
    :meth:`limit` is :func:`sla_batch_size` of the window. Latencies in seconds, sizes in
    requests; the arguments are Alg. 2's (alpha already resolved, B_max the engine's)."""

    def __init__(
        self, d_sla_s: float, eps_s: float, alpha: int, delta: int, b_min: int, b_max: int, samples: int
    ) -> None:
        self.d_sla_s, self.eps_s, self.alpha, self.delta = d_sla_s, eps_s, alpha, delta
        self.b_min, self.b_max = b_min, b_max
        self.window = SLAWindow(b_min, b_max)  # Alg. 2 line 1
        self.meter = StepLatencyMeter(samples)
        self.tau_s: float | None = None  # the last tau the window moved with, seconds
        self.batch_mean: float | None = None  # the mean batch over the same steps, requests

    def step_scheduled(self, key: Hashable, started: float, batch: int, decoding: int) -> None:
        """See :meth:`StepLatencyMeter.scheduled`."""
        self.meter.scheduled(key, started, batch, decoding)

    def step_finished(self, key: Hashable, now: float) -> bool:
        """Step ``key``'s output came back at ``now``; True when it was timed and moved the window."""
        measured = self.meter.finished(key, now)
        if measured is None:
            return False
        self.tau_s, self.batch_mean = measured
        self.window = sla_window_update(
            self.window,
            self.tau_s,
            self.batch_mean,
            self.d_sla_s,
            self.eps_s,
            self.alpha,
            self.delta,
            self.b_min,
            self.b_max,
        )
        return True

    def limit(self, decoding_now: int) -> int:
        """Alg. 2's running limit now (requests)."""
        return sla_batch_size(self.window, decoding_now, self.b_max)


def default_alpha(b_min: int, b_max: int) -> int:
    """alpha scaled to the search window: B_max // 32 (8 at 256), at least 2 (a window of
    alpha // 2 >= 1 either side of b on target), at most the window B_max - B_min (at least 1)."""
    return min(max(2, b_max // 32), max(1, b_max - b_min))


def batch_capacity_tokens(block_size: int, free_blocks: int, held_block_ids: Iterable[Iterable[int]]) -> int:
    """eta for the in-engine Alg. 1, tokens, block-exact: the blocks free now plus the distinct
    blocks the running requests hold (``held_block_ids``: each running request's block ids; a
    block shared by several, a common prompt prefix, counts once), times ``block_size``. Blocks
    held by anything else (a waiting request that keeps its blocks) are not the batch's to use and
    are left out."""
    held: set[int] = set()
    for ids in held_block_ids:
        held.update(ids)
    return block_size * (free_blocks + len(held))


def memory_limit(
    eta_tokens: float,
    prompt_mean: float,
    prompt_variance: float,
    output_mean: float,
    output_variance: float,
    block_size: int | None,
    eps: float,
    decoding_now: int,
    b_max: int,
) -> tuple[int, float, float]:
    """Alg. 1's running limit from per-request prompt and output moments (tokens): the footprint
    of one request (prompt + output, in whole blocks: :func:`block_footprint`), the batch size
    :func:`memory_batch_size` and the clamp :func:`clamp_batch`, composed as the client-side
    policy composes them. Returns (limit, footprint mean, footprint std), tokens."""
    mean, variance = block_footprint(prompt_mean + output_mean, prompt_variance + output_variance, block_size)
    std = math.sqrt(variance)
    size, _ = memory_batch_size(eta_tokens, mean, std, eps)
    return clamp_batch(size, decoding_now, b_max), mean, std
