"""Per-request latency metrics, all measured from ARRIVAL (seconds).

With ``n`` output tokens (vLLM benchmark definitions, except that the origin is the request's
arrival at our gateway, not its dispatch to the engine):

- TTFT = first token time - arrival
- E2E  = last token time - arrival
- TPOT = (E2E - TTFT) / (n - 1), defined for n > 1 only
- ITL  = gaps between successive streamed token chunks
- queue time = first dispatch time - arrival (time held by the client-side scheduler)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RequestLatencies:
    """TTFT, TPOT (None for one token), E2E and gateway queue time, in seconds."""

    ttft_s: float
    tpot_s: float | None
    e2e_s: float
    queue_s: float


def request_latencies(
    arrival_s: float, dispatch_s: float, first_token_s: float, finish_s: float, output_tokens: int
) -> RequestLatencies:
    """Latencies of one finished request from its timestamps (seconds since run start)."""
    ttft = first_token_s - arrival_s
    e2e = finish_s - arrival_s
    tpot = (e2e - ttft) / (output_tokens - 1) if output_tokens > 1 else None
    return RequestLatencies(ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, queue_s=dispatch_s - arrival_s)


def inter_token_latencies(token_times_s: Sequence[float]) -> np.ndarray:
    """ITL: the gaps (seconds) between successive token chunks."""
    times = np.asarray(token_times_s, dtype=float)
    return np.diff(times) if times.size > 1 else np.zeros(0)
