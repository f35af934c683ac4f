"""Engine profiles: latency coefficients plus KV-cache and batching limits, as presets or files.

Profile file format (JSON or YAML; the real-engine profiler writes the same):

    schema: schedlab.profile/1
    name: qwen2.5-7b-2xv100-vllm
    source: where the numbers come from
    units: seconds
    # either the linear step model (what the profiler fits by default) ...
    step_model: {kind: linear-step, fixed_s: ..., per_prefill_token_s: ..., per_decode_request_s: ...,
                 per_context_token_s: ..., per_request_cpu_s: ...,     # seconds per unit
                 idle_start_s: ..., per_prefill_context_token_s: ...}  # optional, 0 when absent
    # ... or the SLO-aware paper's phase model (its preset, older profiles):
    prefill: {alpha: ..., beta: ..., gamma: ..., delta: ...}   # eq. 14, seconds
    decode:  {alpha: ..., beta: ..., gamma: ..., delta: ...}   # eq. 15, seconds
    kv_capacity_tokens: 813056        # or give model + gpu and it is computed
    model: {layers, kv_heads, head_dim, dtype_bytes, weight_bytes}
    gpu: {gpus, gpu_memory_gib, memory_fraction, activation_reserve_gib}
    block_size: 16
    max_num_seqs: 256
    max_num_batched_tokens: 8192
    serving_overhead: {request_s: ..., per_prompt_token_s: ...}   # optional: the front end's delay, seconds
    fit: {...}                        # optional: fit errors written by the profiler
    fidelity: {...}                   # optional: bench/sim_fidelity.py's report (real engine vs simulator)

A profile carries exactly one latency model. With ``step_model`` the ``prefill``/``decode``
attributes are that model's eq. 14/15 view (equal on pure steps) and are not written to the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator

from runners import paths
from runners.engines.kv_cache import GPUBudget, ModelShape, kv_capacity_tokens
from runners.engines.latency_model import (
    BASE_STEP_TERMS,
    MIN_POINTS_PER_TERM,
    MIN_STEP_POINTS,
    LatencyModel,
    LinearStepModel,
    PhaseCoefficients,
    ServingOverhead,
)
from runners.errors import ConfigError, format_validation_error
from runners.input_model import InputModel

PROFILE_SCHEMA = "schedlab.profile/1"


def latency_model_problem(data: dict) -> str | None:
    """Why a profile mapping carries no single, well-fitted latency model ("field: message"), or
    None. A step model whose ``fit.points`` (a count, or counts per step kind) is below
    MIN_STEP_POINTS (len(BASE_STEP_TERMS) x MIN_POINTS_PER_TERM) was fitted on too few steps for its terms."""
    if data.get("step_model") is not None:
        if data.get("prefill") is not None or data.get("decode") is not None:
            return "step_model: give either step_model or prefill + decode (eq. 14-15), not both"
        fit = data.get("fit")
        points = fit.get("points") if isinstance(fit, dict) else None
        try:
            total = sum(points.values()) if isinstance(points, dict) else points
        except TypeError:
            return "fit.points: expected a number of measured steps, or one per step kind"
        needed = MIN_STEP_POINTS
        if isinstance(total, (int, float)) and not isinstance(total, bool) and total < needed:
            return (
                f"fit.points: the step model was fitted on {total:g} measured steps; its {len(BASE_STEP_TERMS)} "
                f"terms need at least {needed} ({MIN_POINTS_PER_TERM} per term)"
            )
        return None
    missing = [name for name in ("prefill", "decode") if data.get(name) is None]
    if len(missing) == 2:
        return "step_model: Field required (or prefill and decode, the eq. 14-15 phase model)"
    if missing:
        return f"{missing[0]}: Field required (the phase model needs both prefill and decode)"
    return None


class EngineProfile(InputModel):
    """What the simulator and the predictors know about one engine + model + hardware."""

    model_config = ConfigDict(frozen=True)

    schema_: str = Field(default=PROFILE_SCHEMA, alias="schema")
    name: str
    source: str = ""
    units: Literal["seconds"] = "seconds"
    prefill: PhaseCoefficients | None = None
    decode: PhaseCoefficients | None = None
    step_model: LinearStepModel | None = None
    kv_capacity_tokens: int | None = Field(default=None, gt=0, le=1_000_000_000, description="tokens")
    model: ModelShape | None = None
    gpu: GPUBudget | None = None
    block_size: int = Field(default=16, gt=0, le=4096)
    max_num_seqs: int = Field(default=256, gt=0, le=65_536)
    max_num_batched_tokens: int = Field(default=8192, gt=0, le=10_000_000)
    serving_overhead: ServingOverhead | None = None
    fit: dict[str, Any] | None = None
    fidelity: dict[str, Any] | None = None
    quality: dict[str, Any] | None = Field(
        default=None,
        description="the profiler's quality gate (runners.app.profile_quality.quality_record): threshold, "
        "out-of-fold error and verdict per step kind, phases measured again, accepted_noisy (written only "
        "with --accept-noisy), the probe's repeatability and the machine's load. Absent: made before the gate",
    )
    limit_sources: dict[str, str] | None = Field(
        default=None,
        description="where each limit came from when the profiler measured this engine (kv_capacity_tokens, "
        "block_size, max_num_seqs, max_num_batched_tokens: 'discovered (/metrics)', 'launch config "
        "(--max-num-seqs)', 'vLLM default, not discovered: ...'); a simulated run shows it beside the value. "
        "Absent: the value is this file's or the profile default",
    )

    @model_validator(mode="after")
    def _capacity_known(self) -> "EngineProfile":
        problem = latency_model_problem(
            {"step_model": self.step_model, "prefill": self.prefill, "decode": self.decode, "fit": self.fit}
        )
        if problem:  # exactly one latency model: step_model, or prefill + decode
            raise ValueError(problem)
        if self.kv_capacity_tokens is None and (self.model is None or self.gpu is None):
            raise ValueError("give kv_capacity_tokens, or both model and gpu to compute it")
        if self.step_model is not None:
            prefill, decode = self.step_model.phases()
            object.__setattr__(self, "prefill", prefill)
            object.__setattr__(self, "decode", decode)
        return self

    @property
    def latency_kind(self) -> str:
        """``"linear-step"`` or ``"phase"``: which latency model the profile carries."""
        return "phase" if self.step_model is None else self.step_model.kind

    def latency_model(self) -> LatencyModel:
        if self.step_model is not None:
            return LatencyModel.of_step(self.step_model, self.serving_overhead)
        assert self.prefill is not None and self.decode is not None
        return LatencyModel(prefill=self.prefill, decode=self.decode, overhead=self.serving_overhead)

    def capacity_tokens(self) -> int:
        """KV-cache capacity in tokens: given directly, else computed from model shape and GPU."""
        if self.kv_capacity_tokens is not None:
            return self.kv_capacity_tokens
        assert self.model is not None and self.gpu is not None
        return kv_capacity_tokens(self.model, self.gpu, self.block_size)

    def to_file(self, path: str | Path) -> Path:
        """Write as JSON (``.json``) or YAML (anything else)."""
        target = Path(path)
        data = self.model_dump(by_alias=True, exclude_none=True)
        if self.step_model is not None:  # prefill/decode are its derived view, not the file's content
            data.pop("prefill", None)
            data.pop("decode", None)
        text = json.dumps(data, indent=2) if target.suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
        target.write_text(text, encoding="utf-8")
        return target


#: Qwen2.5-7B (28 layers, 4 KV heads of dim 128, 7.61 B parameters in fp16) on 2 x V100 32 GB
#: with vLLM at gpu-memory-utilization 0.9, the SLO-aware paper's testbed. Latency coefficients
#: are its Table 2 (milliseconds there, seconds here).
QWEN25_7B_2XV100 = EngineProfile(
    name="qwen2.5-7b-2xv100-vllm",
    source="SLO-aware scheduling paper (Huang et al.) Table 2; KV capacity from Qwen2.5-7B's shape",
    prefill=PhaseCoefficients.from_milliseconds(0.1, 5.7, 0.01, 43.67),
    decode=PhaseCoefficients.from_milliseconds(0.0002, 0.275, 0.00088, 15.85),
    model=ModelShape(layers=28, kv_heads=4, head_dim=128, dtype_bytes=2, weight_bytes=7.61e9 * 2),
    gpu=GPUBudget(gpus=2, gpu_memory_gib=32, memory_fraction=0.9),
    block_size=16,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
)

PRESETS: dict[str, EngineProfile] = {QWEN25_7B_2XV100.name: QWEN25_7B_2XV100}


def load_profile(path: str | Path, field: str = "engine.profile") -> EngineProfile:
    """Read a profile file; on any problem a :class:`ConfigError` for the config ``field`` that
    names the file (``engine.profile: p.json: prefill.beta: Field required``)."""
    file = Path(path)

    def bad(message: str) -> ConfigError:
        return ConfigError(field, f"{file}: {message}")

    if not paths.is_file(file):
        raise bad("profile file not found (expected JSON or YAML, schema schedlab.profile/1)")
    kind = "JSON" if file.suffix == ".json" else "YAML"
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise bad(f"not UTF-8 text (byte {exc.start}); expected a {kind} profile") from None
    except OSError as exc:
        raise bad(f"could not be read ({exc.strerror or exc})") from None
    try:
        data = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise bad(f"not valid {kind}: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise bad(f"nested too deeply to be a profile ({kind})") from None
    if not isinstance(data, dict):
        raise bad("expected a mapping with step_model (or prefill and decode) and kv_capacity_tokens")
    if data.get("schema", PROFILE_SCHEMA) != PROFILE_SCHEMA:
        raise bad(f"schema is {data.get('schema')!r}; expected {PROFILE_SCHEMA!r}")
    problem = latency_model_problem(data)
    if problem:
        raise bad(problem)
    try:
        return EngineProfile.model_validate(data)
    except ValidationError as exc:
        raise bad(format_validation_error(exc)) from exc
    except RecursionError:
        raise bad("nested too deeply to be a profile") from None


def resolve_profile(preset: str | None, profile_path: str | None) -> EngineProfile:
    """The profile file if given, else the named preset."""
    if profile_path:
        return load_profile(profile_path)
    if preset not in PRESETS:
        raise ConfigError("engine.preset", f"unknown preset {preset!r}; expected one of: {', '.join(PRESETS)}")
    return PRESETS[preset]


def quality_note(fit: dict[str, Any] | None, quality: dict[str, Any] | None) -> str:
    """One line on how far a profile can be trusted, shown beside figures made with it (issue 48):
    its out-of-fold error per step kind (``fit.cross_validation``) and, from its ``quality`` record
    (runners.app.profile_quality.quality_record), "NOISY profile" with the phases that failed the
    profiler's quality gate where it was written with ``--accept-noisy``, "passed the quality gate",
    or "made before the quality gate" (no record)."""
    cv = (fit or {}).get("cross_validation") or {}
    errors = ", ".join(f"{k} {cv[k]['mape']:.0%}" for k in ("prefill", "decode", "mixed") if k in cv)
    text = f"fit error (out of fold) {errors}" if errors else "fit error not recorded"
    if quality and quality.get("accepted_noisy"):
        failed = ", ".join(quality.get("failed") or {})
        text += f"; NOISY profile: failed the quality gate ({failed}), written with --accept-noisy"
    elif quality and quality.get("passed"):
        text += "; passed the quality gate"
    elif not quality:
        text += "; made before the quality gate"
    return text
