"""Turning the Launch page's fields into run configs, with every error tied to its field.

The page holds flat values keyed by dotted config paths (``workload.requests``,
``engine.max_num_seqs``, ``scheduler.slo-sa.max_batch`` ...). :func:`build_job` assembles them
into one :class:`RunConfig` per scheduler (or per scheduler x rate for a sweep), validates them
with the same models the CLI uses, and returns errors keyed by those same paths, so the page can
show each one under its widget. Blank values (None or "") mean "the default". Number fields
arrive as the text the user typed (the page draws them as text inputs, so what is validated is
what the field shows: a browser number input keeps its last valid value while it shows an invalid
one); the models parse them, and text that is no number, or out of bounds, is an error under its
field like any other. With the Seeds
field (``trials.seeds``) the launch is one study, planned by :func:`runners.study.runner.plan_study`
exactly as the CLI's ``--seeds`` (every scheduler x rate x seed, paired by seed). The page's
defaults (:data:`FORM_DEFAULTS`) and its offered-load preview (:func:`preview_load`,
:mod:`runners.run.capacity_estimate`) live here too, so tests can run what the page would.
"""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from runners import paths
from runners.app import preflight
from runners.app.jobs import JobSpec, StudySpec, SweepSpec, new_job_spec
from runners.engines.adapters import ADAPTERS
from runners.errors import ConfigError, DatasetError, SchedlabError, error_location, shortened, validation_message
from runners.metrics.catalog import metric
from runners.registry import check_engine_for, parameter_specs, scheduler_class, usable_schedulers
from runners.run.capacity_estimate import OfferedLoad, offered_load, real_engine_load
from runners.run.config import RunConfig, set_dotted
from runners.store.result_store import DEFAULT_RESULTS_DIR
from runners.study.runner import MAX_RUNS_UNCONFIRMED, check_size, new_study_id, parse_seeds, plan_study
from runners.workload.slo import TASKS

UPLOADS_FOLDER = ".uploads"
LIST_FIELDS = {"engine.gpus", "engine.urls"}
ARGS_FIELDS = {"engine.extra_args"}
#: Form fields that are not config paths (read by build_job itself).
FORM_ONLY = ("scheduler.", "sweep.", "job.", "trials.")
#: The CLI flags runners.study.runner names in its errors -> the Launch page's fields.
STUDY_FLAGS = {
    "--baseline": "trials.baseline",
    "--seeds": "trials.seeds",
    "--rates": "sweep.rates",
    "--run-id": "trials.seeds",
    "trials.schedulers": "schedulers",
}


#: The Launch page's defaults (dotted field -> value), where they differ from the run config's.
#: Chosen so the pre-selected schedulers can differ: 2.5 req/s is about 130% of the simulator's
#: estimated capacity with 16 slots (1.94 req/s, runners.run.capacity_estimate), so requests queue
#: (the project default, 256 slots at 4 req/s, never queued: identical decisions); five seeds of
#: 200 requests each make a study of a few seconds' simulation work, about 15 s at 100x pace
#: (tests/integration/test_launch_study.py checks that the decisions differ at every seed).
FORM_DEFAULTS: dict[str, Any] = {
    "engine.kind": "sim",
    "engine.max_num_seqs": 16,
    "workload.requests": 200,
    "workload.arrival.rate": 2.5,
    "trials.seeds": "5",
    "trials.baseline": "",
}
DEFAULT_SCHEDULERS: tuple[str, ...] = ("fcfs", "slo-sa")
#: Default speed of a simulated run, simulated seconds per wall second (the page's "100x").
DEFAULT_PACE = 100.0


#: The simulator's fields on the form (config paths; ``engine.pace`` from its Speed slider,
#: ``engine.scheduling_policy`` from its priority box).
SIM_FIELDS = (
    "engine.preset",
    "engine.profile",
    "engine.instances",
    "engine.kv_capacity_tokens",
    "engine.max_num_seqs",
    "engine.pace",
    "engine.scheduling_policy",
    "engine.planning_model",
    "engine.planning_error",
)
#: The fields of every engine schedlab launches, before its adapter's own (FormField.path).
LAUNCH_FIELDS = ("engine.model", "engine.instances", "engine.gpus", "engine.profile", "engine.extra_args")
#: The fields of attached servers.
ATTACH_FIELDS = ("engine.urls", "engine.model", "engine.api_key_env", "engine.profile", "engine.scheduling_policy")


