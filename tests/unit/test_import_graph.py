"""The import graph of runners/ (issue 26): no module imports another module's private name, and
no import cycle, counting imports inside functions and under TYPE_CHECKING too (read from the
source with ast, so a cycle closed only at call time is caught)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNERS = ROOT / "runners"


def module_of(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


MODULES = {module_of(path): path for path in RUNNERS.rglob("*.py")}


def _target(name: str, attribute: str | None) -> str | None:
    """The runners module an import of ``attribute`` from ``name`` reaches (None: outside)."""
    if attribute and f"{name}.{attribute}" in MODULES:
        return f"{name}.{attribute}"
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path) -> list[tuple[str, int, str | None]]:
    """(target module, line, imported name) for every import of a runners module in ``path``,
    at module level, inside functions and under TYPE_CHECKING alike."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: None if path.name == "__init__.py" else -1]
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                target = _target(base, alias.name)
                if target and target != module:
                    found.append((target, node.lineno, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = _target(alias.name, None)
                if target and target != module:
                    found.append((target, node.lineno, None))
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return components


def private_imports() -> Iterator[str]:
    """``file:line name`` for every ``from X import _name`` of a project module across files."""
    files = [*RUNNERS.rglob("*.py"), *(ROOT / "pages").glob("*.py"), ROOT / "app.py", *(ROOT / "bench").glob("*.py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("runners", "pages", "bench"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        yield f"{path.relative_to(ROOT)}:{node.lineno} {alias.name}"


def test_no_module_imports_another_modules_private_name():
    assert list(private_imports()) == []


def test_no_import_cycles_even_through_function_level_imports():
    graph = {module: {target for target, _, _ in imports_of(module, path)} for module, path in MODULES.items()}
    assert strongly_connected(graph) == []


def test_the_graph_reader_sees_function_level_imports_and_cycles():
    tree = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(tree) == [["a", "b", "c"]]
    found = imports_of("runners.errors", MODULES["runners.errors"])
    assert all(target in MODULES for target, _, _ in found)


def test_no_function_of_complexity_rank_e_or_f():
    """radon's cyclomatic-complexity rank of every function in runners/, pages/, bench/ and app.py
    stays at D or better (issue 26: E and F are split at their seams)."""
    from radon.complexity import cc_rank, cc_visit

    def blocks(found: list) -> Iterator:
        """Every function, method and closure radon found (a class's blocks are its methods)."""
        for block in found:
            if hasattr(block, "methods"):
                yield from blocks(block.methods + getattr(block, "inner_classes", []))
            else:
                yield block
                yield from blocks(getattr(block, "closures", []))

    files = [*RUNNERS.rglob("*.py"), *(ROOT / "pages").glob("*.py"), *(ROOT / "bench").glob("*.py"), ROOT / "app.py"]
    ranked = [
        f"{path.relative_to(ROOT)}:{block.lineno} {block.name} {cc_rank(block.complexity)} ({block.complexity})"
        for path in files
        for block in blocks(cc_visit(path.read_text()))
        if cc_rank(block.complexity) in "EF"
    ]
    assert ranked == []
    complex_source = "def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(40))
    assert [cc_rank(block.complexity) for block in blocks(cc_visit(complex_source))] == ["F"]
