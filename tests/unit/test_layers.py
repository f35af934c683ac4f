"""The layers of runners/ (issue 26): a module imports only from its own layer or lower ones,
checked twice: in the source (every import, at module level, in a function or under
TYPE_CHECKING) and in a fresh interpreter (importing a layer's modules loads no module of a
higher layer). docs/design.md "Layers" draws the same table."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.unit.test_import_graph import MODULES, ROOT, imports_of

#: Each layer's rank, lowest first. Within a layer modules may import each other (the cycle test
#: forbids cycles); across layers only downwards.
LAYERS: dict[str, int] = {
    "core": 0,  # the root modules: errors, input_model, paths, registries, timestamps, json_values
    "workload": 1,
    "metrics": 1,
    "engines": 2,
    "schedulers": 3,
    "store": 3,
    "drivers": 4,
    "registry": 4,
    "run": 5,
    "study": 6,
    "imports": 6,
    "views": 7,
    "app": 8,
    "__main__": 9,
}
#: Modules that import vLLM itself (the in-engine classes run inside the vLLM server).
NEEDS_VLLM = ("runners.schedulers.vllm.base", "runners.schedulers.vllm.dynamic_mem",
              "runners.schedulers.vllm.mcsf", "runners.schedulers.vllm.slo_sa")  # fmt: skip


def layer_of(module: str) -> str:
    """The layer of a runners module: its first package below runners/, or ``core`` for a module
    directly in runners/ (``registry`` and ``__main__`` are layers of their own)."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] not in LAYERS):
        return "core"
    return parts[1]


def test_every_module_has_a_layer():
    assert {layer_of(module) for module in MODULES} == set(LAYERS)
    core = sorted(module for module in MODULES if layer_of(module) == "core")
    assert core == [
        "runners",
        "runners.errors",
        "runners.input_model",
        "runners.json_values",
        "runners.paths",
        "runners.registries",
        "runners.timestamps",
    ], "a new module directly in runners/ must say its layer (a subpackage) or be core"


def upward_imports() -> list[str]:
    found = []
    for module, path in sorted(MODULES.items()):
        for target, line, _ in imports_of(module, path):
            if target is not None and target.startswith("runners") and target in MODULES:
                if LAYERS[layer_of(target)] > LAYERS[layer_of(module)]:
                    found.append(f"{module}:{line} ({layer_of(module)}) imports {target} ({layer_of(target)})")
    return found


def test_no_layer_imports_a_higher_one_in_the_source():
    assert upward_imports() == []


def test_the_source_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The check is not vacuous: a store module importing a view is found."""
    fake = tmp_path / "leak.py"
    fake.write_text("def f():\n    from runners.views.compare import comparison_table\n")
    monkeypatch.setitem(MODULES, "runners.store.leak", fake)
    assert upward_imports() == ["runners.store.leak:2 (store) imports runners.views.compare (views)"]


@pytest.mark.parametrize("layer", [name for name in LAYERS if name not in ("app", "__main__")])
def test_importing_a_layer_loads_no_higher_layer(layer):
    """In a fresh interpreter, importing every module of ``layer`` loads only modules of it and
    of lower layers (run time, the imports that actually happen)."""
    modules = sorted(m for m in MODULES if layer_of(m) == layer and m not in NEEDS_VLLM and not m.endswith("__main__"))
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('runners'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    higher = [m for m in out.stdout.split() if m in MODULES and LAYERS[layer_of(m)] > LAYERS[layer]]
    assert higher == [], f"importing the {layer} layer loaded {higher}"