def engine_fields(kind: str) -> frozenset[str]:
    """The ``engine.*`` config paths the form offers for engine ``kind`` (``engine.kind`` too): a
    field of another engine (the simulator's 16 slots after a switch to vLLM) never reaches a
    run of this one (:func:`build_job` drops it)."""
    if kind == "sim":
        own: tuple[str, ...] = SIM_FIELDS
    elif (adapter := ADAPTERS.get(kind)) is not None and adapter.config is not None:
        own = LAUNCH_FIELDS + tuple(form_field.path for form_field in adapter.form_fields)
    else:
        own = ATTACH_FIELDS
    return frozenset(("engine.kind", *own))


def engine_field_defaults(kind: str) -> dict[str, str]:
    """What the engine fields shared between engines show once engine ``kind`` is chosen: blank
    (the engine's own default) except one instance and, on the simulator, its 16 slots
    (:data:`FORM_DEFAULTS`); the page writes these when the engine changes."""
    values = {"engine.instances": "1"}
    if kind == "sim":
        values["engine.max_num_seqs"] = field_text(FORM_DEFAULTS["engine.max_num_seqs"])
    return values


def for_engine(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the ``engine.*`` fields that the chosen engine (``engine.kind``,
    default sim) does not offer (:func:`engine_fields`)."""
    offered = engine_fields(str(values.get("engine.kind") or "sim"))
    return {key: value for key, value in values.items() if not key.startswith("engine.") or key in offered}


#: The Launch page's traffic shapes (issue 31): the form value ``ui:traffic`` -> its label.
TRAFFIC_SHAPES: dict[str, str] = {
    "datasets": "datasets (chat + code), arrival process",
    "system-prompt": "datasets with a shared system prompt",
    "sessions": "multi-turn conversations (sessions)",
    "trace": "production trace (its own timing and lengths)",
}
#: The form's fields that only one traffic shape uses (dotted path prefixes).
_TRAFFIC_FIELDS: dict[str, tuple[str, ...]] = {
    "datasets": ("workload.trace.", "workload.system_prompt.", "workload.multi_turn."),
    "system-prompt": ("workload.trace.", "workload.multi_turn."),
    "sessions": ("workload.trace.", "workload.system_prompt."),
    "trace": (
        "workload.system_prompt.",
        "workload.multi_turn.",
        "workload.arrival.",
        "workload.chat.",
        "workload.code.",
        "workload.ratio.",
    ),
}
#: The multi-turn fields of the "sessions" traffic shape: config path -> label on the form (their
#: help and defaults are the models', runners.workload.sessions: :func:`session_field`).
SESSION_FIELDS: dict[str, str] = {
    "workload.multi_turn.max_turns": "Max turns per session",
    "workload.multi_turn.think_time.distribution": "Think time distribution",
    "workload.multi_turn.think_time.mean_s": "Think time mean (s)",
    "workload.multi_turn.context_tokens": "Context per turn (tokens)",
}
_THINK_DISTRIBUTION_HELP = (
    "seconds a user waits between a reply and their next message: exponential draws them at random around the "
    "mean; constant waits exactly the mean (0: the next turn at once)"
)


@dataclass(frozen=True)
class SessionField:
    """One multi-turn field as the Launch page draws it: its label, help, the model's default, and
    its choices (a choice field; () for a number)."""

    path: str
    label: str
    help: str
    default: Any
    choices: tuple[str, ...] = ()


def session_field(path: str) -> SessionField:
    """The multi-turn field ``path`` (a key of :data:`SESSION_FIELDS`): the help is the model
    field's description with its bounds, the default and the choices the model's."""
    info = field_info(path)
    default = getattr(info, "default", None)
    if path.endswith(".distribution"):
        choices = tuple(typing.get_args(info.annotation)) if info is not None else ()
        return SessionField(path, SESSION_FIELDS[path], _THINK_DISTRIBUTION_HELP, default, choices)
    description = (info.description or "") if info is not None else ""
    help_text = "; ".join(part for part in (description, bounds_text(info)) if part)
    return SessionField(path, SESSION_FIELDS[path], help_text, default)


#: (label, help) of the Requests field per traffic shape, where it counts something else than requests.
REQUESTS_FIELD: dict[str, tuple[str, str]] = {
    "sessions": (
        "Sessions",
        "conversations sent, each turn by turn (workload.requests counts sessions with multi-turn traffic); "
        "each sends up to the max turns, so the run has more requests than sessions",
    ),
}
#: Said under the offered-load estimate of a sessions launch (the estimate counts first turns).
SESSIONS_LOAD_NOTE = (
    "With sessions the rate is of sessions (first turns), and the estimate counts first turns only: each "
    "session's later turns (longer prompts, sent after the reply plus a think time) add load it leaves out."
)


def requests_field(traffic: str) -> tuple[str, str | None]:
    """(label, help) of the form's ``workload.requests`` field under traffic shape ``traffic``:
    'Sessions' for multi-turn conversations (:data:`REQUESTS_FIELD`), else 'Requests'."""
    return REQUESTS_FIELD.get(traffic, ("Requests", None))


def rate_label(traffic: str) -> str:
    """The label of the form's ``workload.arrival.rate`` field under traffic shape ``traffic``:
    with sessions the arrival process times first turns, so the rate is of sessions."""
    return "Rate (sessions/s)" if traffic == "sessions" else "Rate (req/s)"


def for_traffic(values: Mapping[str, Any], traffic: str) -> dict[str, Any]:
    """``values`` without the fields that traffic shape ``traffic`` (a key of
    :data:`TRAFFIC_SHAPES`) does not use: a trace brings its own arrivals, lengths and tasks, so
    the datasets, mix and arrival fields go; the other shapes drop the trace's fields, and only
    "sessions" keeps the multi-turn ones. With "sessions" the run is multi-turn even when every
    multi-turn field is blank (their defaults): the think-time distribution is then its default."""
    dropped = _TRAFFIC_FIELDS.get(traffic, _TRAFFIC_FIELDS["datasets"])
    kept = {key: value for key, value in values.items() if not key.startswith(dropped)}
    if traffic == "sessions" and all(_blank(kept.get(path)) for path in SESSION_FIELDS):
        distribution = "workload.multi_turn.think_time.distribution"
        kept[distribution] = getattr(field_info(distribution), "default", None)
    return kept


#: Names of the form's places that hold errors but are no single input.
GROUP_LABELS = {
    "engine": "Engine",
    "engine.kind": "Engine",
    "engine.ports": "Server ports",
    "workload": "Workload",
    "workload.ratio": "Chat and code shares",
    "workload.trace": "Production trace",
    "workload.system_prompt": "Shared system prompt",
    "workload.multi_turn": "Multi-turn sessions",
    "workload.multi_turn.think_time": "Think time",
    "slo": "SLOs",
    "slo.preset": "SLO preset",
    "schedulers": "Schedulers to compare",
    "trials.confirm": "Confirmation",
    "config": "Settings",
}


def group_label(path: str) -> str:
    """How the form names ``path`` where no input of its own labels it: :data:`GROUP_LABELS`,
    ``chat SLO`` for ``slo.chat``, else the last part of the path in words."""
    if path in GROUP_LABELS:
        return GROUP_LABELS[path]
    parts = path.split(".")
    if len(parts) == 2 and parts[0] == "slo":
        return f"{parts[1]} SLO"
    return parts[-1].replace("_", " ")


_WHOLE_TYPES = {"int_parsing", "int_type", "int_from_float"}
_NUMBER_TYPES = {"float_parsing", "float_type", "finite_number"}
_BOUND_TYPES = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]
    return []


def field_info(path: str, engine_kind: str = "sim") -> FieldInfo | None:
    """The model field behind the form's ``path``: a scheduler parameter
    (``scheduler.<name>.<param>``), or a run config path (``engine.max_num_seqs`` of engine
    ``engine_kind``'s config); None when there is none."""
    parts = path.split(".")
    if parts[0] == "scheduler" and len(parts) == 3:
        try:
            return scheduler_class(parts[1]).Params.model_fields.get(parts[2])
        except SchedlabError:
            return None
    model: type[BaseModel] | None = RunConfig
    info = None
    for part in parts:
        if model is None or (info := model.model_fields.get(part)) is None:
            return None
        models = _models_in(info.annotation)
        tagged = [m for m in models if "kind" in m.model_fields and m.model_fields["kind"].default == engine_kind]
        model = tagged[0] if tagged else models[0] if len(models) == 1 else None
    return info


def _whole(info: FieldInfo | None) -> bool:
    return info is not None and int in {info.annotation, *typing.get_args(info.annotation)}


def bounds_text(info: FieldInfo | None) -> str:
    """A field's bounds in words: ``from 1 to 1,000,000``, ``> 0``, ``<= 1``; "" without any.
    A whole-number field's ``> 0`` reads ``>= 1``."""
    if info is None:
        return ""
    whole = _whole(info)
    low = high = None
    low_open = high_open = False
    for item in info.metadata:
        if getattr(item, "gt", None) is not None:
            low, low_open = item.gt, True
        if getattr(item, "ge", None) is not None:
            low, low_open = item.ge, False
        if getattr(item, "lt", None) is not None:
            high, high_open = item.lt, True
        if getattr(item, "le", None) is not None:
            high, high_open = item.le, False
    if whole and low is not None and low_open:
        low, low_open = low + 1, False
    if whole and high is not None and high_open:
        high, high_open = high - 1, False

    def shown(value: Any) -> str:
        return f"{value:,}" if isinstance(value, int) else f"{value:g}"

    if low is not None and high is not None and not low_open and not high_open:
        return f"from {shown(low)} to {shown(high)}"
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {shown(low)}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {shown(high)}")
    return " and ".join(parts)


def form_message(item: Mapping[str, Any], info: FieldInfo | None = None) -> str:
    """One validation error as the form says it under the field (its label goes before it): a
    plain sentence with what was expected and what was typed, ``expected a whole number from 1
    to 1,000,000, got 'abc'``, not pydantic's wording; ``info``: the field (its type and
    bounds), when known. Errors of other kinds keep their message (:func:`validation_message`)."""
    kind = str(item.get("type", ""))
    value = item.get("input")
    got = "" if value is None or isinstance(value, (dict, list)) else f", got {shortened(repr(value))}"
    bounds = bounds_text(info)
    bounds = f" {bounds}" if bounds else ""
    number = "a whole number" if kind in _WHOLE_TYPES or _whole(info) else "a number"
    if kind in _WHOLE_TYPES | _NUMBER_TYPES:
        return f"expected {number}{bounds}{got}"
    if kind in _BOUND_TYPES:
        ctx = item.get("ctx") or {}
        if not bounds:
            sign = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
            bounds = f" {sign} {next(iter(ctx.values()), '')}"
        return f"expected {number}{bounds}{got}"
    if kind in ("bool_parsing", "bool_type"):
        return f"expected yes or no{got}"
    if kind == "literal_error":
        return f"expected one of {(item.get('ctx') or {}).get('expected', 'the listed values')}{got}"
    if kind == "missing":
        return "required: expected a value"
    return validation_message(item)


def _message(item: Mapping[str, Any], path: str, data: Mapping[str, Any]) -> str:
    """:func:`form_message` of an error at form field ``path`` of the config ``data``."""
    kind = (data.get("engine") or {}).get("kind", "sim") if isinstance(data.get("engine"), dict) else "sim"
    return form_message(item, field_info(path, str(kind)))


def default_form_values(schedulers: Sequence[str] = DEFAULT_SCHEDULERS) -> dict[str, Any]:
    """What the Launch page submits when nothing is changed: :data:`FORM_DEFAULTS`, the default
    pace, and every parameter of ``schedulers`` at its registry default (as the page draws it)."""
    values: dict[str, Any] = {
        key: field_text(value) if isinstance(value, (int, float)) else value for key, value in FORM_DEFAULTS.items()
    }
    values["engine.pace"] = DEFAULT_PACE
    for name in schedulers:
        for spec in parameter_specs(name):
            default = spec.default
            if spec.kind not in ("choice", "bool"):
                default = field_text(default)
            values[f"scheduler.{name}.{spec.name}"] = default
    return values


def field_text(value: Any) -> str:
    """How a number (or other default) is written into a text field: ``""`` for None, ``2.5``,
    ``16``, ``0.05`` (no trailing zeros, no exponent below a million)."""
    if value is None:
        return ""
    if isinstance(value, float) and not isinstance(value, bool):
        return f"{value:.15g}"
    return str(value)


def parameter_label(name: str, field: str) -> tuple[str, str]:
    """(label, help) of scheduler ``name``'s parameter ``field`` on the form: the Params field's
    ``title`` as the label when it has one (the field name otherwise), and its description as the
    help, with the default and the config key (``scheduler.params.<field>`` in a config file)."""
    info = scheduler_class(name).Params.model_fields[field]
    label = info.title or field
    default = "blank" if info.default is None else repr(info.default)
    description = (info.description or "").strip()
    if description and not description.endswith("."):
        description += "."
    parts = [description, f"Default: {default}.", f"Config key: `{field}`."]
    return label, " ".join(part for part in parts if part)


@dataclass(frozen=True)
class UnavailableNote:
    """The schedulers an engine cannot run, said once under the scheduler list: ``text`` (one
    line) and ``details`` (each scheduler's full reason, for a tooltip)."""

    schedulers: list[str]
    text: str
    details: str


def unavailable_note(engine_kind: str) -> UnavailableNote | None:
    """Which schedulers cannot run on ``engine_kind`` (registry.check_engine_for, the check the
    CLI and :func:`build_job` make), in one sentence however many they are (the in-engine ones
    share their reason: they run inside a vLLM that schedlab launches); None when all can."""
    reasons: dict[str, str] = {}
    for name in usable_schedulers():  # one that does not load is not offered at all
        try:
            check_engine_for(name, engine_kind)
        except ConfigError as exc:
            reasons[name] = exc.message
    if not reasons:
        return None
    inside = [name for name in reasons if scheduler_class(name).in_engine]
    others = [f"{name} ({reasons[name]})" for name in reasons if name not in inside]
    parts = (
        [f"{', '.join(inside)}: they run inside vLLM, so schedlab must launch the server (engine vllm)"]
        if inside
        else []
    )
    text = f"Not offered with engine {engine_kind}: " + "; ".join(parts + others) + "."
    return UnavailableNote(list(reasons), text, "\n\n".join(reasons.values()))


def results_link(spec: JobSpec) -> dict[str, str]:
    """The Results page's query parameters that open what ``spec`` ran: its study (compared with
    the study's baseline, the first scheduler unless another was chosen), or its runs with the
    first run of the chosen baseline scheduler as the baseline (the first run when none was
    chosen); ``label``: the job's label."""
    params = {"label": spec.label} if spec.label else {}
    if spec.study is not None:
        return {"study": spec.study.study_id, **params}
    run_ids = [str(run.run_id) for run in spec.runs if run.run_id]
    chosen = [str(run.run_id) for run in spec.runs if run.run_id and run.scheduler.name == spec.baseline]
    return {"runs": ",".join(run_ids), "baseline": (chosen or run_ids)[0], **params}


#: Said before launch when the Seeds field is blank (issue 27 defect 13).
SINGLE_RUNS_WARNING = (
    "Seeds is blank: each scheduler runs once, at seed 0, with no study. Its figures carry no 95% interval "
    "and no verdict (differences of one seed can flip with the next); give a count, e.g. 5, for a paired study."
)


def single_runs_warning(values: dict[str, Any]) -> str | None:
    """:data:`SINGLE_RUNS_WARNING` when the launch makes single runs (the Seeds field blank), else None."""
    text = values.get("trials.seeds")
    return SINGLE_RUNS_WARNING if text is None or not str(text).strip() else None


def study_size(values: dict[str, Any], schedulers: Sequence[str]) -> int | None:
    """How many runs the launch makes as a study (schedulers x seeds x rates); None when the
    Seeds field is blank or not valid yet (the launch names the error)."""
    errors: dict[str, str] = {}
    seeds = _seeds(values, errors)
    rates = (
        _float_list(str(values.get("sweep.rates") or ""), "sweep.rates", errors)
        if values.get("sweep.enabled")
        else [None]
    )
    if not seeds or errors:
        return None
    return len(seeds) * max(len(schedulers), 1) * max(len(rates), 1)


def preview_load(values: dict[str, Any]) -> list[OfferedLoad]:
    """The offered load of the form's settings before launch, one per arrival rate (the sweep's
    rates when a sweep is on); [] while the engine or workload fields do not validate yet (the
    launch shows those errors under their fields). With multi-turn sessions each sentence ends with
    :data:`SESSIONS_LOAD_NOTE` (the estimate counts first turns only)."""
    errors: dict[str, str] = {}
    data = _nested(values, errors)
    rates: list[float | None] = [None]
    if values.get("sweep.enabled"):
        rates = list(_float_list(str(values.get("sweep.rates") or ""), "sweep.rates", errors))
    if errors:
        return []
    kind = data.get("engine", {}).get("kind", "sim")
    if kind != "sim":
        return [real_engine_load(str(kind))]
    workload = data.get("workload", {})
    if any(isinstance(workload.get(task), dict) and workload[task].get("kind") == "hub" for task in TASKS):
        return [
            OfferedLoad(
                None,
                None,
                None,
                None,
                "The offered load against the engine's capacity is not estimated "
                "before launch for a hub dataset: its lengths are known once it is downloaded.",
            )
        ]
    loads = []
    for rate in rates:
        config = copy.deepcopy(data)
        if rate is not None:
            set_dotted(config, "workload.arrival.rate", rate)
        try:
            loads.append(offered_load(RunConfig.model_validate(config)))
        except (ValidationError, SchedlabError, ValueError):
            return []
    if isinstance(workload.get("multi_turn"), dict):
        loads = [replace(load, text=f"{load.text} {SESSIONS_LOAD_NOTE}") for load in loads]
    return loads


@dataclass
class FormResult:
    """A validated job (``spec``), or the errors by dotted field; ``general`` holds errors that
    belong to no single field."""

    spec: JobSpec | None = None
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.spec is not None and not self.errors


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _float_list(text: str, key: str, errors: dict[str, str]) -> list[float]:
    values = []
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        try:
            number = float(part)
        except ValueError:
            errors[key] = f"{part!r} is not a number; expected rates in req/s separated by commas, e.g. 1, 2, 4"
            return []
        if number <= 0:
            errors[key] = f"{part} is not > 0; every rate must be a positive number of requests per second"
            return []
        values.append(number)
    if not values:
        errors[key] = "expected at least one rate (req/s), e.g. 1, 2, 4"
    return sorted(set(values))


def _nested(values: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in values.items():
        if _blank(value) or key.startswith(FORM_ONLY):
            continue
        if isinstance(value, str) and key not in ARGS_FIELDS:
            value = value.strip()
        if key.startswith("slo.") and key.endswith(".tpot_ms"):  # the form takes TPOT in its display unit
            value = _number_or_text(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = value / metric("tpot_s.mean").scale  # ms -> seconds, the catalog's scale
            key = key[: -len("_ms")] + "_s"
        elif key in LIST_FIELDS and isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif key in ARGS_FIELDS and isinstance(value, str):
            try:  # split like a shell would quote, but nothing is ever run through a shell
                value = shlex.split(value)
            except ValueError as exc:
                errors[key] = f"cannot split into arguments ({exc}); quote arguments with spaces"
                continue
        set_dotted(data, key, value)
    return data


def _number_or_text(value: Any) -> Any:
    """A finite number typed as text as a float; anything else unchanged (the model names it)."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return number if number == number and abs(number) != float("inf") else value
    return value


def _error_key(loc: tuple[Any, ...]) -> str:
    return error_location(loc) or "config"


def _scheduler_params(name: str, values: dict[str, Any], errors: dict[str, str]) -> dict[str, Any]:
    prefix = f"scheduler.{name}."
    params = {
        key[len(prefix) :]: value.strip() if isinstance(value, str) else value
        for key, value in values.items()
        if key.startswith(prefix) and not _blank(value)
    }
    try:
        model = scheduler_class(name).Params.model_validate(params)
    except ValidationError as exc:
        for item in exc.errors():
            path = prefix + _error_key(item.get("loc", ()))
            errors[path] = _message(item, path, {})
        return params
    return {key: getattr(model, key) for key in params}  # "0.95" typed -> 0.95


def _dataset_error_key(exc: DatasetError, data: dict[str, Any]) -> str:
    workload = data.get("workload", {})
    for task in TASKS:
        source = workload.get(task, {})
        if exc.source in (source.get("path"), source.get("hub_id")) or exc.source.endswith(f"{task}"):
            return f"workload.{task}.{'hub_id' if source.get('kind') == 'hub' else 'path'}"
    return "workload"


def _seeds(values: dict[str, Any], errors: dict[str, str]) -> list[int]:
    """The study's seeds from the Seeds field (``trials.seeds``: a count N = seeds 0..N-1, or a
    comma-separated list; the CLI's parser); [] when blank (no study) or wrong."""
    text = values.get("trials.seeds")
    if _blank(text):
        return []
    if not _blank(values.get("workload.seed")):
        errors["trials.seeds"] = "cannot be combined with workload.seed; expected one of them"
        return []
    try:
        return parse_seeds(str(text).strip(), flag="trials.seeds")
    except ConfigError as exc:
        errors["trials.seeds"] = exc.message
        return []


def _study(
    data: dict[str, Any],
    values: dict[str, Any],
    schedulers: list[str],
    params: dict[str, dict[str, Any]],
    seeds: list[int],
    rates: list[float | None],
    sweep_id: str | None,
    errors: dict[str, str],
) -> tuple[list[RunConfig], StudySpec | None]:
    """The members of the study (every scheduler x rate x seed) as :func:`runners.study.runner.plan_study`
    plans them, each with its own scheduler's parameters; errors keyed by field."""
    trials: dict[str, Any] = {
        "seeds": seeds,
        "schedulers": schedulers,
        "rates": [rate for rate in rates if rate is not None],
    }
    if not _blank(values.get("trials.baseline")):
        trials["baseline"] = str(values["trials.baseline"]).strip()
    config = {**copy.deepcopy(data), "scheduler": {"name": schedulers[0], "params": {}}, "trials": trials}
    if sweep_id is not None:
        config["sweep_id"] = sweep_id
    try:
        base = RunConfig.model_validate(config)
    except ValidationError as exc:
        for item in exc.errors():
            path = _error_key(item.get("loc", ()))
            errors.setdefault(path, _message(item, path, data))
        return [], None
    try:
        plan = plan_study(base, new_study_id())
    except ConfigError as exc:
        errors[STUDY_FLAGS.get(exc.field, exc.field)] = exc.message
        return [], None
    try:
        check_size(plan, bool(values.get("trials.confirm")))
    except ConfigError:
        errors["trials.confirm"] = (
            f"the study has {len(plan.members):,} runs ({len(plan.schedulers)} schedulers x {len(plan.seeds)} seeds x "
            f"{max(len(plan.rates), 1)} rates), more than {MAX_RUNS_UNCONFIRMED:,}; tick the confirmation box to run "
            "it anyway, or use fewer seeds, schedulers or rates"
        )
        return [], None
    configs = [
        member.config.model_copy(
            update={
                "scheduler": member.config.scheduler.model_copy(update={"params": params.get(member.scheduler, {})})
            }
        )
        for member in plan.members
    ]
    return configs, StudySpec(
        study_id=plan.study_id, baseline=plan.baseline, schedulers=plan.schedulers, seeds=plan.seeds, rates=plan.rates
    )


def _sweep(
    values: dict[str, Any], data: dict[str, Any], errors: dict[str, str]
) -> tuple[SweepSpec | None, list[float | None], str | None]:
    """(the sweep, its arrival rates in req/s, its sweep id) when the form asks for a rate sweep;
    (None, [None], None) otherwise: one run per scheduler at the workload's own rate."""
    sweep = None
    rates: list[float | None] = [None]
    if values.get("sweep.enabled"):
        rates = list(_float_list(str(values.get("sweep.rates") or ""), "sweep.rates", errors))
        if data.get("workload", {}).get("arrival", {}).get("process") in ("all-at-once", "replay"):
            errors["workload.arrival.process"] = (
                "a rate sweep needs a rate-driven arrival process (poisson, gamma or constant)"
            )
        try:
            if rates:
                sweep = SweepSpec(rates_rps=rates, target_attainment=float(values.get("sweep.target") or 0.9))
        except ValidationError as exc:
            errors["sweep.target"] = "; ".join(form_message(item) for item in exc.errors())
    if not rates:
        rates = [None]
    sweep_id = None
    if sweep is not None:
        digest = hashlib.sha1(repr(sorted(values.items(), key=str)).encode()).hexdigest()[:6]
        sweep_id = f"sweep-{digest}"
    return sweep, rates, sweep_id


def _single_runs(
    data: dict[str, Any],
    schedulers: list[str],
    params: dict[str, dict[str, Any]],
    rates: list[float | None],
    sweep_id: str | None,
    errors: dict[str, str],
) -> list[RunConfig]:
    """One run per scheduler (x sweep rate) when the launch is not a study; stops at the first
    config that does not validate, with its errors keyed by field."""
    configs: list[RunConfig] = []
    for rate in rates:
        for name in schedulers or ["fcfs"]:
            config = {**copy.deepcopy(data), "scheduler": {"name": name, "params": params.get(name, {})}}
            if rate is not None:
                config["sweep_id"] = sweep_id
                set_dotted(config, "workload.arrival.rate", rate)
            try:
                configs.append(RunConfig.model_validate(config))
            except ValidationError as exc:
                for item in exc.errors():
                    path = _error_key(item.get("loc", ()))
                    errors.setdefault(path, _message(item, path, data))
                return configs
    return configs


def _launch_errors(
    configs: list[RunConfig], schedulers: list[str], data: dict[str, Any], check_workload: bool
) -> dict[str, str]:
    """What stops the job from starting although each config validated: a scheduler the engine
    cannot run, or (``check_workload``) a workload that cannot be built."""
    try:  # every scheduler of the job, not only the first run's, which prepare_run checks below
        for name in schedulers:
            check_engine_for(name, configs[0].engine.kind)
    except ConfigError as exc:
        return {"schedulers": exc.message}
    errors: dict[str, str] = {}
    if check_workload:
        # the run machinery (simulator, recorder, pandas) loads when a launch is checked, not with
        # the Launch page (issue 42)
        from runners.run.benchmark import prepare_run

        try:
            prepare_run(configs[0])
        except ConfigError as exc:
            errors[exc.field] = exc.message
        except DatasetError as exc:
            errors[_dataset_error_key(exc, data)] = str(exc)
        except SchedlabError as exc:
            errors["workload"] = str(exc)
    return errors


def _job_label(values: dict[str, Any], schedulers: list[str], study: StudySpec | None) -> str:
    """The form's job label, or the schedulers' names (and the seed count of a study)."""
    label = str(values.get("job.label") or "").strip() or " vs ".join(schedulers)
    if study is not None and not str(values.get("job.label") or "").strip():
        label += f" · {len(study.seeds)} seed{'s' if len(study.seeds) > 1 else ''}"
    return label


def build_job(
    values: dict[str, Any], schedulers: list[str], check_workload: bool = True, check_machine: bool = True
) -> FormResult:
    """Validate the form and build the job; nothing is started here.

    ``values``: dotted field -> value (see module doc); ``sweep.enabled`` (bool),
    ``sweep.rates`` (text "1, 2, 4") and ``sweep.target`` (0-1) make a rate sweep;
    ``trials.seeds`` (text: a count N = seeds 0..N-1, or a list "3, 7, 11") makes the launch one
    study of every scheduler (x rate) at every seed, compared with ``trials.baseline`` (blank:
    the first scheduler); more than :data:`runners.study.runner.MAX_RUNS_UNCONFIRMED` runs need
    ``trials.confirm``. ``slo.<task>.tpot_ms`` is the TPOT limit in milliseconds.
    ``job.label`` names the job. ``check_workload`` also builds the workload once, so a
    malformed dataset file or an impossible SLO preset is reported before launch;
    ``check_machine`` refuses a launch this machine cannot run (:func:`runners.app.preflight.refusals`:
    the engine not installed in its Python, a model folder that does not exist, a busy port, a
    malformed server URL). ``engine.*`` fields the chosen engine does not offer are dropped
    (:func:`for_engine`)."""
    values = for_engine(values)
    errors: dict[str, str] = {}
    if not schedulers:
        errors["schedulers"] = "choose at least one scheduler"
    data = _nested(values, errors)
    params = {name: _scheduler_params(name, values, errors) for name in schedulers}
    seeds = _seeds(values, errors)
    sweep, rates, sweep_id = _sweep(values, data, errors)
    configs: list[RunConfig] = []
    study = None
    if seeds and schedulers and not errors:
        configs, study = _study(data, values, schedulers, params, seeds, rates, sweep_id, errors)
        if errors:
            return FormResult(errors=_form_keys(errors, values))
    baseline = None
    if study is None:
        configs = _single_runs(data, schedulers, params, rates, sweep_id, errors)
        baseline = _single_runs_baseline(values, schedulers, errors)
    if errors or not configs:
        return FormResult(errors=_form_keys(errors or {"schedulers": "choose at least one scheduler"}, values))
    errors = _launch_errors(configs, schedulers, data, check_workload)
    if check_machine:  # every run of a job has the same engine
        errors = {**preflight.refusals(configs[0]), **errors}
    if errors:
        return FormResult(errors=_form_keys(errors, values))
    label = _job_label(values, schedulers, study)
    # every run records the job's label: RunConfig.notes, saved as config.json's config.notes and
    # summary.json's notes (existing fields of the result contract); notes given in the form win
    configs = [config if config.notes else config.model_copy(update={"notes": label}) for config in configs]
    return FormResult(spec=new_job_spec(configs, label=label, sweep=sweep, study=study, baseline=baseline))


def _single_runs_baseline(values: dict[str, Any], schedulers: list[str], errors: dict[str, str]) -> str | None:
    """The Baseline field for single runs (the scheduler "Compare these runs" opens against):
    None when blank; an error under the field when it is not one of the chosen schedulers."""
    if _blank(values.get("trials.baseline")):
        return None
    baseline = str(values["trials.baseline"]).strip()
    if baseline not in schedulers:
        errors["trials.baseline"] = f"{baseline!r} is not one of the chosen schedulers ({', '.join(schedulers)})"
        return None
    return baseline


def _form_keys(errors: dict[str, str], values: dict[str, Any]) -> dict[str, str]:
    """Errors keyed by the form's own fields: a TPOT limit given in ms (``slo.<task>.tpot_ms``)
    gets the errors of ``slo.<task>.tpot_s``."""
    keyed = {}
    for key, message in errors.items():
        if key.endswith(".tpot_s") and (alias := key[: -len("_s")] + "_ms") in values:
            key = alias
        keyed[key] = message
    return keyed


def save_upload(name: str, data: bytes, results_root: str | Path = DEFAULT_RESULTS_DIR) -> Path:
    """Keep an uploaded dataset under ``results/.uploads/`` (named by content hash) and return
    its path, for a ``workload.<task>.path`` of kind 'file'."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name) or "upload.jsonl"
    folder = Path(results_root) / UPLOADS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:12]}-{safe}"
    if not paths.exists(path):
        path.write_bytes(data)
    return path
