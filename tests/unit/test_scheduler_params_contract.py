"""A contract every registered scheduler keeps (issue 16): its parameters' defaults are valid, a
subclass never widens a choice its parent restricts (a ``Literal`` stays a ``Literal`` of no more
values: ``output_predictor: str`` once let ``'gausian'`` through and took the gaussian path), a
value outside a choice is refused naming the field, and a fresh policy decides nothing on an
empty state."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel, ValidationError

from runners.engines.profile import PRESETS
from runners.registry import SCHEDULERS, make_policy
from runners.schedulers.base import InstanceInfo, SchedulerPolicy
from runners.schedulers.fcfs import FCFSParams
from runners.schedulers.memory_constrained import AlphaBetaParams, AlphaParams, AlphaProtectPolicy, MemoryParams
from runners.schedulers.slice_level import SCLSParams


def choices(annotation: object) -> tuple | None:
    """The values of a ``Literal`` annotation (also inside ``Optional``), else None."""
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        found = [choices(arg) for arg in typing.get_args(annotation)]
        literal = [values for values in found if values is not None]
        return tuple(value for values in literal for value in values) if literal else None
    return None


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_defaults_are_valid_and_no_subclass_widens_a_choice(name):
    params = SCHEDULERS[name].Params
    params()  # the defaults validate
    for base in params.__mro__[1:]:
        if not (isinstance(base, type) and issubclass(base, BaseModel)) or base is BaseModel:
            continue
        for field, info in base.model_fields.items():
            allowed = choices(info.annotation)
            if allowed is None or field not in params.model_fields:
                continue
            ours = choices(params.model_fields[field].annotation)
            assert ours is not None, f"{name}: {params.__name__}.{field} widens {base.__name__}'s choice {allowed}"
            assert set(ours) <= set(allowed), f"{name}: {params.__name__}.{field} adds {set(ours) - set(allowed)}"


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_a_value_outside_a_choice_is_refused_naming_the_field(name):
    params = SCHEDULERS[name].Params
    for field, info in params.model_fields.items():
        if choices(info.annotation) is None:
            continue
        with pytest.raises(ValidationError, match=field):
            params.model_validate({field: "not-one-of-the-choices"})


def test_mcsf_refuses_a_misspelt_predictor():
    with pytest.raises(ValidationError, match="output_predictor"):
        SCHEDULERS["mcsf"].Params.model_validate({"output_predictor": "gausian"})


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_a_fresh_policy_decides_nothing_on_an_empty_state(name):
    policy = make_policy(name)
    latency = next(iter(PRESETS.values())).latency_model()
    policy.start([InstanceInfo(0, 16_000, 16, 64, latency)], 0.0)
    decision = policy.decide(0.0)
    assert list(decision.dispatches) == []


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_a_policy_reads_the_params_model_the_form_draws(name):
    cls = SCHEDULERS[name]
    assert type(cls().params) is cls.Params  # the registry's Params is what a fresh policy holds


def test_a_policy_whose_params_is_not_its_type_argument_is_refused():
    with pytest.raises(TypeError, match="Wrong.Params is SCLSParams, expected FCFSParams"):

        class Wrong(SchedulerPolicy[FCFSParams]):
            Params = SCLSParams

    with pytest.raises(TypeError, match="WrongAlpha.Params is MemoryParams, expected AlphaBetaParams"):

        class WrongAlpha(AlphaProtectPolicy[AlphaBetaParams]):
            Params = MemoryParams

    class Narrower(SchedulerPolicy[MemoryParams]):  # a subclass of the type argument is fine
        Params = AlphaParams

    assert type(Narrower().params) is AlphaParams
