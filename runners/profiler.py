"""Profile a real engine and fit the latency model (SLO-aware paper eq. 14-15, SCLS eq. 3-4).

For every grid point (batch size b, prompt length l_in, output length l_out) the profiler sends
b requests at the same instant, each asking for exactly l_out tokens (``ignore_eos``), with
distinct random prompts (so prefix caching cannot help). From each point it takes:

- a prefill sample (b, mean prompt tokens, slowest TTFT) -- the whole batch is prefilled
  before its last first token;
- a decode sample (b, mean context l_in + l_out / 2, mean gap between tokens streamed after the
  batch's last first token, when only decode steps run).

Prompt lengths are the engine's own counts (``usage.prompt_tokens``). Coefficients are fitted by
non-negative least squares (scipy.optimize.nnls) on [b*l, b, l, 1]; the fit error is reported as
RMSE (seconds) and mean absolute percentage error per phase, as SCLS Fig. 10 does.
"""

from __future__ import annotations

import asyncio
import csv
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import aiohttp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import nnls

from runners.engines.latency_model import PhaseCoefficients
from runners.engines.openai_client import Endpoint, StreamResult, stream_request
from runners.engines.profile import EngineProfile
from runners.errors import SchedlabError
from runners.workload.synthetic import made_up_vocabulary


class ProfileGrid(BaseModel):
    """The (batch size, prompt tokens, output tokens) points to measure."""

    model_config = ConfigDict(extra="forbid")

    batch_sizes: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16])
    input_tokens: list[int] = Field(default_factory=lambda: [32, 128, 512])
    output_tokens: list[int] = Field(default_factory=lambda: [16, 64])
    repeats: int = Field(default=2, ge=1)
    warmup_requests: int = Field(default=4, ge=0)


@dataclass(frozen=True)
class ProfileSample:
    """One measured grid point. Lengths in tokens, times in seconds."""

    batch: int
    input_tokens: float
    output_tokens: float
    prefill_s: float
    decode_per_token_s: float
    decode_context: float


@dataclass(frozen=True)
class PhaseFit:
    coefficients: PhaseCoefficients
    rmse_s: float
    mape: float
    points: int


