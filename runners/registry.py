"""The scheduler and engine names (a :class:`runners.registries.Registry` each). The CLI and the
dashboard list from here, so adding a scheduler is: write the class, add its name and
``"module:Class"`` to BUILT_IN_SCHEDULERS."""

from __future__ import annotations

import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

# the engine kinds live beside the engines; imported here so the UI and CLI find both lists in one place
from runners.engines.kinds import ENGINES, EngineEntry, engine_entry  # noqa: F401
from runners.errors import ConfigError, SchedlabError, format_validation_error
from runners.registries import Registry
from runners.schedulers.base import SchedulerPolicy

#: Every built-in scheduler: (name, "module:Class"). Classes are imported on first use, so listing
#: names or running FCFS does not load slo-sa's numba kernels or the vLLM plugin.
BUILT_IN_SCHEDULERS: tuple[tuple[str, str], ...] = (
    ("fcfs", "runners.schedulers.fcfs:FCFSPolicy"),
    ("static", "runners.schedulers.static_batching:StaticBatchingPolicy"),
    ("slo-sa", "runners.schedulers.slo_aware:SLOAwarePolicy"),
    ("slo-exhaustive", "runners.schedulers.slo_aware:SLOExhaustivePolicy"),
    ("dynamic-mem", "runners.schedulers.dynamic_batching:DynamicMemoryPolicy"),
    ("dynamic-sla", "runners.schedulers.dynamic_batching:DynamicSLAPolicy"),
    ("scls", "runners.schedulers.slice_level:SCLSPolicy"),
    ("mcsf", "runners.schedulers.memory_constrained:MCSFPolicy"),
    ("alpha-protect", "runners.schedulers.memory_constrained:AlphaProtectPolicy"),
    ("alpha-beta-clear", "runners.schedulers.memory_constrained:AlphaBetaClearPolicy"),
    ("prefix-affinity", "runners.schedulers.prefix_affinity:PrefixAffinityPolicy"),
    ("engine-dynamic-mem", "runners.schedulers.in_engine:EngineDynamicMemoryPolicy"),
    ("engine-dynamic-sla", "runners.schedulers.in_engine:EngineDynamicSLAPolicy"),
    ("engine-slo-sa", "runners.schedulers.in_engine:EngineSLOAwarePolicy"),
    ("engine-mcsf", "runners.schedulers.in_engine:EngineMCSFPolicy"),
)


def _check_policy(name: str, item: object) -> None:
    """SchedlabError unless ``item`` is a SchedulerPolicy subclass whose ``name`` is ``name``."""
    if not (isinstance(item, type) and issubclass(item, SchedulerPolicy)):
        raise SchedlabError(f"scheduler {name!r}: {item!r} is not a SchedulerPolicy class")
    if item.name != name:
        raise SchedlabError(f"scheduler {name!r}: the class {item.__qualname__} calls itself {item.name!r}")


#: Why a scheduler of a user's file, module or entry point was not added (one line each, naming
#: the source): filled when the registry is first asked about names (runners.schedulers.discovery).
SCHEDULER_PROBLEMS: list[str] = []


def _discover_schedulers(registry: Registry[type[SchedulerPolicy[Any]]]) -> None:
    """Add the schedulers of installed packages' entry points and of ``SCHEDLAB_SCHEDULER_PATH``."""
    from runners.schedulers.discovery import discover

    SCHEDULER_PROBLEMS[:] = discover(registry, _check_policy)


SCHEDULERS: Registry[type[SchedulerPolicy[Any]]] = Registry(
    "scheduler", "scheduler.name", discover=_discover_schedulers
)
for _name, _target in BUILT_IN_SCHEDULERS:
    SCHEDULERS.register_deferred(_name, _target, _check_policy)


def usable_schedulers() -> list[str]:
    """The registered scheduler names whose classes load, in registration order (what the CLI
    and the Launch page offer); one that does not load (an entry point whose module is broken)
    is left out and its reason added to :data:`SCHEDULER_PROBLEMS`, once."""
    names = []
    for name in SCHEDULERS:
        try:
            SCHEDULERS[name]
        except SchedlabError as exc:
            if str(exc) not in SCHEDULER_PROBLEMS:
                SCHEDULER_PROBLEMS.append(str(exc))
            continue
        names.append(name)
    return names


def scheduler_class(name: str) -> type[SchedulerPolicy[Any]]:
    return SCHEDULERS.lookup(name)


