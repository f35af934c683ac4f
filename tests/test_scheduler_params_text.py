"""Every parameter of every registered scheduler has a readable label (``title``, the Launch
form's label) and a description (its help, with units), so no form shows a bare ``t0`` or an
unexplained ``predictor_seed`` (issue 15, legibility)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from runners import registry
from runners.engines import vllm_scheduler


def _models() -> dict[str, type[BaseModel]]:
    models = {name: cls.Params for name, cls in registry.SCHEDULERS.items()}
    # the in-engine classes' own models (read by the engine), beside the policies' that extend them
    for name in ("EngineDynamicMemoryParams", "EngineDynamicSLAParams", "EngineMCSFParams", "EngineSLOAwareParams"):
        models[f"vllm_scheduler.{name}"] = getattr(vllm_scheduler, name)
    return models


MODELS = _models()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_field_has_a_title_and_a_description(name):
    model = MODELS[name]
    assert model.model_fields, name
    for field, info in model.model_fields.items():
        assert info.title and info.title.strip(), f"{name}.{field} has no title"
        assert info.title != field, f"{name}.{field}: the title repeats the field name"
        assert info.description and len(info.description) > len(info.title), f"{name}.{field} has no description"


def test_the_issue_s_examples():
    slo_sa = registry.SCHEDULERS["slo-sa"].Params.model_fields
    assert slo_sa["t0"].title == "initial temperature"
    assert slo_sa["predictor_seed"].title == "predictor seed"
    assert "standard-normal" in slo_sa["predictor_seed"].description  # says what the seed drives
    assert "seconds" in registry.SCHEDULERS["static"].Params.model_fields["fill_timeout_s"].description