def fit_phase(batch: Sequence[float], length: Sequence[float], seconds: Sequence[float]) -> PhaseFit:
    """Non-negative least squares of seconds ~ alpha*b*l + beta*b + gamma*l + delta."""
    b = np.asarray(batch, dtype=float)
    l = np.asarray(length, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if len(y) < 4:
        raise SchedlabError(f"profile: need at least 4 measurements to fit 4 coefficients, got {len(y)}")
    design = np.column_stack([b * l, b, l, np.ones_like(b)])
    solution, _ = nnls(design, y)
    predicted = design @ solution
    rmse = float(np.sqrt(np.mean((predicted - y) ** 2)))
    mape = float(np.mean(np.abs(predicted - y) / np.maximum(y, 1e-9)))
    alpha, beta, gamma, delta = (float(v) for v in solution)
    return PhaseFit(PhaseCoefficients(alpha=alpha, beta=beta, gamma=gamma, delta=delta), rmse, mape, len(y))


def _prompt(tokens: int, rng: np.random.Generator, vocabulary: list[str]) -> str:
    """Random made-up words of about ``tokens`` tokens (4 characters each)."""
    words = [vocabulary[i] for i in rng.integers(len(vocabulary), size=max(1, tokens))]
    text = " ".join(words)
    return text[: max(4, tokens * 4)]


async def _batch(session: aiohttp.ClientSession, endpoint: Endpoint, prompts: list[str], output: int,
                 timeout_s: float) -> list[StreamResult]:
    return list(await asyncio.gather(*(stream_request(session, endpoint, p, output, timeout_s=timeout_s) for p in prompts)))


async def measure(endpoint: Endpoint, grid: ProfileGrid, timeout_s: float = 600.0, seed: int = 0,
                  progress: Callable[[int, int], None] | None = None) -> list[ProfileSample]:
    """Measure every grid point ``repeats`` times against one server."""
    rng = np.random.default_rng(seed)
    vocabulary = made_up_vocabulary(400, rng)
    points = [(b, i, o) for b in grid.batch_sizes for i in grid.input_tokens for o in grid.output_tokens]
    total = len(points) * grid.repeats
    samples: list[ProfileSample] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        if grid.warmup_requests:
            await _batch(session, endpoint, [_prompt(64, rng, vocabulary) for _ in range(grid.warmup_requests)], 8,
                         timeout_s)
        done = 0
        for _ in range(grid.repeats):
            for batch, input_tokens, output_tokens in points:
                prompts = [_prompt(input_tokens, rng, vocabulary) for _ in range(batch)]
                results = await _batch(session, endpoint, prompts, output_tokens, timeout_s)
                failed = [r.error for r in results if r.error]
                if failed:
                    raise SchedlabError(f"profile: request failed at batch {batch}, input {input_tokens}: {failed[0]}")
                ttfts = [r.chunk_times[0] - r.sent_at for r in results]
                # decode steps only: after the batch's last first token, no prefill of this batch is
                # mixed into the steps (chunked prefill would otherwise inflate the per-token time)
                all_prefilled = max(r.chunk_times[0] for r in results)
                per_token = []
                for r in results:
                    decoding = [t for t in r.chunk_times if t >= all_prefilled]
                    if len(decoding) >= 3:
                        per_token.append((decoding[-1] - decoding[0]) / (len(decoding) - 1))
                prompt_lengths = [r.prompt_tokens or input_tokens for r in results]
                outputs = [r.output_tokens for r in results]
                mean_in = float(np.mean(prompt_lengths))
                samples.append(ProfileSample(
                    batch=batch,
                    input_tokens=mean_in,
                    output_tokens=float(np.mean(outputs)),
                    prefill_s=float(max(ttfts)),
                    decode_per_token_s=float(np.mean(per_token)) if per_token else float("nan"),
                    decode_context=mean_in + float(np.mean(outputs)) / 2,
                ))
                done += 1
                if progress is not None:
                    progress(done, total)
    return samples


def fit_profile(samples: Sequence[ProfileSample], name: str, source: str, kv_capacity_tokens: int | None,
                block_size: int | None, max_num_seqs: int | None, max_num_batched_tokens: int | None) -> EngineProfile:
    """An EngineProfile from measured samples, with the fit errors in ``fit``."""
    prefill = fit_phase([s.batch for s in samples], [s.input_tokens for s in samples], [s.prefill_s for s in samples])
    decoding = [s for s in samples if np.isfinite(s.decode_per_token_s)]
    decode = fit_phase([s.batch for s in decoding], [s.decode_context for s in decoding],
                       [s.decode_per_token_s for s in decoding])
    if kv_capacity_tokens is None:
        raise SchedlabError("profile: the engine did not report its KV capacity (vllm:cache_config_info); "
                            "set engine.kv_capacity_tokens in the profile by hand")
    extra = {}
    if block_size:
        extra["block_size"] = block_size
    if max_num_seqs:
        extra["max_num_seqs"] = max_num_seqs
    if max_num_batched_tokens:
        extra["max_num_batched_tokens"] = max_num_batched_tokens
    return EngineProfile(
        name=name,
        source=source,
        prefill=prefill.coefficients,
        decode=decode.coefficients,
        kv_capacity_tokens=kv_capacity_tokens,
        fit={
            "rmse_prefill_s": prefill.rmse_s,
            "rmse_decode_s": decode.rmse_s,
            "mape_prefill": prefill.mape,
            "mape_decode": decode.mape,
            "prefill_points": prefill.points,
            "decode_points": decode.points,
        },
        **extra,
    )


def write_samples(samples: Sequence[ProfileSample], path: Path) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(samples[0])))
        writer.writeheader()
        for sample in samples:
            writer.writerow(asdict(sample))
    return path
