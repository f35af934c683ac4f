"""In-engine schedulers: schedlab's policies as vLLM scheduler classes (``--scheduler-cls``).

The vLLM server loads them from its own Python, so nothing is installed into the user's vLLM
environment: the server's ``PYTHONPATH`` must include schedlab's repository root, and the server
is started with ``--scheduler-cls <qualified name>``. Each in-engine scheduler is registered once,
as its client-side policy (runners.schedulers.in_engine.InEnginePolicy): the class attributes
``engine_class`` (the qualified name), ``engine_params`` (the model the class reads) and ``twin``
(the client-side policy with the same decisions) say the rest, so a user's file or package adds
one the same way (:func:`engine_pythonpath` gives its server the folders it imports from).

This module is importable WITHOUT vLLM (no vLLM import here): schedlab's CLI and pages read the
registry and the version check from it. The classes themselves (:mod:`.base`, :mod:`.dynamic_mem`)
import vLLM and run only inside the server.

Environment read by the classes inside the server (the launcher sets them):

* ``SCHEDLAB_ENGINE_PARAMS``: path of a JSON object of the policy's parameters (each class's
  ``Params`` model says which; unset: the defaults).
* ``SCHEDLAB_ENGINE_DECISIONS``: path of a JSON-lines file the class appends its decisions to
  (unset: decisions go to the server log only, as ``SCHEDLAB_DECISION {json}`` lines).
* ``SCHEDLAB_ENGINE_DECISION_INTERVAL_S``: at most one unchanged decision recorded per this many
  seconds (default 0.25; a changed running limit is always recorded).
* ``SCHEDLAB_ENGINE_VLLM_VERSION`` (test hook): the vLLM version the version check sees instead
  of the installed one, to exercise the refusal of an unsupported version.
* ``SCHEDLAB_ENGINE_FAIL_AT_STEP`` (test hook): the class raises inside ``schedule()`` at this step
  (1 = the first), to exercise a plugin that fails in the middle of a run.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from runners.engines.engine_decisions import DECISIONS_ENV
from runners.engines.latency_model import LatencyModel, PhaseCoefficients
from runners.errors import ConfigError
from runners.input_model import InputModel, field_error
from runners.paths import ROOT
from runners.schedulers.slo_aware import SLOPlanParams

#: vLLM releases the classes are tested against, as "major.minor" (any patch release of each).
#: The scheduler interface is not public ("compatibility may not be maintained"), so each new
#: minor release must be checked (tests/unit/test_vllm_scheduler.py) before it is added here.
SUPPORTED_VLLM_VERSIONS: tuple[str, ...] = ("0.32",)

#: Environment variable names (the contract with the launcher; see the module docstring).
PARAMS_ENV = "SCHEDLAB_ENGINE_PARAMS"
DECISION_INTERVAL_ENV = "SCHEDLAB_ENGINE_DECISION_INTERVAL_S"
VERSION_OVERRIDE_ENV = "SCHEDLAB_ENGINE_VLLM_VERSION"
FAIL_AT_STEP_ENV = "SCHEDLAB_ENGINE_FAIL_AT_STEP"


#: Per-request values the client sends with a request for the engine's scheduler class (vLLM's
#: ``vllm_xargs``; the class reads ``request.sampling_params.extra_args``). Flat names: vLLM takes
#: only numbers, strings and lists there.
PREDICTED_OUTPUT_ARG = "schedlab_predicted_output_tokens"  # predicted output length, tokens
TTFT_SLO_ARG = "schedlab_ttft_slo_s"  # the request's TTFT objective, seconds
TPOT_SLO_ARG = "schedlab_tpot_slo_s"  # the request's TPOT objective, seconds
E2E_SLO_ARG = "schedlab_e2e_slo_s"  # the request's end-to-end latency objective, seconds


def positive_number(value: Any) -> float | None:
    """``value`` as a finite float > 0, else None (absent, not a number, or out of range)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def sent_slos(extra_args: Mapping[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    """The TTFT, TPOT and E2E objectives (seconds) a client sent with a request in its
    ``sampling_params.extra_args`` (``TTFT_SLO_ARG``, ``TPOT_SLO_ARG``, ``E2E_SLO_ARG``); None for
    one not sent or not a positive finite number. What an engine class reads of a request's SLOs."""
    args = extra_args or {}
    ttft, tpot, e2e = (positive_number(args.get(name)) for name in (TTFT_SLO_ARG, TPOT_SLO_ARG, E2E_SLO_ARG))
    return ttft, tpot, e2e


def supported_version(version: str) -> bool:
    """True when ``version`` (e.g. "0.32.0", "0.32.1+cpu", "0.32.0rc1") is a release of a
    major.minor in SUPPORTED_VLLM_VERSIONS."""
    match = re.match(r"(\d+)\.(\d+)(?!\d)", version.strip())
    return match is not None and f"{int(match[1])}.{int(match[2])}" in SUPPORTED_VLLM_VERSIONS


def version_error(version: str | None) -> str | None:
    """None when vLLM ``version`` is supported, else the message to refuse it with."""
    if version is not None and supported_version(version):
        return None
    shown = "unknown" if version is None else repr(version)
    supported = ", ".join(f"{v}.x" for v in SUPPORTED_VLLM_VERSIONS)
    return (
        f"schedlab's in-engine schedulers support vLLM {supported}; this server runs vLLM {shown}. "
        "vLLM's scheduler interface is not public and changes between releases, so the plugin refuses "
        f"to run rather than schedule wrongly. Install vLLM {supported} in the server's environment, or "
        "run the policy's client-side twin instead (e.g. dynamic-mem for engine-dynamic-mem)"
    )


def _module_folder(module_name: str, folders: Sequence[str]) -> str | None:
    """The first of ``folders`` that holds top-level module or package ``module_name`` (found,
    not imported: the engine's module imports vLLM, which this Python may not have)."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(module_name, list(folders))
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin)
    return str(origin.parent.parent if spec.submodule_search_locations else origin.parent)


def engine_pythonpath(policy: Any) -> list[str]:
    """The folders the vLLM server's PYTHONPATH needs for in-engine ``policy``'s engine class:
    schedlab's repository root (every engine class may build on runners.schedulers.vllm.base),
    then the folder its top-level module is found in - looked for beside the policy's own file
    first (a user's file passed with --scheduler-path), then on this Python's path (an installed
    package). ConfigError naming scheduler.name when it is found nowhere."""
    qualified = str(getattr(policy, "engine_class", ""))
    top = qualified.split(".", 1)[0]
    folders = [str(ROOT)]
    if top == "runners":
        return folders
    module = sys.modules.get(policy.__module__)
    own = getattr(module, "__file__", None)
    candidates = ([str(Path(own).resolve().parent)] if own else []) + [entry or os.getcwd() for entry in sys.path]
    found = _module_folder(top, candidates)
    if found is None:
        raise ConfigError(
            "scheduler.name",
            f"{policy.name}: its engine class {qualified} is in module {top!r}, found neither beside "
            f"{own or policy.__module__} nor on this Python's path; put {top}.py next to the policy's file",
        )
    return folders + ([found] if found != str(ROOT) else [])


EngineOutputPrior = Literal["calibration", "given", "cold", "max_tokens"]


class EngineDynamicMemoryParams(InputModel):
    """Parameters of engine-dynamic-mem (000 Alg. 1 inside vLLM), read from the JSON object at
    ``SCHEDLAB_ENGINE_PARAMS``. Tokens are tokens; eps_m a probability."""

    b_max: int | None = Field(
        title="largest running limit (B_max)",
        default=None,
        gt=0,
        le=65_536,
        description="B_max: largest running limit, requests. Default: the engine's max_num_seqs; above it is "
        "refused (the engine has no more running slots)",
    )
    eps_m: float = Field(
        title="allowed KV overflow probability (eps_M)",
        default=0.05,
        ge=1e-9,
        le=1 - 1e-9,
        description="eps_M: allowed probability of KV overflow, in (0, 1)",
    )
    output_prior: EngineOutputPrior = Field(
        title="output-length prior",
        default="calibration",
        description="E[l_out] and Var l_out (tokens) - calibration: the output lengths of a calibration sample of "
        "the run's datasets that the run does not send, mixed by its task ratio (schedlab's launcher "
        "writes them to the engine as given moments); given: output_mean/output_std/output_count, pooled "
        "with finished requests; cold: prior_output_tokens until a request finishes, then the finished "
        "requests; max_tokens: those of the arrived requests' max_tokens - schedlab sends each request's "
        "target length as max_tokens, so this is an oracle of the run's own lengths (labelled as one)",
    )
    output_mean: float | None = Field(
        title="given output mean (tokens)",
        default=None,
        ge=0,
        le=10_000_000,
        description="output_prior given: mean output length, tokens",
    )
    output_std: float = Field(
        title="given output std (tokens)",
        default=0.0,
        ge=0,
        le=10_000_000,
        description="output_prior given: standard deviation of the output length, tokens",
    )
    output_count: int = Field(
        title="given moments' weight (requests)",
        default=100,
        ge=2,
        le=100_000_000,
        description="output_prior given: how many requests the given moments stand for "
        "(their weight against finished requests), at least 2",
    )
    prior_output_tokens: int = Field(
        title="cold output-length guess (tokens)",
        default=256,
        gt=0,
        le=10_000_000,
        description="E[l_out] before any finished request (cold), tokens",
    )

    @model_validator(mode="after")
    def _given_has_a_mean(self) -> "EngineDynamicMemoryParams":
        if self.output_prior == "given" and self.output_mean is None:
            raise field_error(type(self).__name__, "output_mean", "is required with output_prior 'given'", None)
        return self


def check_window(model: str, b_min: int, b_max: int, alpha: int | None) -> None:
    """ValidationError naming b_min or alpha unless B_min <= B_max and alpha < B_max - B_min
    (000 Alg. 2's search window; ``model`` names the parameters model in the error)."""
    if b_min > b_max:
        raise field_error(model, "b_min", f"must be at most B_max ({b_max})", b_min)
    if alpha is not None and alpha >= b_max - b_min:
        raise field_error(
            model,
            "alpha",
            f"must be smaller than the window B_max - B_min = {b_max} - {b_min} = {b_max - b_min}",
            alpha,
        )


class SLAWindowParams(InputModel):
    """000 Alg. 2's fields, shared by the client-side dynamic-sla (DynamicSLAParams) and the
    in-engine engine-dynamic-sla (EngineDynamicSLAParams): one definition, two models. Mixed into
    a model that has ``b_max`` (requests, None: the engine's max_num_seqs)."""

    d_sla_s: float = Field(
        title="decode latency target (D_SLA, s)",
        default=0.050,
        gt=0,
        le=3600.0,
        description="D_SLA: decode latency target (TPOT), seconds",
    )
    eps_s: float = Field(
        title="latency tolerance (eps_D, s)",
        default=0.005,
        ge=0,
        le=3600.0,
        description="eps_D: tolerance around D_SLA, seconds, smaller than d_sla_s",
    )
    alpha: int | None = Field(
        title="window gap (alpha)",
        default=None,
        gt=0,
        le=65_536,
        description="gap kept between b_low and b_high, smaller than the window B_max - B_min. Default: scaled to "
        "the window, B_max // 32 (8 at B_max 256), at least 2",
    )
    delta: int = Field(
        title="corrective step (delta)",
        default=2,
        gt=0,
        le=65_536,
        description="delta: corrective step against noise, requests",
    )
    b_min: int = Field(
        title="smallest batch (B_min)",
        default=1,
        gt=0,
        le=65_536,
        description="B_min: the smallest batch-size limit the window may reach, requests; at most B_max",
    )
    memory_cap: bool = Field(
        title="apply the memory cap",
        default=True,
        description="also apply Alg. 1's memory cap (paper: b = min of both)",
    )

    @model_validator(mode="after")
    def _bounds_in_order(self) -> "SLAWindowParams":
        name = type(self).__name__
        if self.eps_s >= self.d_sla_s:
            raise field_error(
                name,
                "eps_s",
                f"must be smaller than d_sla_s ({self.d_sla_s:g} s): a tolerance as "
                "large as the target leaves no 'too fast' side",
                self.eps_s,
            )
        b_max = getattr(self, "b_max", None)
        if b_max is not None:
            check_window(name, self.b_min, b_max, self.alpha)
        return self


class EngineDynamicSLAParams(SLAWindowParams, EngineDynamicMemoryParams):
    """Parameters of engine-dynamic-sla (000 Alg. 2 inside vLLM, capped by Alg. 1 with
    memory_cap): engine-dynamic-mem's and the window's (:class:`SLAWindowParams`), plus how many
    engine steps tau averages. Latencies in seconds, sizes in requests."""

    samples: int = Field(
        title="engine steps averaged",
        default=16,
        gt=0,
        le=100_000,
        description="tau: the engine's own step times averaged, over the last `samples` steps that "
        "ran decoding requests (each timed from its scheduling to its model output)",
    )


class EngineMCSFParams(InputModel):
    """Parameters of engine-mcsf (003 MC-SF inside vLLM), read from the JSON object at
    ``SCHEDLAB_ENGINE_PARAMS``. The predicted output lengths come with each request
    (``PREDICTED_OUTPUT_ARG``, else its max_tokens), not from here."""

    memory_fraction: float = Field(
        title="KV cache share planned for",
        default=1.0,
        gt=0,
        le=1,
        description="share of the KV cache MC-SF plans for (M = usable blocks x block size x this), in (0, 1]; "
        "as the client-side mcsf's memory_fraction",
    )


class EngineSLOAwareParams(SLOPlanParams):
    """Parameters of engine-slo-sa (004's SA plan applied inside vLLM), read from the JSON object
    at ``SCHEDLAB_ENGINE_PARAMS``: the plan's settings, the same fields as slo-sa's
    (:class:`~runners.schedulers.slo_aware.SLOPlanParams`), plus the latency model the plan
    scores with, which the launcher fills from the run's profile (:func:`launch_settings`), not
    the user. Each request's predicted output length and SLOs come with the request
    (``PREDICTED_OUTPUT_ARG``, ``TTFT_SLO_ARG``, ``TPOT_SLO_ARG``, ``E2E_SLO_ARG``)."""

    #: needs the run's latency model (eq. 14/15 coefficients, seconds) written by the launcher
    needs_latency_model: ClassVar[bool] = True
    #: the plan is applied by reordering the FCFS waiting queue (refused under priority)
    needs_fcfs_queue: ClassVar[bool] = True

    prefill: PhaseCoefficients | None = Field(
        title="prefill coefficients",
        default=None,
        description="eq. 14 prefill coefficients of the run's latency model (seconds); filled by the "
        "launcher from engine.profile",
    )
    decode: PhaseCoefficients | None = Field(
        title="decode coefficients",
        default=None,
        description="eq. 15 decode coefficients of the run's latency model (seconds); filled by the "
        "launcher from engine.profile",
    )

    @model_validator(mode="after")
    def _both_phases(self) -> "EngineSLOAwareParams":
        if (self.prefill is None) != (self.decode is None):
            missing = "prefill" if self.prefill is None else "decode"
            raise field_error(
                type(self).__name__,
                missing,
                "is required with the other phase's coefficients (the launcher writes both from engine.profile)",
                None,
            )
        return self


def load_params(model: type[InputModel], environ: "os._Environ[str] | dict[str, str] | None" = None) -> InputModel:
    """``model`` from the JSON object at ``$SCHEDLAB_ENGINE_PARAMS`` (defaults when unset).
    ValueError naming the file and the field when the file is unreadable or a value is refused."""
    environ = os.environ if environ is None else environ
    path = environ.get(PARAMS_ENV)
    if not path:
        return model()
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(f"schedlab in-engine scheduler: cannot read {PARAMS_ENV}={path}: {exc}") from None
    try:
        return model.model_validate(data)
    except ValueError as exc:
        raise ValueError(f"schedlab in-engine scheduler: bad parameters in {PARAMS_ENV}={path}: {exc}") from None


def launch_settings(
    policy: Any,
    params: InputModel,
    folder: Path,
    latency: LatencyModel | None = None,
    scheduling_policy: str = "fcfs",
    inherited_pythonpath: str | None = None,
) -> tuple[str, dict[str, str]]:
    """What a vLLM launch needs to run in-engine scheduler ``policy`` (its client policy class): its ``--scheduler-cls`` and
    the server environment (the parameters written as JSON into ``folder``, the decisions file
    per instance there: ``engine-decisions-{instance}.jsonl``, ``{instance}`` being replaced by the
    launcher), and its PYTHONPATH (:func:`engine_pythonpath`, then the PYTHONPATH it would inherit).
    Only the fields of the class's own model (the policy's ``engine_params``) are written: a
    client policy's parameters may add its own (e.g. engine-mcsf's output predictor), which the
    class's model, forbidding unknown fields, would refuse. A model that ``needs_latency_model``
    (engine-slo-sa) gets the run's ``latency`` model's eq. 14/15 coefficients (``prefill``,
    ``decode``, seconds); ConfigError naming engine.profile when the run has none, and naming
    engine.scheduling_policy when a model that ``needs_fcfs_queue`` would start under priority."""
    name = policy.name
    model = policy.engine_params
    if model is not None and getattr(model, "needs_fcfs_queue", False) and scheduling_policy != "fcfs":
        raise ConfigError(
            "engine.scheduling_policy",
            f"{name} applies its plan by reordering vLLM's FCFS waiting "
            f"queue; expected 'fcfs', got {scheduling_policy!r} (under 'priority' vLLM orders the "
            "queue by the priorities requests were sent with, and the plan could not be applied)",
        )
    data = params.model_dump(mode="json", include=set(model.model_fields) if model is not None else None)
    if model is not None and getattr(model, "needs_latency_model", False):
        if latency is None:
            raise ConfigError(
                "engine.profile",
                f"{name} plans with a latency model and this run has none: set "
                "engine.profile to a profile of this engine from 'python -m runners profile'",
            )
        data.update(prefill=latency.prefill.model_dump(mode="json"), decode=latency.decode.model_dump(mode="json"))
    written = model.model_validate(data) if model is not None else params
    folder.mkdir(parents=True, exist_ok=True)
    params_file = folder / "engine-scheduler-params.json"
    params_file.write_text(written.model_dump_json(indent=2) + "\n", encoding="utf-8")
    inherited = inherited_pythonpath if inherited_pythonpath is not None else os.environ.get("PYTHONPATH", "")
    return str(policy.engine_class), {
        PARAMS_ENV: str(params_file),
        DECISIONS_ENV: str(folder / "engine-decisions-{instance}.jsonl"),
        "PYTHONPATH": os.pathsep.join([*engine_pythonpath(policy), *filter(None, inherited.split(os.pathsep))]),
    }


def attach_instructions(policy: Any) -> str:
    """How to start a server elsewhere with in-engine scheduler ``policy`` (its client policy
    class; for an attach config)."""
    name = policy.name
    return (
        f"{name} runs inside vLLM, so schedlab must launch the server (engine kind vllm). To use it with a "
        f"server started elsewhere, start that server with PYTHONPATH=<schedlab repository> and --scheduler-cls "
        f"{policy.engine_class} (vLLM {', '.join(v + '.x' for v in SUPPORTED_VLLM_VERSIONS)}), then attach "
        f"with scheduler fcfs"
    )
