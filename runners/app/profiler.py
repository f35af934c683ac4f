"""Profile a real engine and fit the latency model (SLO-aware paper eq. 14-15, SCLS eq. 3-4).

For every grid point (batch size b, prompt length l_in, output length l_out) the profiler sends
b requests at the same instant, each asking for exactly l_out tokens (``ignore_eos``), with
distinct random prompts (so prefix caching cannot help). From each point it takes:

- a prefill sample (b, mean prompt tokens, slowest TTFT) -- the whole batch is prefilled
  before its last first token;
- a decode sample (b, mean context l_in + l_out / 2, mean gap between tokens streamed after the
  batch's last first token, when only decode steps run).

Prompts are made-up words cut to an exact number of tokens by the server's own tokenizer (its
tokenize endpoint, else the model folder its ``/v1/models`` card names, as a run attached to it
counts: :class:`PromptTokens`), so a grid point of l tokens is l tokens of that model, not l * 4
characters; a point that would not fit the server's context limit is refused (the request grid)
or left out (the step profiler). Prompt lengths are then fitted as the engine counted them
(``usage.prompt_tokens``). Coefficients are fitted by non-negative least squares
(scipy.optimize.nnls) on [b*l, b, l, 1]; the fit error is reported as RMSE (seconds) and mean
absolute percentage error per phase, as SCLS Fig. 10 does.
"""

from __future__ import annotations

import asyncio
import csv
import math
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import nnls

from runners.app.profile_quality import (
    OUTLIER_MAX_SHARE,
    OUTLIER_MIN_ERROR,
    OUTLIER_SIGMAS,
    PROBE_OUTPUT_TOKENS,
    PROBE_PROMPT_TOKENS,
    Probe,
    load_average,
    median_of_repeats,
    outliers,
)
from runners.engines.latency_model import (
    BASE_STEP_TERMS,
    MIN_POINTS_PER_TERM,
    STEP_TERMS,
    LatencyModel,
    LinearStepModel,
    ServingOverhead,
)
from runners.engines.openai_client import Endpoint, StreamResult, stream_request
from runners.engines.planning_model import (
    GRID_BATCHES,
    GRID_INPUTS,
    GRID_OUTPUTS,
    PhaseFitResult,
    fit_phase_coefficients,
)
from runners.engines.profile import EngineProfile
from runners.engines.telemetry import read_metrics_page
from runners.errors import SchedlabError
from runners.workload.synthetic import made_up_vocabulary
from runners.workload.tokens import TokenCounter


class ProfileGrid(BaseModel):
    """The (batch size, prompt tokens, output tokens) points to measure."""

    model_config = ConfigDict(extra="forbid")

    batch_sizes: list[int] = Field(default_factory=lambda: list(GRID_BATCHES))
    input_tokens: list[int] = Field(default_factory=lambda: list(GRID_INPUTS))
    output_tokens: list[int] = Field(default_factory=lambda: list(GRID_OUTPUTS))
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


#: A phase's fit (coefficients, RMSE seconds, MAPE, points): the one fit of eq. 14/15.
PhaseFit = PhaseFitResult


def fit_phase(batch: Sequence[float], length: Sequence[float], seconds: Sequence[float]) -> PhaseFit:
    """Non-negative least squares of seconds ~ alpha*b*l + beta*b + gamma*l + delta
    (:func:`runners.engines.planning_model.fit_phase_coefficients`); SchedlabError for fewer than 4."""
    try:
        return fit_phase_coefficients(batch, length, seconds)
    except ValueError as exc:
        raise SchedlabError(f"profile: {exc}") from None


#: Most rounds of short fillers appended to a prompt of whole words to reach its exact token count.
FILL_ROUNDS = 16
#: The short texts tried, each round, to add the tokens a prompt of whole words falls short by.
FILLERS: tuple[str, ...] = (" a", " 0", " .", "a", ".")


