"""The pure decision functions of 000's dynamic batching (Alg. 1 memory, Alg. 2 SLA), shared by
the client-side policies (:mod:`runners.schedulers.dynamic_batching`) and the in-engine vLLM
scheduler (:mod:`runners.engines.vllm_scheduler.dynamic_mem`): one function, two callers, so the
twins cannot drift.

Standard library only: the in-engine caller runs inside the vLLM server's Python, which has
neither scipy nor schedlab's other dependencies. The normal quantile is
:class:`statistics.NormalDist`'s (Wichura's AS241, relative error below 1e-15 against scipy's
``norm.ppf``). Token counts are tokens, latencies seconds, batch sizes requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Iterable

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


def sla_window_update(window: SLAWindow, tau_s: float, mean_batch: float, d_sla_s: float, eps_s: float, alpha: int,
                      delta: int, b_min: int, b_max: int) -> SLAWindow:
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


def memory_limit(eta_tokens: float, prompt_mean: float, prompt_variance: float, output_mean: float,
                 output_variance: float, block_size: int | None, eps: float, decoding_now: int,
                 b_max: int) -> tuple[int, float, float]:
    """Alg. 1's running limit from per-request prompt and output moments (tokens): the footprint
    of one request (prompt + output, in whole blocks: :func:`block_footprint`), the batch size
    :func:`memory_batch_size` and the clamp :func:`clamp_batch`, composed as the client-side
    policy composes them. Returns (limit, footprint mean, footprint std), tokens."""
    mean, variance = block_footprint(prompt_mean + output_mean, prompt_variance + output_variance, block_size)
    std = math.sqrt(variance)
    size, _ = memory_batch_size(eta_tokens, mean, std, eps)
    return clamp_batch(size, decoding_now, b_max), mean, std
