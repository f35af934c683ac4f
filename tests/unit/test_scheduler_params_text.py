"""Every parameter of every registered scheduler has a readable label (``title``, the Launch
form's label) and a description (its help, with units), so no form shows a bare ``t0`` or an
unexplained ``predictor_seed`` (issue 15, legibility)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from runners import registry
from runners.schedulers import vllm as vllm_scheduler


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


def test_every_scheduler_cites_its_paper_by_title():
    """The Launch page's "From ..." and the CLI's scheduler list name the paper by its title, not "(004)"."""
    from runners.schedulers.papers import PAPERS

    for name, cls in registry.SCHEDULERS.items():
        assert "(00" not in cls.paper, f"{name} cites a paper by number: {cls.paper}"
        if name not in ("fcfs", "prefix-affinity"):  # the baseline of all five; a gateway's baseline
            assert any(f'"{paper.title}"' in cls.paper for paper in PAPERS.values()), (name, cls.paper)
    assert PAPERS["004"].title in registry.SCHEDULERS["slo-sa"].paper
    assert PAPERS["004"].title in registry.SCHEDULERS["engine-slo-sa"].paper
    assert PAPERS["001"].title in registry.SCHEDULERS["scls"].paper
    assert "llm-d" in registry.SCHEDULERS["prefix-affinity"].paper  # not a paper: the system it follows


def test_paper_titles_are_the_papers_first_lines():
    from pathlib import Path

    from runners.schedulers.papers import PAPERS

    seeds = Path("/work/shared/seeds")
    if not seeds.is_dir():
        pytest.skip("the papers' texts are not on this machine")
    for paper_id, paper in PAPERS.items():
        text = next(seeds.glob(f"{paper_id}_*.txt")).read_text(encoding="utf-8")
        first = next(line.strip() for line in text.splitlines() if line.strip())
        assert first == paper.title, paper_id


def test_no_text_a_reader_sees_names_a_paper_by_its_number():
    """Summaries, parameter help, metric definitions and the simulator's settings name a paper by its
    title or authors, never "000 Alg. 1" or "004's" (issue 27, defect 11)."""
    import re

    from runners.engines.sim_config import SimulatorConfig
    from runners.metrics.catalog import RUN_METRICS

    number = re.compile(r"(?<![\d.,])00[0-4](?![\d])")
    texts = {f"{name}.summary": cls.summary for name, cls in registry.SCHEDULERS.items()}
    for name, cls in registry.SCHEDULERS.items():
        for field, info in cls.Params.model_fields.items():
            texts[f"{name}.{field}"] = f"{info.title} {info.description}"
    for entry in RUN_METRICS:
        texts[f"metric {entry.key}"] = f"{entry.label} {entry.definition}"
    for field, info in SimulatorConfig.model_fields.items():
        texts[f"sim {field}"] = f"{info.title} {info.description}"
    offenders = {where: text for where, text in texts.items() if number.search(text or "")}
    assert not offenders, offenders
