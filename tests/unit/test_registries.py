"""The one registry type (runners.registries.Registry): order kept, clashes refused, unknown names
answered with the field and the known names; the project's registries are of it."""

from __future__ import annotations

import pytest

from runners.errors import SchedlabError, UnknownNameError
from runners.registries import Registry


def test_a_registry_keeps_order_and_refuses_a_taken_name():
    registry = Registry("scheduler", "scheduler.name", [("fcfs", 1), ("slo-sa", 2)])
    assert list(registry) == ["fcfs", "slo-sa"] and registry["slo-sa"] == 2 and len(registry) == 2
    assert registry.register("mine", 3) == 3 and list(registry.items())[-1] == ("mine", 3)
    with pytest.raises(SchedlabError, match="two schedulers are named 'fcfs': 1 and 4"):
        registry.register("fcfs", 4)
    with pytest.raises(SchedlabError, match="a scheduler needs a non-empty name; got ''"):
        registry.register("", 5)
    assert registry["fcfs"] == 1  # the clash changed nothing
    assert registry.unregister("mine") == 3 and "mine" not in registry
    registry["mine"] = 6  # item assignment registers (how tests add one for a while)
    del registry["mine"]
    with pytest.raises(SchedlabError, match="two schedulers are named 'fcfs'"):
        registry["fcfs"] = 7


def test_an_unknown_name_names_the_field_and_the_known_names():
    registry = Registry("engine", "engine.kind", [("vllm", 1), ("sim", 2)])
    with pytest.raises(UnknownNameError) as caught:
        registry.lookup("vlm")
    assert caught.value.field == "engine.kind"
    assert "unknown name 'vlm'; expected one of: sim, vllm" in str(caught.value)
    with pytest.raises(KeyError):
        registry["vlm"]  # the mapping protocol is unchanged


def test_the_projects_registries_are_registries():
    from runners.engines.adapters import ADAPTERS
    from runners.imports import IMPORTERS
    from runners.metrics.catalog import METRICS, RUN_METRICS, TIMESERIES
    from runners.registry import SCHEDULERS

    for registry in (SCHEDULERS, ADAPTERS, IMPORTERS, METRICS, TIMESERIES):
        assert isinstance(registry, Registry) and len(registry) > 0
    assert {"fcfs", "slo-sa", "engine-dynamic-mem"} <= set(SCHEDULERS)
    assert {"vllm", "lmdeploy", "sglang"} <= set(ADAPTERS)
    assert [m.key for m in RUN_METRICS] == [key for key in METRICS if METRICS[key] in RUN_METRICS]


def test_the_light_engine_names_are_the_registry_s():
    """The command line's help names the engines from runners.engines.kind_names (no engine
    imported); it must list exactly the registry's kinds, in order (issue 28: --help <= 0.3 s)."""
    from runners.engines.kind_names import ENGINE_KINDS, LAUNCHED_KINDS
    from runners.engines.kinds import ENGINES

    assert ENGINE_KINDS == tuple(ENGINES)
    assert LAUNCHED_KINDS == tuple(name for name in ENGINES if name not in ("sim", "openai"))
