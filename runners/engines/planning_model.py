"""The latency model a policy plans with on the simulator: its own fit, not the engine's truth.

A policy that predicts latencies (slo-sa, scls, mcsf and the alpha baselines) on a real engine
plans with ``engine.profile``, a model fitted to measurements of that engine, with the fit's
error. On the simulator the engine's own latency model is known exactly; handing it to the
policy would give it zero prediction error, which no deployment has (004 Fig. 10 shows G falling
as that error grows). So the simulator's policies get, by default (``engine.planning_model``
``fitted``), what the profiler gives them on a real engine:

1. a profile of the simulated engine: for every point of the profiler's default grid
   (:class:`runners.app.profiler.ProfileGrid`: batch sizes 1-16, prompts of 32-512 tokens, 16 or 64
   output tokens) a batch of equal requests is run on a fresh simulated instance of the same size
   and limits (virtual time, chunked prefill and all), and the same two samples are taken as from a
   real engine: the slowest time to first token (prefill) and the mean gap between tokens after the
   batch's last first token (decode);
2. measurement noise on each sample, as a real profile has: a factor exp(s z - s^2 / 2) (mean 1)
   with z standard normal and s = :data:`PROFILE_NOISE` per phase, the in-sample fit error the
   real CPU vLLM's profile showed (bench/results/tiny-cpu-vllm.profile.yaml, 2026-11-23: prefill
   MAPE 20.6%, decode 5.7%), drawn from the run's workload seed on a stream of its own;
3. the SLO-aware paper's eq. 14/15 fitted to them by non-negative least squares
   (:func:`fit_phase_coefficients`, the profiler's fit), its error reported twice: the fit's
   residuals (RMSE, MAPE against the noisy samples) and the model's error against the engine it
   plans for (MAPE against the noiseless grid: what the policy will get wrong);
4. optionally a known error on top (``engine.planning_error`` e): every one of the 8 coefficients
   multiplied by max(0, 1 + e z), z standard normal, on a third stream, for 004 Fig. 10's
   sensitivity study.

``engine-truth`` hands the policy the engine's own model: an oracle, labelled as one wherever
results are shown. The model has no serving-overhead term (no policy reads one).

Units: seconds; tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from runners.engines.latency_model import LatencyModel, PhaseCoefficients
from runners.engines.least_squares import nonnegative_least_squares
from runners.engines.simulator import SimulatedInstance

PlanningSource = Literal["fitted", "engine-truth"]
#: The profiler's default grid (runners.app.profiler.ProfileGrid reads these), kept here so that
#: fitting on the simulator does not import the profiler's HTTP client: batch sizes, prompt and
#: output tokens.
GRID_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16)
GRID_INPUTS: tuple[int, ...] = (32, 128, 512)
GRID_OUTPUTS: tuple[int, ...] = (16, 64)
#: numpy SeedSequence entropy [workload seed, this]: the random streams of the profile's noise and
#: of the planning error, apart from each other and from the workload's.
NOISE_STREAM = 0x9F0F
ERROR_STREAM = 0x10A7
#: Relative measurement noise (log-normal sigma) of a profile's samples per phase: the in-sample
#: MAPE of the real CPU vLLM's fitted profile (bench/results/tiny-cpu-vllm.profile.yaml).
PROFILE_NOISE = {"prefill": 0.206, "decode": 0.057}
COEFFICIENTS = ("alpha", "beta", "gamma", "delta")


@dataclass(frozen=True)
class PhaseFitResult:
    """Eq. 14/15 coefficients fitted to ``points`` samples, with the fit's RMSE (seconds) and mean
    absolute percentage error (a fraction)."""

    coefficients: PhaseCoefficients
    rmse_s: float
    mape: float
    points: int


def fit_phase_coefficients(
    batch: Sequence[float] | np.ndarray, length: Sequence[float] | np.ndarray, seconds: Sequence[float] | np.ndarray
) -> PhaseFitResult:
    """Non-negative least squares of seconds ~ alpha*b*l + beta*b + gamma*l + delta, the same bits
    on every CPU (:func:`runners.engines.least_squares.nonnegative_least_squares`, not LAPACK).
    ValueError for fewer than 4 samples."""
    b = np.asarray(batch, dtype=float)
    length_ = np.asarray(length, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if len(y) < 4:
        raise ValueError(f"need at least 4 measurements to fit 4 coefficients, got {len(y)}")
    columns = [(b * length_).tolist(), b.tolist(), length_.tolist(), [1.0] * len(b)]
    alpha, beta, gamma, delta = nonnegative_least_squares(columns, y.tolist())
    coefficients = PhaseCoefficients(alpha=alpha, beta=beta, gamma=gamma, delta=delta)
    predicted = coefficients.at(b, length_)
    rmse = float(np.sqrt(np.mean((predicted - y) ** 2)))
    mape = float(np.mean(np.abs(predicted - y) / np.maximum(y, 1e-9)))
    return PhaseFitResult(coefficients, rmse, mape, len(y))


@dataclass(frozen=True)
class PlanningModel:
    """What a policy plans with: ``model``, where it came from (``source``), the fit's reported
    error (``fit``: RMSE seconds and MAPE per phase) and the injected error (``error``, the
    relative std, and the ``factors`` each coefficient was multiplied by)."""

    model: LatencyModel
    source: PlanningSource
    fit: dict[str, float] = field(default_factory=dict)
    error: float = 0.0
    factors: dict[str, float] = field(default_factory=dict)
    #: the error over the range the run uses (:func:`run_range_error`); None when not computed
    run_range: dict[str, Any] | None = None

    @property
    def oracle(self) -> bool:
        return self.source == "engine-truth"

    def record(self) -> dict[str, Any]:
        """The config record's ``planning_model`` entry (JSON)."""
        return {
            "source": self.source,
            "oracle": self.oracle,
            "prefill": self.model.prefill.model_dump(mode="json"),
            "decode": self.model.decode.model_dump(mode="json"),
            "fit": dict(self.fit),
            "planning_error": self.error,
            "error_factors": dict(self.factors),
            "run_range": self.run_range,
        }


