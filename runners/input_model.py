"""The base of every configuration model: what no field may accept, checked once for all.

Every config model (run, workload, SLO, engine, profile, scheduler parameters) derives from
:class:`InputModel`, so a value is refused at validation, with its field named, before anything
is written:

- a float must be finite: ``inf``/``nan`` (YAML ``.inf``, JSON ``Infinity``, the strings "inf"
  and "nan") is refused in every float field (pydantic's ``allow_inf_nan=False``); nested models
  (the GPU budget, the model shape, predictor parameters) are InputModels too;
- a boolean is not a number: ``true`` is refused for an int or float field (pydantic would take
  it as 1);
- an integer must fit in 64 bits (numpy and the numba kernels hold them as int64).

Upper bounds that protect the machine (requests, instances, KV capacity ...) are on each field.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

INT64_MAX = 2**63 - 1
#: Largest seed any field takes: numba's ``np.random.seed`` is 32-bit, and a chain adds to it.
MAX_SEED = 2**31 - 1


def _is_number_type(annotation: Any, kinds: tuple[type, ...] = (int, float)) -> bool:
    """True if ``annotation`` is int or float, possibly Optional / Annotated / a union with them."""
    if annotation in kinds:
        return True
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType) or origin is typing.Annotated:
        args = typing.get_args(annotation)
        return any(_is_number_type(arg, kinds) for arg in (args[:1] if origin is typing.Annotated else args))
    return False


@functools.cache
def _number_fields(cls: type[BaseModel]) -> dict[str, tuple[bool, bool]]:
    """Input key (name and alias) -> (is an integer field, bounded on both sides), for number fields."""
    fields: dict[str, tuple[bool, bool]] = {}
    for name, info in cls.model_fields.items():
        if _is_number_type(info.annotation):
            bounds = {
                side
                for rule in info.metadata
                for side in ("le", "lt", "ge", "gt")
                if getattr(rule, side, None) is not None
            }
            bounded = bool(bounds & {"le", "lt"}) and bool(bounds & {"ge", "gt"})
            fields[name] = (_is_number_type(info.annotation, (int,)), bounded)
            if info.alias:
                fields[info.alias] = fields[name]
    return fields


def _check_numbers(cls: type[BaseModel], data: dict, loc: tuple[Any, ...], errors: list[InitErrorDetails]) -> None:
    """Booleans given for numbers, and integers beyond 64 bits in unbounded fields, in ``data``
    (input for ``cls``)."""
    number_fields = _number_fields(cls)
    for key, value in data.items():
        if key in number_fields:
            is_int, bounded = number_fields[key]
            if isinstance(value, bool):
                kind = "an integer" if is_int else "a number"
                errors.append(_error("bool_not_number", f"expected {kind}, not a boolean", (*loc, key), value))
            elif isinstance(value, int) and abs(value) > INT64_MAX and not bounded:  # a bound says it better
                errors.append(_error("int_too_large", "expected an integer that fits in 64 bits", (*loc, key), value))


def _error(kind: str, message: str, loc: tuple[Any, ...], value: Any) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError(kind, message), loc=loc, input=value)


def field_error(model: str, field: str, message: str, value: Any) -> ValidationError:
    """A ValidationError located at ``field`` (for a check across fields, raised from a model
    validator, so the error names the field to change rather than the whole model)."""
    return ValidationError.from_exception_data(model, [_error("value_error", message, (field,), value)])


class InputModel(BaseModel):
    """A model of user input: unknown keys, non-finite floats, booleans given for numbers and
    integers beyond 64 bits are refused (see the module doc). A model's validator is built when it
    first validates, not when its module loads (``defer_build``): a page that lists the engines
    and schedulers validates few of their configs (issue 42)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        errors: list[InitErrorDetails] = []
        _check_numbers(cls, data, (), errors)
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return data