class PromptTokens:
    """Prompts of an exact number of tokens, as ``counter`` (the server's tokenizer) counts a
    prompt's own text, and the server's context limit: ``context_tokens`` (prompt + overhead +
    output, tokens; None when the server reports none) and ``overhead`` (tokens the server adds
    to every prompt: BOS, a chat template). ``source`` says where the counts come from."""

    def __init__(
        self,
        counter: TokenCounter,
        rng: np.random.Generator,
        vocabulary: list[str],
        overhead: int = 0,
        context_tokens: int | None = None,
        source: str = "",
    ) -> None:
        self.counter = counter
        self.rng = rng
        self.vocabulary = vocabulary
        self.overhead = overhead
        self.context_tokens = context_tokens
        self.source = source or getattr(counter, "name", "")

    @classmethod
    def for_endpoint(
        cls, endpoint: Endpoint, rng: np.random.Generator, vocabulary: list[str], tokenizer: str | None = None
    ) -> PromptTokens:
        """The counter and limit a run attached to ``endpoint`` would use
        (:func:`runners.engines.real_engine.resolve_tokenization`: ``tokenizer`` when given, else
        the server's tokenize endpoint, else the model folder its card names, else the
        4-characters-per-token approximation), with what the server adds to each prompt."""
        from runners.engines.real_config import AttachConfig
        from runners.engines.real_engine import resolve_tokenization
        from runners.engines.server_tokens import TokenizerUnavailable

        auth = endpoint.headers.get("Authorization", "")
        attached = AttachConfig(
            urls=[endpoint.base_url],
            model=endpoint.model,
            api=endpoint.api,
            api_key=auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None,
        )
        found = resolve_tokenization(attached, tokenizer)
        if found.context is not None:
            return cls(
                found.counter,
                rng,
                vocabulary,
                found.context.prompt_overhead_tokens,
                found.context.max_tokens,
                found.record["source"],
            )
        overhead = getattr(found.counter, "overhead_tokens", None)
        try:
            added = overhead(endpoint.api) if callable(overhead) else 0
        except TokenizerUnavailable:
            added = 0
        return cls(found.counter, rng, vocabulary, added, None, found.record["source"])

    def fits(self, prompt_tokens: int, output_tokens: int) -> bool:
        """Whether a prompt of ``prompt_tokens`` tokens asking for ``output_tokens`` fits the context."""
        return self.context_tokens is None or prompt_tokens + self.overhead + output_tokens <= self.context_tokens

    def longest_output(self, prompt_tokens: int, wanted: int) -> int:
        """``wanted`` output tokens, or fewer where a prompt of ``prompt_tokens`` leaves less room."""
        if self.context_tokens is None:
            return wanted
        return max(0, min(wanted, self.context_tokens - self.overhead - prompt_tokens))

    def _words(self, count: int) -> list[str]:
        return [self.vocabulary[i] for i in self.rng.integers(len(self.vocabulary), size=count)]

    def make(self, targets: Sequence[int]) -> list[str]:
        """One prompt of random made-up words per target, each of exactly that many tokens by the
        counter where whole words and :data:`FILLERS` can make it (else the closest below):
        the longest run of words that stays within the target (found by bisection, every
        prompt's candidate counted in one batch), then fillers added one round at a time."""
        targets = [max(1, int(n)) for n in targets]
        if not targets:
            return []
        words = self._enough_words(targets)
        texts = self._longest_within(words, targets)
        self._fill(texts, targets)
        return texts

    def _enough_words(self, targets: list[int]) -> list[list[str]]:
        """Per target, made-up words whose text counts at least the target's tokens."""
        words = [self._words(n + 8) for n in targets]
        while True:
            totals = self.counter.count([" ".join(w) for w in words])
            short = [i for i, (total, n) in enumerate(zip(totals, targets)) if total < n]
            if not short:
                return words
            for i in short:
                words[i] += self._words(len(words[i]))

    def _longest_within(self, words: list[list[str]], targets: list[int]) -> list[str]:
        """Per target, the longest prefix of its whole words that counts at most the target (by
        bisection, each round's candidates counted in one batch)."""
        count = self.counter.count
        low, high = [0] * len(targets), [len(w) for w in words]
        while True:
            open_ = [i for i in range(len(targets)) if high[i] - low[i] > 1]
            if not open_:
                break
            middles = {i: (low[i] + high[i]) // 2 for i in open_}
            for i, total in zip(open_, count([" ".join(words[i][: middles[i]]) for i in open_])):
                if total <= targets[i]:
                    low[i] = middles[i]
                else:
                    high[i] = middles[i]
        texts = [" ".join(w[:h]) for w, h in zip(words, high)]
        return [
            high_text if total == n else " ".join(w[:lo])
            for high_text, total, n, w, lo in zip(texts, count(texts), targets, words, low)
        ]

    def _fill(self, texts: list[str], targets: list[int]) -> None:
        """Add :data:`FILLERS` to the texts short of their target by less than a word, one round at
        a time, each round the largest filler that stays within the target (in place)."""
        count = self.counter.count
        for _ in range(FILL_ROUNDS):
            totals = count(texts)
            short = [i for i, (total, n) in enumerate(zip(totals, targets)) if total < n]
            if not short:
                return
            counted = count([texts[i] + filler for i in short for filler in FILLERS])
            grew = False
            for k, i in enumerate(short):
                options = zip(counted[k * len(FILLERS) : (k + 1) * len(FILLERS)], FILLERS)
                fitting = [(total, filler) for total, filler in options if total <= targets[i]]
                if fitting:
                    texts[i] += max(fitting, key=lambda option: option[0])[1]
                    grew = True
            if not grew:
                return


async def _batch(
    session: aiohttp.ClientSession, endpoint: Endpoint, prompts: list[str], output: int, timeout_s: float
) -> list[StreamResult]:
    return list(
        await asyncio.gather(*(stream_request(session, endpoint, p, output, timeout_s=timeout_s) for p in prompts))
    )


def _raise_on_failure(results: Sequence[StreamResult], what: str) -> None:
    """SchedlabError naming ``what`` and the first request's error, when any request failed."""
    failed = [r.error for r in results if r.error]
    if failed:
        raise SchedlabError(f"profile: {what}: {failed[0]}")


#: Prompt tokens of the warm-up requests (8 tokens out each), fewer where the context is smaller.
WARMUP_PROMPT_TOKENS = 64


async def _warm_up(
    session: aiohttp.ClientSession, endpoint: Endpoint, requests: int, tokens: PromptTokens, timeout_s: float
) -> None:
    """``requests`` short requests (64-token prompts, 8 tokens out) at once, not measured."""
    if requests:
        length = WARMUP_PROMPT_TOKENS
        if tokens.context_tokens is not None:
            length = max(1, min(length, tokens.context_tokens - tokens.overhead - 8))
        await _batch(session, endpoint, tokens.make([length] * requests), 8, timeout_s)


async def warm_up_shapes(
    endpoint: Endpoint,
    grid: StepGrid,
    max_num_batched_tokens: int,
    timeout_s: float = 600.0,
    seed: int = 0,
    tokenizer: str | None = None,
) -> None:
    """Not measured, before a profile: a wave of concurrent requests at each of the grid's decode
    batch sizes (:data:`WARMUP_PROMPT_TOKENS`-token prompts, 16 tokens out), then one prompt of each
    prefill length alone (1 token out). A freshly started engine compiles kernels for each new
    batch shape on first use: of two quiet profiles made back to back on a fresh CPU vLLM with only
    the 4-request warm-up, the first measured its steps 34-65% slower than the second (medians per
    step kind; bench/results/profile_noise.md, 2026-12-08)."""
    rng = np.random.default_rng([seed, ORDER_STREAM, 1])
    tokens = _prompt_tokens(endpoint, rng, None, tokenizer)
    length = WARMUP_PROMPT_TOKENS
    if tokens.context_tokens is not None:
        length = max(1, min(length, tokens.context_tokens - tokens.overhead - 16))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for batch in sorted(set(grid.decode_batches)):
            await _batch(session, endpoint, tokens.make([length] * batch), 16, timeout_s)
        for prompt in sorted(set(grid.prefill_prompt_tokens)):
            if prompt + tokens.overhead <= max_num_batched_tokens and tokens.fits(prompt, 1):
                await _batch(session, endpoint, tokens.make([prompt]), 1, timeout_s)


def _prompt_tokens(
    endpoint: Endpoint, rng: np.random.Generator, tokens: PromptTokens | None, tokenizer: str | None
) -> PromptTokens:
    """``tokens`` when given, else the server's own (:meth:`PromptTokens.for_endpoint`), drawing
    its words from ``rng``."""
    if tokens is not None:
        return tokens
    return PromptTokens.for_endpoint(endpoint, rng, made_up_vocabulary(400, rng), tokenizer)


async def measure(
    endpoint: Endpoint,
    grid: ProfileGrid,
    timeout_s: float = 600.0,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    tokens: PromptTokens | None = None,
    tokenizer: str | None = None,
) -> list[ProfileSample]:
    """Measure every grid point ``repeats`` times against one server, prompts of exact token
    counts by ``tokens`` (default: the server's tokenizer, or the folder ``tokenizer``).
    SchedlabError before anything is sent when a point does not fit the server's context."""
    rng = np.random.default_rng(seed)
    tokens = _prompt_tokens(endpoint, rng, tokens, tokenizer)
    points = [(b, i, o) for b in grid.batch_sizes for i in grid.input_tokens for o in grid.output_tokens]
    too_long = sorted({(i, o) for _, i, o in points if not tokens.fits(i, o)})
    if too_long:
        raise SchedlabError(
            f"profile: prompt and output tokens {', '.join(f'{i} + {o}' for i, o in too_long)} do not fit the "
            f"server's context of {tokens.context_tokens} tokens ({tokens.overhead} added to every prompt); "
            "choose smaller --input-tokens or --output-tokens"
        )
    total = len(points) * grid.repeats
    samples: list[ProfileSample] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await _warm_up(session, endpoint, grid.warmup_requests, tokens, timeout_s)
        done = 0
        for _ in range(grid.repeats):
            for batch, input_tokens, output_tokens in points:
                prompts = tokens.make([input_tokens] * batch)
                results = await _batch(session, endpoint, prompts, output_tokens, timeout_s)
                _raise_on_failure(results, f"request failed at batch {batch}, input {input_tokens}")
                ttfts = [r.chunk_times[0] - r.sent_at for r in results]
                # decode steps only: after the batch's last first token, no prefill of this batch is
                # mixed into the steps (chunked prefill would otherwise inflate the per-token time)
                all_prefilled = max(r.chunk_times[0] for r in results)
                per_token = []
                for r in results:
                    decoding = [t for t in r.chunk_times if t >= all_prefilled]
                    if len(decoding) >= 3:
                        per_token.append((decoding[-1] - decoding[0]) / (len(decoding) - 1))
                prompt_lengths = [r.prompt_tokens or input_tokens + tokens.overhead for r in results]
                outputs = [r.output_tokens for r in results]
                mean_in = float(np.mean(prompt_lengths))
                samples.append(
                    ProfileSample(
                        batch=batch,
                        input_tokens=mean_in,
                        output_tokens=float(np.mean(outputs)),
                        prefill_s=float(max(ttfts)),
                        decode_per_token_s=float(np.mean(per_token)) if per_token else float("nan"),
                        decode_context=mean_in + float(np.mean(outputs)) / 2,
                    )
                )
                done += 1
                if progress is not None:
                    progress(done, total)
    return samples


def fit_profile(
    samples: Sequence[ProfileSample],
    name: str,
    source: str,
    kv_capacity_tokens: int | None,
    block_size: int | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
) -> EngineProfile:
    """An EngineProfile from measured samples, with the fit errors in ``fit``."""
    prefill = fit_phase([s.batch for s in samples], [s.input_tokens for s in samples], [s.prefill_s for s in samples])
    decoding = [s for s in samples if np.isfinite(s.decode_per_token_s)]
    decode = fit_phase(
        [s.batch for s in decoding], [s.decode_context for s in decoding], [s.decode_per_token_s for s in decoding]
    )
    limits = _engine_limits(kv_capacity_tokens, block_size, max_num_seqs, max_num_batched_tokens)
    return EngineProfile(
        name=name,
        source=source,
        prefill=prefill.coefficients,
        decode=decode.coefficients,
        fit={
            "rmse_prefill_s": prefill.rmse_s,
            "rmse_decode_s": decode.rmse_s,
            "mape_prefill": prefill.mape,
            "mape_decode": decode.mape,
            "prefill_points": prefill.points,
            "decode_points": decode.points,
        },
        **limits,
    )


def _engine_limits(
    kv_capacity_tokens: int | None, block_size: int | None, max_num_seqs: int | None, max_num_batched_tokens: int | None
) -> dict[str, Any]:
    """A profile's engine limits as :class:`EngineProfile` fields: the KV capacity (tokens) and
    those of block size (tokens), max_num_seqs (requests) and max_num_batched_tokens (tokens)
    that the engine reported. SchedlabError when it did not report its KV capacity."""
    if kv_capacity_tokens is None:
        raise SchedlabError(
            "profile: the engine did not report its KV capacity (vllm:cache_config_info); "
            "set engine.kv_capacity_tokens in the profile by hand"
        )
    reported = {
        "block_size": block_size,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
    }
    return {"kv_capacity_tokens": kv_capacity_tokens, **{key: value for key, value in reported.items() if value}}


def write_samples(samples: Sequence[ProfileSample] | Sequence[StepSample], path: Path) -> Path:
    """The measured samples (grid points or engine steps, one dataclass each) as a CSV file."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(samples[0])))
        writer.writeheader()
        for sample in samples:
            writer.writerow(asdict(sample))
    return path


# == step-level measurement and the linear step model ==============================================
#
# The grid above times whole requests; the simulator costs single engine steps. The step profiler
# below drives loads that isolate one kind of step each, and reads each step's duration where the
# engine's own clocks or its token stream pin it down:
#
# - decode: N requests with short prompts and long outputs; after the last of them got its first
#   token every step is a pure decode step of N requests, and a gap between two streamed tokens is
#   one step. Mean gap per time window: TPOT is a mean, so the model must predict the mean step,
#   slow steps included (a median left out the ~10% of stalls a run's TPOT pays); two tokens read
#   in one chunk do not bias it (a zero gap and a double gap average out). Context = sum over
#   requests of prompt + tokens generated so far (mid-window).
# - prefill: one request alone with max_tokens=1; the engine's own ``request_prefill_time``
#   (scheduled -> first token, engine-core clock; vLLM's vllm:request_prefill_time_seconds) is one
#   pure prefill step when the prompt fits max_num_batched_tokens. Read as the histogram's sum and
#   count increments around the request. A prompt the engine counts longer than
#   max_num_batched_tokens is chunked over several steps and is dropped. The engine was idle
#   before it, so it is fitted as an idle start (the step model's ``idle_start_s``). The same
#   request gives an ``overhead`` sample: the client's TTFT minus the engine's queue and prefill
#   time, the serving front end's share (ServingOverhead).
# - mixed: D decoding requests run, then P prompts of L tokens are sent at once (P*L + D within the
#   token budget, so chunked prefill schedules each prompt whole in one step). The prompts' first
#   tokens come out of the mixed step (P prefills + D decodes); the decoders' token gap that ends
#   with it is that step's duration (median over decoders). Kept only when all P first tokens
#   arrived within a quarter of a decode step of each other (one step, not two).
# - prefix: a prompt of C tokens is sent alone (one token out), then, to the idle engine, the same
#   prompt followed by N new tokens. The second finds the first's full blocks in the prefix cache
#   (vLLM's prefix_cache_hits counter says how many tokens) and computes the rest; its engine
#   prefill time is one prefill step of N' = counted - hits tokens that attend over the H = hits
#   cached tokens (``prefill_context`` = N' x H): what the step model's per_prefill_context_token_s
#   is fitted on, the pure prefill steps being the same loads with H = 0.
# - interference: D requests decode while short requests (``interference_prompt_tokens``, one
#   token out) arrive as a Poisson stream at each of ``interference_rates`` (0: none), the rates
#   taking turns so drift hits each alike. Where the front end (HTTP, tokenisation, detokenising,
#   streaming) shares cores with the engine, every arriving request costs the engine time that no
#   step's composition shows: a window of T seconds holding N decode steps and k arrivals gives
#   T - N * (the base windows' step) - k * (the step model's cost of one such prefill) for the k
#   requests (fit_arrival_interference).

STEP_KINDS: tuple[str, ...] = ("prefill", "decode", "mixed")
#: The step profiler's controlled loads, in the order it runs them.
PHASES: tuple[str, ...] = ("prefill", "decode", "mixed", "interference", "prefix")
#: The signal of a prefill step after a cached prefix (a ``prefill`` sample with ``prefill_context`` > 0).
PREFIX_SIGNAL = "engine request_prefill_time after a cached prefix"
#: vLLM's prefix-cache hit counter (tokens), under the names its versions expose.
PREFIX_HITS_METRICS: tuple[str, ...] = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
#: Samples of the serving front end's delay (client TTFT minus the engine's queue and prefill time,
#: one request alone on an idle server): not engine steps, fitted to a ServingOverhead.
OVERHEAD_KIND = "overhead"
#: Windows of D requests decoding while short requests arrive at a fixed rate (0 for the base
#: windows): the engine time lost per arriving request (ServingOverhead.busy_request_engine_s).
#: Fields: prefill_requests = requests that arrived in the window, prefill_tokens = their prompt
#: tokens, decode_requests = D, decode_context = the decoders' mean context, steps = the decode
#: steps in the window, seconds = the window's length.
INTERFERENCE_KIND = "interference"


class StepGrid(BaseModel):
    """The controlled loads of the step profiler (tokens, requests)."""

    model_config = ConfigDict(extra="forbid")

    decode_batches: list[int] = Field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    decode_prompt_tokens: list[int] = Field(default_factory=lambda: [16, 512])
    decode_long_prompt_max_batch: int = Field(default=32, ge=1, description="largest batch run with the long prompts")
    decode_output_tokens: int = Field(default=160, ge=8)
    decode_windows: int = Field(default=4, ge=1)
    prefill_prompt_tokens: list[int] = Field(default_factory=lambda: [16, 64, 128, 256, 512, 768, 1024, 1200])
    prefill_repeats: int = Field(default=3, ge=1)
    mixed_decodes: list[int] = Field(default_factory=lambda: [1, 4, 16, 48])
    mixed_prefills: list[int] = Field(default_factory=lambda: [1, 2, 4])
    mixed_prompt_tokens: list[int] = Field(default_factory=lambda: [64, 256, 448])
    mixed_repeats: int = Field(default=2, ge=1)
    mixed_decode_output_tokens: int = Field(default=3000, ge=16, description="within the server's max_model_len")
    interference_decodes: list[int] = Field(
        default_factory=lambda: [8, 32], description="decoding requests under the arrival streams"
    )
    interference_rates: list[float] = Field(
        default_factory=lambda: [0.0, 15.0, 30.0, 45.0], description="arrival rates, requests per second (0: the base)"
    )
    interference_repeats: int = Field(default=3, ge=0, description="windows per (decodes, rate); 0: phase off")
    interference_prompt_tokens: int = Field(default=64, ge=1)
    interference_output_tokens: int = Field(default=600, ge=16, description="decode tokens per window's requests")
    prefix_cached_tokens: list[int] = Field(
        default_factory=lambda: [256, 512, 1024, 1536],
        description="tokens of the prompt sent first (the cached prefix)",
    )
    prefix_new_tokens: list[int] = Field(
        default_factory=lambda: [16, 128, 512], description="tokens added after it by the second prompt (computed)"
    )
    prefix_repeats: int = Field(default=2, ge=0, description="pairs per (cached, new); 0: phase off")
    warmup_requests: int = Field(default=4, ge=0)
    probe_every: int = Field(
        default=6,
        ge=0,
        description="grid points between two measurements of the fixed probe step (the profiler's "
        "repeatability, runners.app.profile_quality); 0: no probe",
    )


#: Seconds a probe waits at most for the engine to run and queue nothing before it is sent.
PROBE_IDLE_WAIT_S = 10.0
#: numpy SeedSequence entropy [profile seed, this]: the random order of each phase's grid points,
#: a stream apart from the prompts' words.
ORDER_STREAM = 0x0D3D


@dataclass(frozen=True)
class StepSample:
    """One measured engine step (or the median of identical ones). Tokens, seconds."""

    kind: str  # prefill, decode or mixed (STEP_KINDS), or overhead (OVERHEAD_KIND)
    prefill_requests: int
    prefill_tokens: int
    decode_requests: int
    decode_context: int
    seconds: float
    signal: str  # where the duration came from
    #: engine steps the sample spans (an INTERFERENCE_KIND window: its decode steps; else 1)
    steps: int = 1
    #: sum over the step's prefill chunks of chunk tokens x tokens already in that request's KV
    #: (cached or computed earlier), token^2; 0 where no chunk follows a cached prefix
    prefill_context: int = 0


def _metric_total(text: str, name: str) -> float:
    """Sum of a Prometheus sample's values over all label sets (0 if absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            try:
                total += float(line.rsplit(" ", 1)[1])
            except ValueError:
                continue
    return total


def _increment(before: str, after: str, name: str) -> float:
    """How much the Prometheus sample ``name`` grew between two scrapes (summed over label sets)."""
    return _metric_total(after, name) - _metric_total(before, name)


async def _scrape(session: aiohttp.ClientSession, endpoint: Endpoint) -> str:
    """The server's ``/metrics`` page (capped as a run's scrapes are); "" when it answers no page."""
    url = endpoint.base_url.rstrip("/").removesuffix("/v1") + "/metrics"
    return await read_metrics_page(session, url, endpoint.headers) or ""


class _Streams:
    """Long-running decoding requests whose token arrival times are recorded as they come."""

    def __init__(
        self, session: aiohttp.ClientSession, endpoint: Endpoint, prompts: list[str], output: int, timeout_s: float
    ) -> None:
        self.times: list[list[float]] = [[] for _ in prompts]
        self.tasks = [
            asyncio.ensure_future(
                stream_request(session, endpoint, p, output, timeout_s=timeout_s, on_chunk=self._recorder(i))
            )
            for i, p in enumerate(prompts)
        ]

    def _recorder(self, index: int) -> Callable[[float, bool], None]:
        return lambda now, first: self.times[index].append(now)

    async def all_started(self, poll_s: float = 0.005) -> float:
        """Wait until every request streamed a token; the time of the last first token."""
        while not all(self.times):
            failed = [t.result().error for t in self.tasks if t.done() and t.result().error]
            if failed:
                raise SchedlabError(f"profile: decoding request failed: {failed[0]}")
            if all(t.done() for t in self.tasks):
                raise SchedlabError("profile: a decoding request ended without streaming a token")
            await asyncio.sleep(poll_s)
        return max(times[0] for times in self.times)

    async def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def decode_samples(
    times: Sequence[Sequence[float]], prompt_tokens: float, start: float, windows: int
) -> list[StepSample]:
    """Pure decode steps from the token times of requests decoding together after ``start``: one
    sample per time window, the mean gap between consecutive tokens ending in it; context is
    the requests' prompt + tokens generated by the window's middle."""
    batch = len(times)
    end = min(t[-1] for t in times)
    if end <= start:
        return []
    edges = np.linspace(start, end, windows + 1)
    samples = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        gaps, generated = [], []
        for series in times:
            arr = np.asarray(series)
            inside = np.nonzero((arr[1:] > lo) & (arr[1:] <= hi) & (arr[:-1] >= start))[0]
            gaps.extend(arr[inside + 1] - arr[inside])
            generated.append(float(np.searchsorted(arr, (lo + hi) / 2)))
        if len(gaps) < batch:
            continue
        samples.append(
            StepSample(
                "decode",
                0,
                0,
                batch,
                int(round(batch * prompt_tokens + sum(generated))),
                float(np.mean(gaps)),
                "client token gaps (mean)",
            )
        )
    return samples


@dataclass
class _Profiling:
    """What every phase of :func:`measure_steps` shares: one client session against one server,
    the grid, the random stream the prompts come from (drawn phase after phase, in order) and the
    progress callback."""

    session: aiohttp.ClientSession
    endpoint: Endpoint
    grid: StepGrid
    max_num_batched_tokens: int
    timeout_s: float
    tokens: PromptTokens
    say: Callable[[str], None]
    #: the grid's order within each phase (seeded: drift over the session does not line up with
    #: batch size or prompt length)
    order: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    #: the probes measured so far (runners.app.profile_quality.Probe)
    probes: list[Probe] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    points: int = 0
    probe_prompt: str | None = None

    def shuffled(self, points: Sequence[Any]) -> list[Any]:
        """``points`` in this session's seeded random order."""
        return [points[i] for i in self.order.permutation(len(points))]

    async def probe(self) -> None:
        """Measure the fixed probe step (:data:`PROBE_PROMPT_TOKENS` tokens alone on the idle engine,
        :data:`PROBE_OUTPUT_TOKENS` out; the same prompt every time, so its cached prefix is
        forgotten only if the server caches: the engine's prefill time is read from /metrics)."""
        if not self.grid.probe_every:
            return
        if self.probe_prompt is None:
            self.probe_prompt = self.prompt(PROBE_PROMPT_TOKENS) if self.tokens.fits(PROBE_PROMPT_TOKENS, 1) else None
            if self.probe_prompt is None:
                return
        # a new word first, so a server that caches prefixes computes the whole prompt every time
        prompt = f"{self.tokens.make([1])[0]} {self.probe_prompt}"
        before = await self._idle_page()
        output = self.tokens.longest_output(PROBE_PROMPT_TOKENS + 1, PROBE_OUTPUT_TOKENS)
        result = await stream_request(self.session, self.endpoint, prompt, output, timeout_s=self.timeout_s)
        if result.error or not result.chunk_times:
            return
        await asyncio.sleep(0.05)  # the metrics are recorded just after the response
        after = await _scrape(self.session, self.endpoint)
        prefill = (
            _increment(before, after, "vllm:request_prefill_time_seconds_sum")
            if _increment(before, after, "vllm:request_prefill_time_seconds_count") == 1
            else None
        )
        gaps = np.diff(np.asarray(result.chunk_times, dtype=float))
        self.probes.append(
            Probe(
                time.perf_counter() - self.started,
                prefill,
                float(np.median(gaps)) if len(gaps) else None,
                load_average(),
            )
        )

    async def _idle_page(self, limit_s: float = PROBE_IDLE_WAIT_S) -> str:
        """The server's /metrics page once it runs and queues no request (vLLM's
        ``num_requests_running`` and ``num_requests_waiting`` both 0), polled every 20 ms for at
        most ``limit_s``: requests a phase cancelled are still being aborted when it ends, and a
        probe beside them would time them too (a quiet machine's interference phase gave a probe
        CV of 28% that way, bench/results/profile_noise.md). The last page read when it does not
        become idle in time (or the server has no such gauges)."""
        deadline = time.perf_counter() + limit_s
        while True:
            page = await _scrape(self.session, self.endpoint)
            busy = _metric_total(page, "vllm:num_requests_running") + _metric_total(page, "vllm:num_requests_waiting")
            if busy == 0 or time.perf_counter() >= deadline:
                return page
            await asyncio.sleep(0.02)

    async def tick(self) -> None:
        """One grid point done: the probe every ``grid.probe_every`` points (the engine idle)."""
        self.points += 1
        if self.grid.probe_every and self.points % self.grid.probe_every == 0:
            await self.probe()

    def prompt(self, tokens: int) -> str:
        """One prompt of exactly ``tokens`` tokens (the server's count of its text)."""
        return self.tokens.make([tokens])[0]

    def decoding(self, requests: int, prompt_tokens: int, output_tokens: int) -> _Streams:
        """``requests`` requests of ``prompt_tokens``-token prompts streaming ``output_tokens``
        tokens (fewer where the server's context leaves less room)."""
        prompts = self.tokens.make([prompt_tokens] * requests)
        output = self.tokens.longest_output(prompt_tokens, output_tokens)
        return _Streams(self.session, self.endpoint, prompts, output, self.timeout_s)

    async def prefill(self) -> list[StepSample]:
        """Pure prefill: one request alone, the engine's own prefill time (and the front end's share);
        prompts the server's context cannot hold (with one output token) are left out."""
        samples: list[StepSample] = []
        chosen = []
        for tokens in self.grid.prefill_prompt_tokens:
            if tokens + self.tokens.overhead > self.max_num_batched_tokens:
                continue
            if not self.tokens.fits(tokens, 1):
                self.say(f"prefill {tokens} tokens: left out, over the context of {self.tokens.context_tokens}")
                continue
            chosen += [tokens] * self.grid.prefill_repeats
        for tokens in self.shuffled(chosen):
            samples += await self._one_prefill(tokens)
            self.say(f"prefill {tokens} tokens")
            await self.tick()
        return samples

    async def _one_prefill(self, tokens: int, prompt: str | None = None, strict: bool = True) -> list[StepSample]:
        """One prompt of ``tokens`` tokens (``prompt``, else a new one) alone: its pure prefill
        sample and its front-end overhead sample. ``strict`` False: a failed request, or one the
        engine's counters do not show, gives no sample instead of an error."""
        prompt = self.prompt(tokens) if prompt is None else prompt
        before = await _scrape(self.session, self.endpoint)
        result = await stream_request(self.session, self.endpoint, prompt, 1, timeout_s=self.timeout_s)
        if not strict and result.error:
            return []
        _raise_on_failure([result], f"prefill of {tokens} tokens failed")
        await asyncio.sleep(0.05)  # the metrics are recorded just after the response
        after = await _scrape(self.session, self.endpoint)
        if _increment(before, after, "vllm:request_prefill_time_seconds_count") != 1:
            if not strict:
                return []
            raise SchedlabError(
                "profile: the engine exposes no vllm:request_prefill_time_seconds "
                "(the step profiler needs vLLM's V1 metrics)"
            )
        prefill_s = _increment(before, after, "vllm:request_prefill_time_seconds_sum")
        queue_s = _increment(before, after, "vllm:request_queue_time_seconds_sum")
        counted = int(result.prompt_tokens or tokens + self.tokens.overhead)
        samples = []
        if result.chunk_times:  # the front end's share of the client's TTFT (ServingOverhead)
            outside = result.chunk_times[0] - result.sent_at - prefill_s - queue_s
            samples.append(
                StepSample(
                    "overhead", 1, counted, 0, 0, max(0.0, outside), "client TTFT - engine queue - engine prefill"
                )
            )
        if counted <= self.max_num_batched_tokens:  # else chunked over several steps: not one prefill step
            samples.append(StepSample("prefill", 1, counted, 0, 0, prefill_s, "engine request_prefill_time"))
        return samples

    async def decode(self) -> list[StepSample]:
        """Pure decode: N long outputs decoding together."""
        grid, samples = self.grid, []
        points = [
            (prompt_tokens, batch)
            for prompt_tokens in grid.decode_prompt_tokens
            for batch in grid.decode_batches
            if not (prompt_tokens > min(grid.decode_prompt_tokens) and batch > grid.decode_long_prompt_max_batch)
        ]
        for prompt_tokens, batch in self.shuffled(points):
            streams = self.decoding(batch, prompt_tokens, grid.decode_output_tokens)
            start = await streams.all_started()
            results = await asyncio.gather(*streams.tasks)
            _raise_on_failure(results, f"decode load of {batch} failed")
            prompt_mean = float(np.mean([r.prompt_tokens or prompt_tokens + self.tokens.overhead for r in results]))
            samples.extend(decode_samples(streams.times, prompt_mean, start, grid.decode_windows))
            self.say(f"decode batch {batch}, prompts {prompt_tokens}")
            await self.tick()
        return samples

    async def mixed(self) -> list[StepSample]:
        """Mixed: prompts arriving while D requests decode."""
        grid, samples = self.grid, []
        for decodes in self.shuffled(grid.mixed_decodes):
            combos = self.shuffled(
                [
                    (p, l)
                    for p in grid.mixed_prefills
                    for l in grid.mixed_prompt_tokens
                    if p * (l + self.tokens.overhead) + decodes <= self.max_num_batched_tokens
                    and self.tokens.fits(l, 1)
                ]
                * grid.mixed_repeats
            )
            if not combos:
                continue
            # every prompt counted before the decoders start: counting blocks this thread
            injected = [self.tokens.make([tokens] * prefills) for prefills, tokens in combos]
            streams = self.decoding(decodes, self.short, grid.mixed_decode_output_tokens)
            try:
                await streams.all_started()
                await asyncio.sleep(0.1)
                for (_, tokens), prompts in zip(combos, injected):
                    samples += await self._one_injection(streams, decodes, prompts, tokens)
            finally:
                await streams.cancel()
            self.say(f"mixed with {decodes} decoding")
            await self.probe()  # between the decoders' loads: the engine idle
        return samples

    async def _one_injection(
        self, streams: _Streams, decodes: int, prompts: list[str], tokens: int
    ) -> list[StepSample]:
        before = await _scrape(self.session, self.endpoint)
        results = await _batch(self.session, self.endpoint, prompts, 1, self.timeout_s)
        _raise_on_failure(results, "mixed prefill failed")
        await asyncio.sleep(0.05)  # a few decode steps between injections
        samples = []
        tokens += self.tokens.overhead  # as the server counts a prompt, where its usage does not say
        overhead = _busy_overhead_sample(before, await _scrape(self.session, self.endpoint), results, tokens, decodes)
        if overhead is not None:
            samples.append(overhead)
        sample = _mixed_sample(
            streams.times,
            [r.chunk_times[0] for r in results],
            sum(r.prompt_tokens or tokens for r in results),
            self.short + self.tokens.overhead,  # the decoders' prompts as the server counts them
        )
        if sample is not None and sample.prefill_tokens + decodes <= self.max_num_batched_tokens:
            samples.append(sample)  # else the prompts were chunked over several steps
        return samples

    async def interference(self) -> list[StepSample]:
        """Short requests arriving at each rate while D requests decode, the rates taking turns."""
        grid, samples = self.grid, []
        turns = self.shuffled(
            [
                (decodes, rate)
                for _ in range(grid.interference_repeats)
                for decodes in grid.interference_decodes
                for rate in grid.interference_rates
            ]
        )
        for decodes, rate in turns:
            arrivals = self.tokens.make([grid.interference_prompt_tokens] * _arrivals_cap(rate))  # before the decoders
            window = await _interference_window(
                self.session,
                self.endpoint,
                self.decoding(decodes, self.short, grid.interference_output_tokens),
                rate,
                arrivals,
                self.tokens.rng,
                self.timeout_s,
            )
            if window is not None:
                samples.append(window)
            self.say(f"interference: {decodes} decoding, {rate:g} arrivals/s")
            await self.tick()
        return samples

    async def prefix(self) -> list[StepSample]:
        """Prefill after a cached prefix: for each (cached C, new N), a fresh prompt of N tokens
        alone (the control), a prompt of C tokens alone, then that prompt followed by N tokens
        alone (each one token out, the engine idle before each). The first two are pure prefill
        samples measured beside the third, a prefill sample of its computed tokens (the engine's
        count less its prefix-cache hits) with ``prefill_context`` = computed x hit tokens. A
        request that streams no token (the tiny random models' first token may decode to no text)
        or is counted over max_num_batched_tokens (chunked) gives no sample; pairs that do not fit
        the context are left out."""
        grid, samples = self.grid, []
        pairs = self.shuffled(
            [(c, n) for c in grid.prefix_cached_tokens for n in grid.prefix_new_tokens] * grid.prefix_repeats
        )
        for cached, new in pairs:
            await self.tick()
            if cached + new + self.tokens.overhead > self.max_num_batched_tokens or not self.tokens.fits(
                cached + new, 1
            ):
                continue
            control, head, tail = self.tokens.make([new, cached, new])
            samples += await self._one_prefill(new, control, strict=False)
            samples += await self._one_prefill(cached, head, strict=False)
            await asyncio.sleep(0.05)
            before = await _scrape(self.session, self.endpoint)
            second = await stream_request(self.session, self.endpoint, head + " " + tail, 1, timeout_s=self.timeout_s)
            await asyncio.sleep(0.05)  # the metrics are recorded just after the response
            after = await _scrape(self.session, self.endpoint)
            if (
                _increment(before, after, "vllm:request_prefill_time_seconds_count") != 1
                or second.prompt_tokens is None
            ):
                continue
            hits = int(max(_increment(before, after, name) for name in PREFIX_HITS_METRICS))
            computed = second.prompt_tokens - hits
            if not hits or computed <= 0 or second.prompt_tokens > self.max_num_batched_tokens:
                continue
            seconds = _increment(before, after, "vllm:request_prefill_time_seconds_sum")
            samples.append(StepSample("prefill", 1, computed, 0, 0, seconds, PREFIX_SIGNAL, 1, computed * hits))
        self.say(f"prefix: {sum(s.prefill_context > 0 for s in samples)} prefills after a cached prefix")
        return samples

    @property
    def short(self) -> int:
        """The decoders' prompt length in the mixed and interference phases, tokens."""
        return min(self.grid.decode_prompt_tokens)


async def measure_steps(
    endpoint: Endpoint,
    grid: StepGrid,
    max_num_batched_tokens: int,
    timeout_s: float = 600.0,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    phases: Collection[str] = PHASES,
    tokens: PromptTokens | None = None,
    tokenizer: str | None = None,
    probes: list[Probe] | None = None,
    by_phase: dict[str, list[StepSample]] | None = None,
) -> list[StepSample]:
    """Run the controlled loads of ``phases`` (module notes above; default all, in
    :data:`PHASES` order, each phase's grid points in an order drawn from ``seed``) against one
    idle server, prompts of exact token counts by ``tokens`` (default: the server's tokenizer, or
    the folder ``tokenizer``) within its context. The fixed probe step is measured before the
    first phase, every ``grid.probe_every`` points and after the last; its measurements are
    appended to ``probes`` when given (runners.app.profile_quality), and each phase's samples put
    in ``by_phase`` under its name when given."""
    unknown = sorted(set(phases) - set(PHASES))
    if unknown:
        raise SchedlabError(f"profile: unknown phase(s) {unknown}; known: {', '.join(PHASES)}")
    rng = np.random.default_rng(seed)
    tokens = _prompt_tokens(endpoint, rng, tokens, tokenizer)
    samples: list[StepSample] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        run = _Profiling(
            session,
            endpoint,
            grid,
            max_num_batched_tokens,
            timeout_s,
            tokens,
            progress or (lambda message: None),
            order=np.random.default_rng([seed, ORDER_STREAM]),
        )
        await _warm_up(session, endpoint, grid.warmup_requests, tokens, timeout_s)
        await run.probe()
        steps = {
            "prefill": run.prefill,
            "decode": run.decode,
            "mixed": run.mixed,
            "interference": run.interference,
            "prefix": run.prefix,
        }
        for phase in PHASES:
            if phase in phases:
                measured = await steps[phase]()
                samples += measured
                if by_phase is not None:
                    by_phase[phase] = measured
        await run.probe()
    if probes is not None:
        probes.extend(run.probes)
    return samples


def _arrivals_cap(rate: float) -> int:
    """Prompts prepared for one interference window at ``rate`` requests per second (ample for a
    window of up to 20 s)."""
    return int(math.ceil(rate * 20)) + 8 if rate > 0 else 0


async def _interference_window(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    streams: _Streams,
    rate: float,
    prompts: list[str],
    rng: np.random.Generator,
    timeout_s: float,
) -> StepSample | None:
    """One :data:`INTERFERENCE_KIND` window: while ``streams`` decode, ``prompts`` (one token
    out each) are sent as a Poisson stream at ``rate`` per second (0: none); the window runs from
    the first decode token after every decoder started to the first decoder's last token. Counts
    the arrivals whose first token came out inside it. None when the window holds no step."""
    arrivals: list[asyncio.Future] = []
    try:
        start = await streams.all_started()
        if rate > 0:
            for prompt in prompts:
                await asyncio.sleep(float(rng.exponential(1.0 / rate)))
                if any(task.done() for task in streams.tasks):
                    break
                arrivals.append(
                    asyncio.ensure_future(stream_request(session, endpoint, prompt, 1, timeout_s=timeout_s))
                )
        results = await asyncio.gather(*streams.tasks)
        _raise_on_failure(results, "interference decoders failed")
        sent = list(await asyncio.gather(*arrivals))
        _raise_on_failure(sent, "interference arrival failed")
    finally:
        await streams.cancel()
        for task in arrivals:
            task.cancel()
    times = [np.asarray(series) for series in streams.times]
    lo = min(float(series[series > start][0]) for series in times if (series > start).any())
    hi = min(float(series[-1]) for series in times)
    if hi <= lo:
        return None
    steps = float(np.mean([np.count_nonzero((series > lo) & (series <= hi)) for series in times]))
    if steps < 1:
        return None
    inside = [r for r in sent if r.chunk_times and lo < r.chunk_times[0] <= hi]
    context = float(np.mean([r.prompt_tokens or 0 for r in results])) + float(
        np.mean([np.searchsorted(series, (lo + hi) / 2) for series in times])
    )
    return StepSample(
        INTERFERENCE_KIND,
        len(inside),
        int(sum(r.prompt_tokens or 0 for r in inside)),
        len(times),
        int(round(context * len(times))),
        hi - lo,
        f"decode window with arrivals at {rate:g}/s (client token times)",
        int(round(steps)),
    )


def _busy_overhead_sample(
    before: str, after: str, results: Sequence[StreamResult], tokens: int, decodes: int
) -> StepSample | None:
    """The serving front end's share of the TTFT of prompts sent while ``decodes`` requests decode:
    their mean client TTFT minus their mean engine queue + prefill time (the histograms' sum
    increments over the count increment, which must equal the prompts sent). None otherwise."""
    if _increment(before, after, "vllm:request_prefill_time_seconds_count") != len(results) or not all(
        r.chunk_times for r in results
    ):
        return None
    engine = _increment(before, after, "vllm:request_prefill_time_seconds_sum") + _increment(
        before, after, "vllm:request_queue_time_seconds_sum"
    )
    client = float(np.mean([r.chunk_times[0] - r.sent_at for r in results]))
    prompt = float(np.mean([r.prompt_tokens or tokens for r in results]))
    return StepSample(
        OVERHEAD_KIND,
        1,
        int(round(prompt)),
        decodes,
        0,
        max(0.0, client - engine / len(results)),
        "client TTFT - engine queue - engine prefill, engine busy",
    )


def _mixed_sample(
    times: Sequence[Sequence[float]], first_tokens: Sequence[float], prefill_tokens: int, prompt_tokens: float
) -> StepSample | None:
    """The mixed step that produced ``first_tokens`` (None when they came out of different steps):
    each decoder's token gap ending nearest to them, median over decoders."""
    when = float(np.median(first_tokens))
    gaps, context = [], 0.0
    for series in times:
        arr = np.asarray(series)
        index = int(np.argmin(np.abs(arr - when)))
        if index == 0:
            return None
        gaps.append(arr[index] - arr[index - 1])
        context += prompt_tokens + index  # tokens generated before this step, plus the prompt
    step = float(np.median(gaps))
    if max(first_tokens) - min(first_tokens) > step / 4:
        return None
    return StepSample(
        "mixed", len(first_tokens), int(prefill_tokens), len(times), int(round(context)), step, "client token gaps"
    )


# -- fitting and cross-validation ------------------------------------------------------------------
@dataclass(frozen=True)
class StepFit:
    """A fitted linear step model with its in-sample and out-of-fold errors."""

    model: LinearStepModel
    rmse_s: float
    mape: float
    points: int


def _idle_start(sample: StepSample) -> bool:
    """A pure prefill sample is an idle start: the profiler sends that prompt to an idle engine."""
    return sample.kind == "prefill"


def _design(samples: Sequence[StepSample]) -> np.ndarray:
    return np.array(
        [
            LinearStepModel.features(
                s.prefill_requests,
                s.prefill_tokens,
                s.decode_requests,
                s.decode_context,
                idle_start=_idle_start(s),
                prefill_context=s.prefill_context,
            )
            for s in samples
        ],
        dtype=float,
    )


def _relative_nnls(design: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Non-negative least squares with each row weighted by ``weight`` (1 / its measured seconds:
    the fit then minimises relative error)."""
    solution, _ = nnls(design * weight[:, None], y * weight)
    return solution


def _mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - measured) / np.maximum(measured, 1e-9)))


def fit_step_model(samples: Sequence[StepSample], min_points_per_term: int = MIN_POINTS_PER_TERM) -> StepFit:
    """NNLS of step seconds on the :data:`STEP_TERMS` columns, each row weighted by 1 / its
    measured seconds, so the fit minimises relative error: steps span 1 to 50 ms, and unweighted
    least squares fits the long prefill steps at the cost of the short, frequent decode steps that
    make TPOT. Refuses fewer than ``len(BASE_STEP_TERMS) * min_points_per_term`` samples (the
    prefill-context term is 0 unless samples after a cached prefix estimate it)."""
    needed = len(BASE_STEP_TERMS) * min_points_per_term
    if len(samples) < needed:
        raise SchedlabError(
            f"profile: need at least {needed} measured steps to fit the {len(BASE_STEP_TERMS)} terms of "
            f"the linear step model ({min_points_per_term} per term), got {len(samples)}"
        )
    design = _design(samples)
    y = np.array([s.seconds for s in samples], dtype=float)
    if (y <= 0).any() or not np.isfinite(y).all():
        raise SchedlabError("profile: every measured step must take a finite, positive time")
    solution = _relative_nnls(design, y, 1.0 / y)
    predicted = design @ solution
    model = LinearStepModel(**{term: float(v) for term, v in zip(STEP_TERMS, solution)})
    return StepFit(model, float(np.sqrt(np.mean((predicted - y) ** 2))), _mape(predicted, y), len(y))


def _phase_model(samples: Sequence[StepSample]) -> LatencyModel:
    """Eq. 14-15 fitted on the same steps: prefill phase on the pure prefill steps (b = P,
    l = tokens / P), decode phase on the pure decode steps (b = D, l = context / D)."""
    pre = [s for s in samples if s.kind == "prefill" and not s.prefill_context]  # eq. 14 has no cached prefix
    dec = [s for s in samples if s.kind == "decode"]
    prefill = fit_phase(
        [s.prefill_requests for s in pre],
        [s.prefill_tokens / s.prefill_requests for s in pre],
        [s.seconds for s in pre],
    )
    decode = fit_phase(
        [s.decode_requests for s in dec], [s.decode_context / s.decode_requests for s in dec], [s.seconds for s in dec]
    )
    return LatencyModel(prefill=prefill.coefficients, decode=decode.coefficients)


def predict_steps(model: LatencyModel, samples: Sequence[StepSample]) -> np.ndarray:
    return np.array(
        [
            model.step_time(
                s.prefill_requests, s.prefill_tokens, s.decode_requests, s.decode_context, s.prefill_context
            )
            + (model.idle_start_s if _idle_start(s) else 0.0)
            for s in samples
        ],
        dtype=float,
    )


def fold_indices(n: int, folds: int, seed: int = 0) -> list[np.ndarray]:
    """``folds`` disjoint test index sets covering 0..n-1 (a seeded shuffle dealt round-robin)."""
    if not 2 <= folds <= n:
        raise SchedlabError(f"profile: cross-validation needs 2 <= folds <= samples, got {folds} folds for {n}")
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(order[k::folds]) for k in range(folds)]


def cross_validate(
    samples: Sequence[StepSample], model: Literal["linear-step", "phase"] = "linear-step", folds: int = 5, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Out-of-fold errors per step kind: every sample predicted by a model fitted without its
    fold. ``{kind: {"mape": ..., "rmse_s": ..., "n": ...}}`` for each kind present, plus "all"."""
    predicted = np.full(len(samples), np.nan)
    for test in fold_indices(len(samples), folds, seed):
        held = set(test.tolist())
        train = [s for i, s in enumerate(samples) if i not in held]
        fitted = (
            LatencyModel.of_step(fit_step_model(train, min_points_per_term=1).model)
            if model == "linear-step"
            else _phase_model(train)
        )
        predicted[test] = predict_steps(fitted, [samples[i] for i in test])
    measured = np.array([s.seconds for s in samples], dtype=float)
    kinds = np.array([s.kind for s in samples])
    report = {}
    for kind in [*STEP_KINDS, "all"]:
        mask = np.ones(len(samples), bool) if kind == "all" else kinds == kind
        if mask.any():
            report[kind] = {
                "mape": _mape(predicted[mask], measured[mask]),
                "rmse_s": float(np.sqrt(np.mean((predicted[mask] - measured[mask]) ** 2))),
                "n": int(mask.sum()),
            }
    return report


#: The serving overhead's terms, in its design-matrix column order.
OVERHEAD_TERMS: tuple[str, ...] = ("request_s", "per_prompt_token_s", "busy_engine_s", "per_running_request_s")


def fit_serving_overhead(
    samples: Sequence[StepSample], folds: int = 5, seed: int = 0
) -> tuple[ServingOverhead, dict[str, float | None]] | None:
    """NNLS of the :data:`OVERHEAD_KIND` samples' seconds on [1, prompt tokens, engine busy (the
    sample's ``decode_requests`` > 0), requests running (``decode_requests``)], weighted by 1 / the
    measured seconds (relative error, as the step model), with the in-sample and out-of-fold
    errors; None when there are none. Refuses fewer than ``len(OVERHEAD_TERMS) *
    MIN_POINTS_PER_TERM`` samples."""
    chosen = [s for s in samples if s.kind == OVERHEAD_KIND]
    if not chosen:
        return None
    needed = len(OVERHEAD_TERMS) * MIN_POINTS_PER_TERM
    if len(chosen) < needed:
        raise SchedlabError(
            f"profile: need at least {needed} measured requests to fit the {len(OVERHEAD_TERMS)} "
            f"terms of the serving overhead ({MIN_POINTS_PER_TERM} per term), got {len(chosen)}"
        )
    design = np.array(
        [[1.0, float(s.prefill_tokens), 1.0 if s.decode_requests else 0.0, float(s.decode_requests)] for s in chosen]
    )
    y = np.array([s.seconds for s in chosen], dtype=float)
    weight = 1.0 / np.maximum(y, 1e-6)  # a front end faster than the engine's clocks resolve is clamped to 0
    solution = _relative_nnls(design, y, weight)
    predicted = np.full(len(chosen), np.nan)
    for test in fold_indices(len(chosen), min(folds, len(chosen)), seed):
        train = np.setdiff1d(np.arange(len(chosen)), test)
        predicted[test] = design[test] @ _relative_nnls(design[train], y[train], weight[train])
    busy = design[:, 2] > 0
    report = {
        "n": len(chosen),
        "n_busy": int(busy.sum()),
        "mape_in_sample": _mape(design @ solution, y),
        "mape_out_of_fold": _mape(predicted, y),
        "mean_idle_s": float(np.mean(y[~busy])) if (~busy).any() else None,
        "mean_busy_s": float(np.mean(y[busy])) if busy.any() else None,
    }
    return ServingOverhead(**{term: float(v) for term, v in zip(OVERHEAD_TERMS, solution)}), report


def fit_arrival_interference(
    samples: Sequence[StepSample], step: LinearStepModel
) -> tuple[float, dict[str, Any]] | None:
    """The engine seconds lost per request that arrives while the engine runs requests, from the
    :data:`INTERFERENCE_KIND` windows (None when there are none). For each number of decoders D,
    the base step g0 is the base windows' (no arrivals) total seconds over their total steps; a
    window with k arrivals, N steps and T seconds leaves T - N * g0 - k * c unexplained, where c is
    the step model's cost of one arrival's prefill inside a step (per_prefill_token_s * its tokens
    + per_request_cpu_s). The estimate is the pooled excess over the pooled arrivals (the least-
    squares slope through the origin), clamped at 0; the report gives the per-window estimates'
    mean with its 95% t interval, and each D's base step and loaded step."""
    windows = [s for s in samples if s.kind == INTERFERENCE_KIND]
    if not windows:
        return None
    excess, arrived, per_window = 0.0, 0, []
    by_decodes: dict[str, dict[str, float]] = {}
    for decodes in sorted({w.decode_requests for w in windows}):
        group = [w for w in windows if w.decode_requests == decodes]
        base = [w for w in group if w.prefill_requests == 0]
        loaded = [w for w in group if w.prefill_requests > 0]
        if not base or not loaded:
            continue
        g0 = sum(w.seconds for w in base) / sum(w.steps for w in base)
        for w in loaded:
            cost = step.per_prefill_token_s * w.prefill_tokens + step.per_request_cpu_s * w.prefill_requests
            lost = w.seconds - w.steps * g0 - cost
            excess += lost
            arrived += w.prefill_requests
            per_window.append(lost / w.prefill_requests)
        by_decodes[str(decodes)] = {
            "base_step_s": g0,
            "loaded_step_s": sum(w.seconds for w in loaded) / sum(w.steps for w in loaded),
            "arrivals_per_s": sum(w.prefill_requests for w in loaded) / sum(w.seconds for w in loaded),
        }
    if not arrived:
        return None
    estimate = max(0.0, excess / arrived)
    from runners.metrics.seed_statistics import mean_interval  # scipy.stats: only when fitting

    values = np.asarray(per_window)
    interval = mean_interval(per_window)
    report = {
        "windows": len(windows),
        "arrivals": arrived,
        "per_request_s": estimate,
        "per_window_mean_s": float(values.mean()),
        "per_window_ci95_s": list(interval) if interval is not None else None,
        "by_decodes": by_decodes,
    }
    return estimate, report


def fit_step_profile(
    samples: Sequence[StepSample],
    name: str,
    source: str,
    kv_capacity_tokens: int | None,
    block_size: int | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    model: Literal["linear-step", "phase"] = "linear-step",
    folds: int = 5,
) -> EngineProfile:
    """An EngineProfile from measured steps: the linear step model (default) or eq. 14-15 fitted on
    the same steps, with in-sample and out-of-fold errors per step kind in ``fit``; and, when the
    samples hold :data:`OVERHEAD_KIND` requests, the serving overhead fitted on them."""
    overhead = fit_serving_overhead(samples, folds)
    interference_windows = [s for s in samples if s.kind == INTERFERENCE_KIND]
    measured_steps = [s for s in samples if s.kind in STEP_KINDS]
    samples, flagged = robust_steps(measured_steps, model)
    extra = _engine_limits(kv_capacity_tokens, block_size, max_num_seqs, max_num_batched_tokens)
    counts = {kind: sum(s.kind == kind for s in samples) for kind in STEP_KINDS}
    latency, coefficients = _fit_latency(samples, model)
    predicted = predict_steps(latency, samples)
    measured = np.array([s.seconds for s in samples], dtype=float)
    kinds = np.array([s.kind for s in samples])
    in_sample = {kind: _mape(predicted[kinds == kind], measured[kinds == kind]) for kind in STEP_KINDS if counts[kind]}
    fit = {
        "method": f"NNLS on measured engine steps ({model}), {folds}-fold cross-validated",
        "points": counts,
        "mape_in_sample": in_sample,
        "rmse_s": float(np.sqrt(np.mean((predicted - measured) ** 2))),
        "cross_validation": cross_validate(samples, model, folds),
        "robust": {
            "measured_steps": len(measured_steps),
            "repeats_merged": len(measured_steps) - len(samples) - len(flagged),
            "rule": "repeats of one grid point by their median; outliers: relative error beyond "
            f"{OUTLIER_SIGMAS:g} robust sigmas and {OUTLIER_MIN_ERROR:.0%}, at most {OUTLIER_MAX_SHARE:.0%} of the steps",
            "outliers": flagged,
        },
    }
    if overhead is not None:
        extra["serving_overhead"] = overhead[0]
        fit["serving_overhead"] = overhead[1]
        interference = (
            fit_arrival_interference(interference_windows, latency.step) if latency.step is not None else None
        )
        if interference is not None:
            extra["serving_overhead"] = ServingOverhead(
                **{**overhead[0].model_dump(), "busy_request_engine_s": interference[0]}
            )
            fit["arrival_interference"] = interference[1]
    return EngineProfile(name=name, source=source, fit=fit, **coefficients, **extra)


def _fit_latency(
    samples: Sequence[StepSample], model: Literal["linear-step", "phase"]
) -> tuple[LatencyModel, dict[str, Any]]:
    """The latency model fitted on ``samples`` and the profile fields holding its coefficients."""
    if model == "linear-step":
        fitted = fit_step_model(samples)
        return LatencyModel.of_step(fitted.model), {"step_model": fitted.model}
    latency = _phase_model(samples)
    return latency, {"prefill": latency.prefill, "decode": latency.decode}


def robust_steps(
    samples: Sequence[StepSample], model: Literal["linear-step", "phase"] = "linear-step"
) -> tuple[list[StepSample], list[dict[str, Any]]]:
    """The steps a profile is fitted on: repeats of one grid point merged into their median
    (:func:`~runners.app.profile_quality.median_of_repeats`), then the outliers against a first fit
    left out (:func:`~runners.app.profile_quality.outliers`); (kept steps, the outliers flagged:
    kind, tokens, requests, measured and predicted seconds, relative error)."""
    # the phase model (eq. 14-15) fits each phase on its pure steps alone: merging its repeats
    # would leave too few to cross-validate, so only its outliers are flagged
    merged = median_of_repeats(samples) if model == "linear-step" else list(samples)
    latency, _ = _fit_latency(merged, model)
    predicted = predict_steps(latency, merged)
    measured = np.array([s.seconds for s in merged], dtype=float)
    worst = set(outliers(predicted, measured).tolist())
    flagged = [
        {
            "kind": merged[i].kind,
            "prefill_requests": merged[i].prefill_requests,
            "prefill_tokens": merged[i].prefill_tokens,
            "decode_requests": merged[i].decode_requests,
            "decode_context": merged[i].decode_context,
            "seconds": float(measured[i]),
            "predicted_s": float(predicted[i]),
            "error": float(abs(predicted[i] - measured[i]) / max(measured[i], 1e-9)),
        }
        for i in sorted(worst)
    ]
    return [s for i, s in enumerate(merged) if i not in worst], flagged


def read_step_samples(path: Path) -> list[StepSample]:
    with Path(path).open(newline="") as handle:
        return [
            StepSample(
                row["kind"],
                int(row["prefill_requests"]),
                int(row["prefill_tokens"]),
                int(row["decode_requests"]),
                int(row["decode_context"]),
                float(row["seconds"]),
                row["signal"],
                int(row.get("steps") or 1),  # absent in files written before the interference phase
                int(row.get("prefill_context") or 0),  # absent in files written before the prefix phase
            )
            for row in csv.DictReader(handle)
        ]


def fit_table(profile: EngineProfile) -> list[list[str]]:
    """Rows (header first) describing a fitted profile's coefficients and errors, for printing."""
    fit = profile.fit or {}
    if profile.step_model is not None:
        cv = fit.get("cross_validation", {})
        rows = [["term", "seconds per unit"]]
        rows += [[term, f"{getattr(profile.step_model, term):.3g}"] for term in STEP_TERMS]
        rows += [
            ["out-of-fold MAPE " + kind, f"{cv[kind]['mape']:.1%} (n={cv[kind]['n']})"]
            for kind in (*STEP_KINDS, "all")
            if kind in cv
        ]
        rows += _overhead_rows(profile)
        return rows
    assert profile.prefill is not None and profile.decode is not None
    rows = [["phase", "alpha (s/tok/req)", "beta (s/req)", "gamma (s/tok)", "delta (s)", "MAPE"]]
    for name, phase in (("prefill", profile.prefill), ("decode", profile.decode)):
        mape = fit.get(f"mape_{name}", fit.get("mape_in_sample", {}).get(name))
        rows.append(
            [
                name,
                f"{phase.alpha:.3g}",
                f"{phase.beta:.3g}",
                f"{phase.gamma:.3g}",
                f"{phase.delta:.3g}",
                "" if mape is None else f"{mape:.1%}",
            ]
        )
    return rows + [row + [""] * 4 for row in _overhead_rows(profile)]


def _overhead_rows(profile: EngineProfile) -> list[list[str]]:
    overhead = profile.serving_overhead
    if overhead is None:
        return []
    rows = [[f"serving overhead {term}", f"{getattr(overhead, term):.3g}"] for term in OVERHEAD_TERMS]
    report = (profile.fit or {}).get("serving_overhead")
    if report:
        rows.append(["out-of-fold MAPE serving overhead", f"{report['mape_out_of_fold']:.1%} (n={report['n']})"])
    interference = (profile.fit or {}).get("arrival_interference")
    if interference:
        low_high = interference.get("per_window_ci95_s")
        spread = f", per window {low_high[0]:.3g} to {low_high[1]:.3g} (95% t)" if low_high else ""
        rows.append(
            [
                "engine time lost per arriving request (busy_request_engine_s)",
                f"{overhead.busy_request_engine_s:.3g} ({interference['windows']} windows, "
                f"{interference['arrivals']} arrivals{spread})",
            ]
        )
    return rows


#: Engine-step samples are written like grid samples.
write_step_samples = write_samples
