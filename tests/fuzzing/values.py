"""Generated values: the config fields (read from the models, so new fields are fuzzed too) and
the awkward values thrown at them. Everything is drawn from a ``random.Random`` the caller
seeds, so a run of the suite is reproducible."""

from __future__ import annotations

import random
import typing
from dataclasses import dataclass
from typing import Any

NON_FINITE = ["inf", "-inf", "nan", ".inf", "-.inf", ".nan", "Infinity", "1e999", "-1e999"]
HUGE_INTS = [10**30, 2**63, 2**63 - 1, 2**64, -(2**63), 10**18, 10**9, 10**7]
#: ``--set`` texts (parsed as YAML by the CLI) of every awkward kind.
SET_TEXTS = [
    *NON_FINITE,
    *(str(v) for v in HUGE_INTS),
    "-1",
    "-0.5",
    "0",
    "0.0",
    "1e-300",
    "1e-9",
    "5e-324",
    "-0",
    "true",
    "false",
    "yes",
    "no",
    "null",
    "~",
    "",
    " ",
    "abc",
    "[]",
    "[1, 2]",
    "{}",
    "{a: 1}",
    "'5'",
    '"inf"',
    "0x10",
    "1_000",
    "1:1",
    "2026-01-01",
    "!!binary aGk=",
    "&a [*a]",
    "[[[[[[[[[[]]]]]]]]]]",
    "ü∂ƒ©˙∆",
    "\u202e",
    "\x00",
    "a" * 5000,
    "{" * 200,
    "- - - -",
    "?",
    "*",
    "|\n  x",
]
#: Awkward values for JSON / YAML config files (real types, not texts).
JSON_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    0.5,
    -0.5,
    1e-300,
    10**30,
    2**63,
    2**64,
    -(2**63),
    float("inf"),
    float("-inf"),
    float("nan"),
    "",
    "abc",
    "inf",
    "5",
    [],
    [1, 2],
    {},
    {"a": 1},
    [[[]]],
    "ü" * 3,
    "x" * 3000,
]
#: Short, valid values per field kind (to combine with awkward ones).
GOOD: dict[str, list[Any]] = {
    "workload.requests": [3, 4, 5],
    "workload.seed": [0, 1, 7],
    "workload.arrival.rate": [0.5, 2, 10],
    "workload.arrival.burstiness": [0.5, 1, 3],
    "engine.instances": [1, 2],
    "engine.max_num_seqs": [4, 16],
}


@dataclass(frozen=True)
class Field:
    """One config leaf: ``dotted`` path and its kind (int, float, bool, str, choice, mapping)."""

    dotted: str
    kind: str
    choices: tuple[str, ...] = ()

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float")


def _kind(annotation: Any) -> tuple[str, tuple[str, ...]]:
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    first = args[0]
    if typing.get_origin(first) is typing.Literal:
        return "choice", tuple(str(v) for v in typing.get_args(first))
    if first is bool:
        return "bool", ()
    if first is int:
        return "int", ()
    if first is float:
        return "float", ()
    if first is str:
        return "str", ()
    origin = typing.get_origin(first)
    if origin in (dict, dict):
        return "mapping", ()
    if origin in (list, list):
        return "list", ()
    return "other", ()


def _walk(model: Any, prefix: str) -> list[Field]:
    from pydantic import BaseModel

    fields: list[Field] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        annotation = info.annotation
        models = [
            a
            for a in (typing.get_args(annotation) or (annotation,))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if prefix == "" and name == "engine":
            from runners.engines.sim_config import SimulatorConfig

            models = [SimulatorConfig]
        if models:
            fields.extend(_walk(models[0], f"{prefix}{key}."))
        else:
            kind, choices = _kind(annotation)
            fields.append(Field(f"{prefix}{key}", kind, choices))
    return fields


def config_fields() -> list[Field]:
    """Every leaf of the run config for the simulator engine, from the pydantic models."""
    from runners.run.config import RunConfig

    return [f for f in _walk(RunConfig, "") if f.dotted != "scheduler.params"]


def scheduler_fields() -> dict[str, list[Field]]:
    """Each scheduler's parameters as ``scheduler.params.<name>`` fields."""
    from runners.registry import SCHEDULERS

    result = {}
    for name, cls in SCHEDULERS.items():
        result[name] = [Field(f"scheduler.params.{f.dotted}", f.kind, f.choices) for f in _walk(cls.Params, "")]
    return result


def awkward_text(rng: random.Random) -> str:
    """One awkward ``--set`` value text."""
    roll = rng.random()
    if roll < 0.08:
        return str(rng.choice(HUGE_INTS) * rng.choice([1, -1]))
    if roll < 0.12:
        return "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(1, 12)))
    if roll < 0.15:
        return rng.choice(["x", "é", "∞"]) * rng.choice([300, 4096])
    return rng.choice(SET_TEXTS)


def good_text(field: Field, rng: random.Random) -> str | None:
    """A plausible valid value for ``field`` as ``--set`` text, or None if there is none to give."""
    if field.dotted in GOOD:
        return str(rng.choice(GOOD[field.dotted]))
    if field.kind == "choice":
        return rng.choice(field.choices)
    if field.kind == "bool":
        return rng.choice(["true", "false"])
    return None


def is_non_finite_text(text: str) -> bool:
    """Would YAML or pydantic read ``text`` as an infinite or NaN number?"""
    return text.strip().lower().lstrip("+-") in {"inf", ".inf", "nan", ".nan", "infinity", "1e999"}