def _run_point(instance: SimulatedInstance, batch: int, prompt: int, output: int) -> tuple[float, float]:
    """(slowest time to first token, mean decode gap after the last first token), seconds, of
    ``batch`` equal requests sent at once to an idle ``instance``."""
    for index in range(batch):
        instance.add(f"p{index}", prompt, output)
    now = 0.0
    first: dict[str, float] = {}
    ends: list[float] = []
    while True:
        duration = instance.start_step()
        if duration is None:
            break
        now += duration
        outcome = instance.finish_step(now)
        for seq in outcome.first_tokens:
            first[seq.request_id] = now
        ends.append(now)
    last_first = max(first.values())
    after = [t for t in ends if t > last_first]
    gaps = np.diff([last_first, *after]) if after else np.array([])
    return last_first, float(gaps.mean()) if gaps.size else float("nan")


@lru_cache(maxsize=32)
def _grid_samples(
    truth: LatencyModel, kv_capacity_tokens: int, block_size: int, max_num_seqs: int, max_num_batched_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """The noiseless profile of the simulated engine: prefill rows (batch, prompt tokens,
    seconds) and decode rows (batch, mean context tokens, seconds per token)."""
    prefill: list[tuple[float, float, float]] = []
    decode: list[tuple[float, float, float]] = []
    for batch in GRID_BATCHES:
        for prompt in GRID_INPUTS:
            for output in GRID_OUTPUTS:
                if batch * (prompt + output) > kv_capacity_tokens or batch > max_num_seqs:
                    continue
                instance = SimulatedInstance(
                    instance_id=0,
                    latency=truth,
                    kv_capacity_tokens=kv_capacity_tokens,
                    block_size=block_size,
                    max_num_seqs=max_num_seqs,
                    max_num_batched_tokens=max_num_batched_tokens,
                )
                ttft, gap = _run_point(instance, batch, prompt, output)
                prefill.append((batch, prompt, ttft))
                if np.isfinite(gap):
                    decode.append((batch, prompt + output / 2, gap))
    return np.asarray(prefill, dtype=float), np.asarray(decode, dtype=float)


def _fit_noisy(rows: np.ndarray, sigma: float, rng: np.random.Generator) -> tuple[PhaseFitResult, np.ndarray]:
    """Eq. 14/15 fitted to ``rows`` (batch, length, seconds) with log-normal noise of ``sigma``
    (mean 1) on the seconds; and the noisy seconds."""
    # math.exp (libm), not np.exp: numpy's float64 exp has its own SIMD code on AVX-512 machines
    factors = [math.exp(sigma * z - sigma * sigma / 2) for z in rng.standard_normal(len(rows)).tolist()]
    noisy = rows[:, 2] * np.asarray(factors)
    return fit_phase_coefficients(rows[:, 0], rows[:, 1], noisy), noisy


def _model_error(coefficients: PhaseCoefficients, rows: np.ndarray) -> float:
    """Mean absolute percentage error (a fraction) of ``coefficients`` on the noiseless ``rows``."""
    predicted = coefficients.at(rows[:, 0], rows[:, 1])
    return float(np.mean(np.abs(predicted - rows[:, 2]) / np.maximum(rows[:, 2], 1e-12)))


def _perturbed(model: LatencyModel, error: float, seed: int) -> tuple[LatencyModel, dict[str, float]]:
    """``model`` with each coefficient times max(0, 1 + error z), z ~ N(0, 1) from ``seed``."""
    rng = np.random.default_rng([seed, ERROR_STREAM])
    factors: dict[str, float] = {}
    phases = {}
    for phase in ("prefill", "decode"):
        coefficients = getattr(model, phase)
        values = {}
        for name in COEFFICIENTS:
            factor = max(0.0, 1.0 + error * float(rng.standard_normal()))
            factors[f"{phase}.{name}"] = factor
            values[name] = getattr(coefficients, name) * factor
        phases[phase] = PhaseCoefficients(**values)
    return LatencyModel(prefill=phases["prefill"], decode=phases["decode"]), factors


def _range_points(largest: int, smallest: int) -> np.ndarray:
    """1 (or ``smallest``), then doubling, up to and including ``largest``."""
    points = [smallest]
    while points[-1] * 2 < largest:
        points.append(points[-1] * 2)
    return np.asarray(sorted({*points, max(largest, smallest)}), dtype=float)


def run_range_error(base: LatencyModel, truth: LatencyModel, max_batch: int, max_prompt_tokens: int) -> dict[str, Any]:
    """The planning model's error against the engine's own phase model over the range a run uses
    (issue 43): batches 1, 2, 4 ... ``max_batch`` (the slots), prompt lengths 32, 64 ... the run's
    longest prompt (its mean context for decode: prompt + 64 tokens out), mean absolute percentage
    error per phase, and whether that range reaches beyond the profiling grid (batches
    :data:`GRID_BATCHES`, prompts :data:`GRID_INPUTS`): then the error there is extrapolated."""
    batches = _range_points(max(1, max_batch), 1)
    lengths = _range_points(max(32, max_prompt_tokens), 32)
    b, length = np.meshgrid(batches, lengths)
    errors = {}
    for phase, extra in (("prefill", 0.0), ("decode", float(GRID_OUTPUTS[-1]))):
        true = getattr(truth, phase).at(b, length + extra)
        planned = getattr(base, phase).at(b, length + extra)
        errors[phase] = float(np.mean(np.abs(planned - true) / np.maximum(true, 1e-12)))
    return {
        "max_batch": int(max_batch),
        "max_prompt_tokens": int(max_prompt_tokens),
        "error_prefill": errors["prefill"],
        "error_decode": errors["decode"],
        "extrapolated": max_batch > max(GRID_BATCHES) or max_prompt_tokens > max(GRID_INPUTS),
    }


def planning_model(
    truth: LatencyModel,
    kv_capacity_tokens: int,
    block_size: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    source: PlanningSource = "fitted",
    error: float = 0.0,
    seed: int = 0,
    max_prompt_tokens: int | None = None,
) -> PlanningModel:
    """The model a simulator run's policy plans with (see the module docstring); ``seed``: the
    run's workload seed. The noiseless profile is simulated once per process for each engine (a
    few tens of milliseconds); the noise, the fit and the error are per run. With the run's
    longest prompt (``max_prompt_tokens``) the record also gives the error over the range the run
    uses (:func:`run_range_error`: batches up to the slots), not only over the profiling grid."""
    fit: dict[str, float] = {}
    if source == "engine-truth":
        base = truth
    else:
        prefill_rows, decode_rows = _grid_samples(
            truth, kv_capacity_tokens, block_size, max_num_seqs, max_num_batched_tokens
        )
        rng = np.random.default_rng([seed, NOISE_STREAM])
        pre, _ = _fit_noisy(prefill_rows, PROFILE_NOISE["prefill"], rng)
        dec, _ = _fit_noisy(decode_rows, PROFILE_NOISE["decode"], rng)
        base = LatencyModel(prefill=pre.coefficients, decode=dec.coefficients)
        fit = {
            "profile_noise_prefill": PROFILE_NOISE["prefill"],
            "profile_noise_decode": PROFILE_NOISE["decode"],
            "rmse_prefill_s": pre.rmse_s,
            "rmse_decode_s": dec.rmse_s,
            "mape_prefill": pre.mape,
            "mape_decode": dec.mape,
            "prefill_points": float(pre.points),
            "decode_points": float(dec.points),
        }
    factors: dict[str, float] = {}
    if error > 0:
        base, factors = _perturbed(base, error, seed)
    if source != "engine-truth":
        fit["error_vs_engine_prefill"] = _model_error(base.prefill, prefill_rows)
        fit["error_vs_engine_decode"] = _model_error(base.decode, decode_rows)
    run_range = run_range_error(base, truth, max_num_seqs, max_prompt_tokens) if max_prompt_tokens else None
    return PlanningModel(base, source, fit, error, factors, run_range)