def in_engine_policy(name: str) -> type[SchedulerPolicy[Any]]:
    """The registered client-side policy class of in-engine scheduler ``name`` (its
    ``engine_class``, ``engine_params`` and ``twin``: runners.schedulers.in_engine.InEnginePolicy);
    KeyError listing the in-engine ones when ``name`` is none of them."""
    cls = SCHEDULERS.get(name) if name in SCHEDULERS else None
    if cls is None or not cls.in_engine or not getattr(cls, "engine_class", ""):
        known = [other for other in usable_schedulers() if SCHEDULERS[other].in_engine]
        raise KeyError(f"unknown in-engine scheduler {name!r}; known: {', '.join(sorted(known))}")
    return cls


def check_engine_for(scheduler: str, engine_kind: str) -> None:
    """ConfigError naming ``scheduler.name`` when ``scheduler`` cannot run on an engine of
    ``engine_kind``: an in-engine scheduler needs a vLLM that schedlab launches (the error says
    how to start such a server elsewhere)."""
    if scheduler_class(scheduler).in_engine and engine_kind != "vllm":
        from runners.schedulers.vllm import attach_instructions

        raise ConfigError("scheduler.name", attach_instructions(scheduler_class(scheduler)))


def make_policy(name: str, params: dict[str, Any] | None = None) -> SchedulerPolicy[Any]:
    """A fresh policy object with validated parameters (ConfigError naming the parameter)."""
    cls = scheduler_class(name)
    try:
        validated = cls.Params.model_validate(params or {})
    except ValidationError as exc:
        raise ConfigError("scheduler.params", format_validation_error(exc, prefix="scheduler.params")) from exc
    return cls(validated)


def scheduler_parameters(name: str) -> dict[str, dict[str, Any]]:
    """Each parameter's default and description, for help text and forms."""
    cls = scheduler_class(name)
    return {
        field: {"default": info.default, "description": info.description or ""}
        for field, info in cls.Params.model_fields.items()
    }


@dataclass(frozen=True)
class ParameterSpec:
    """One scheduler parameter, described for a form: ``kind`` is int, float, bool, choice or
    str; ``optional`` means None (blank) is allowed; bounds are pydantic's gt/ge/lt/le."""

    name: str
    kind: str
    default: Any
    description: str
    optional: bool = False
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return (args[0] if len(args) == 1 else annotation), len(args) < len(typing.get_args(annotation))
    return annotation, False


def parameter_specs(name: str) -> list[ParameterSpec]:
    """The parameters of scheduler ``name`` with types and bounds, so a UI can draw one input
    per parameter without knowing the scheduler."""
    specs = []
    for field, info in scheduler_class(name).Params.model_fields.items():
        annotation, optional = _unwrap(info.annotation)
        choices: tuple[Any, ...] = ()
        if typing.get_origin(annotation) is Literal:
            kind, choices = "choice", typing.get_args(annotation)
        elif annotation is bool:
            kind = "bool"
        elif annotation is int:
            kind = "int"
        elif annotation is float:
            kind = "float"
        else:
            kind = "str"
        minimum = maximum = None
        for rule in info.metadata:
            for attribute in ("gt", "ge"):
                if getattr(rule, attribute, None) is not None:
                    minimum = float(getattr(rule, attribute))
            for attribute in ("lt", "le"):
                if getattr(rule, attribute, None) is not None:
                    maximum = float(getattr(rule, attribute))
        specs.append(
            ParameterSpec(field, kind, info.default, info.description or "", optional, choices, minimum, maximum)
        )
    return specs


def scheduler_params(name: str, params: dict[str, Any], schedulers: Sequence[str]) -> dict[str, Any]:
    """The parameters of ``params`` (``scheduler.params``) that scheduler ``name`` takes: in a
    study of several schedulers each gets the ones it has (``batch_size`` goes to the batching
    schedulers only). ConfigError for a parameter that none of ``schedulers`` takes."""

    def accepted(scheduler: str) -> set[str]:
        fields = scheduler_class(scheduler).Params.model_fields
        return set(fields) | {info.alias for info in fields.values() if info.alias}

    unused = [key for key in params if not any(key in accepted(other) for other in schedulers)]
    if unused:
        raise ConfigError(
            f"scheduler.params.{unused[0]}",
            f"no scheduler of the study takes it ("
            f"{', '.join(schedulers)}); see 'python -m runners "
            "schedulers' for each one's parameters",
        )
    mine = accepted(name)
    return {key: value for key, value in params.items() if key in mine}
