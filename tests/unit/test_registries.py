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


def test_a_deferred_item_is_imported_on_its_first_lookup_only():
    """``register_deferred`` keeps "module:attribute"; listing names and ``in`` import nothing, the
    first lookup imports and checks the item, and a target that cannot load names itself."""
    import subprocess
    import sys

    registry = Registry("scheduler", "scheduler.name")
    seen: list[tuple[str, object]] = []
    registry.register_deferred("json-dumps", "json:dumps", lambda name, item: seen.append((name, item)))
    registry.register_deferred("missing", "runners.no_such_module:Policy")
    assert list(registry) == ["json-dumps", "missing"] and "missing" in registry and not seen
    import json

    assert registry["json-dumps"] is json.dumps and seen == [("json-dumps", json.dumps)]
    assert registry.lookup("json-dumps") is json.dumps and len(seen) == 1  # loaded once
    with pytest.raises(
        SchedlabError, match=r"scheduler 'missing': cannot load runners.no_such_module:Policy: No module"
    ):
        registry.lookup("missing")
    with pytest.raises(SchedlabError, match="two schedulers are named 'json-dumps'"):
        registry.register_deferred("json-dumps", "json:loads")
    # the project's scheduler registry: names without importing a policy; a class is checked on load
    script = (
        "import sys; from runners.registry import SCHEDULERS\n"
        "names = list(SCHEDULERS); 'slo-sa' in SCHEDULERS\n"
        "before = 'runners.schedulers.slo_aware' in sys.modules\n"
        "cls = SCHEDULERS['slo-sa']\n"
        "print(len(names), before, cls.name, 'runners.schedulers.slo_aware' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["15", "False", "slo-sa", "True"]


def test_a_scheduler_class_whose_name_differs_from_its_registration_is_refused():
    from runners.registry import _check_policy
    from runners.schedulers.fcfs import FCFSPolicy

    _check_policy("fcfs", FCFSPolicy)
    with pytest.raises(SchedlabError, match="scheduler 'first-come': the class FCFSPolicy calls itself 'fcfs'"):
        _check_policy("first-come", FCFSPolicy)
    with pytest.raises(SchedlabError, match="scheduler 'fcfs': 3 is not a SchedulerPolicy class"):
        _check_policy("fcfs", 3)
