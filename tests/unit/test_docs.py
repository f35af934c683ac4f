"""docs/design.md cites only what exists, and the project cites it rather than a design file it lacks.

- every relative link (``[text](path#anchor)``) resolves to a file of the repository, and its
  anchor to a heading of that file (GitHub's heading slugs);
- every path in backticks (or in a code block) that starts at a top-level entry of the repository
  (``runners/...``, ``bench/...``, ``README.md`` ...) exists; paths with placeholders
  (``results/<run_id>/``) are not paths and are skipped;
- every dotted name ``runners.a.b[.attr]`` in backticks is a module of the repository, or a name
  defined at the top level of one (read from the source with ``ast``, not imported: the in-engine
  scheduler classes import vLLM, which the test environment need not have);
- every call written in backticks (``decide(now)``) names a function defined somewhere in runners/;
- no file of the project cites a design document other than docs/design.md.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs/design.md"

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
BACKTICKED = re.compile(r"`([^`\n]+)`")
PATH_LIKE = re.compile(r"^[\w.\-/]+$")
DOTTED = re.compile(r"^runners(\.\w+)+$")
CALL = re.compile(r"^(\w+)\([\w, ]*\)$")


def design_text() -> str:
    return DESIGN.read_text(encoding="utf-8")


def prose_and_code(text: str) -> tuple[str, str]:
    """(the text outside fenced code blocks, the text inside them)."""
    code = "\n".join(match.group(0) for match in FENCE.finditer(text))
    return FENCE.sub("", text), code


def top_level_entries() -> set[str]:
    return {entry.name for entry in ROOT.iterdir() if entry.name != ".git" and not entry.name.startswith(".venv")}


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(match.group(1)) for match in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def cited_paths(text: str) -> set[str]:
    """Repository paths cited in backticks, or in code blocks, in ``text``."""
    prose, code = prose_and_code(text)
    top = top_level_entries()
    found = set()
    for token in BACKTICKED.findall(prose):
        token = token.strip()
        if PATH_LIKE.match(token) and token.split("/")[0] in top and ("/" in token or token in top):
            found.add(token)
    names = "|".join(re.escape(name) for name in sorted(top))
    for match in re.finditer(rf"(?<![\w./<-])((?:{names})/[\w./-]*[\w/])", code):
        found.add(match.group(1))
    return found


def test_slug_matches_github() -> None:
    assert slug("The simulated engine") == "the-simulated-engine"
    assert slug("Decisions and their reasons") == "decisions-and-their-reasons"
    assert slug("In-engine schedulers (issue 14)") == "in-engine-schedulers-issue-14"
    assert slug("Importing and exporting results") == "importing-and-exporting-results"


def test_cited_paths_are_found_and_checked() -> None:
    # the extraction itself: a real path, a placeholder path, a non-repository path, a code block
    sample = (
        "see `runners/study/runner.py`, `results/<run_id>/`, `vllm/benchmarks/serve.py` and `bench/`\n"
        "```\nrunners/run/config.py -> pages/3_Demo.py\n```\n"
    )
    assert cited_paths(sample) == {"runners/study/runner.py", "bench/", "runners/run/config.py", "pages/3_Demo.py"}
    assert "runners/engines/simulator.py" in cited_paths(design_text())


def test_every_cited_path_exists() -> None:
    missing = sorted(path for path in cited_paths(design_text()) if not (ROOT / path).exists())
    assert missing == [], f"docs/design.md cites paths that do not exist: {missing}"


def test_every_relative_link_resolves() -> None:
    prose, _ = prose_and_code(design_text())
    problems = []
    links = LINK.findall(prose)
    assert len(links) >= 5  # README sections and the document's own sections are linked
    for target in links:
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        path = (DESIGN.parent / file_part).resolve() if file_part else DESIGN
        if not path.is_file():
            problems.append(f"{target}: no file {path}")
        elif anchor and anchor not in anchors(path):
            problems.append(f"{target}: no heading with anchor #{anchor} in {path.name}")
    assert problems == []


@cache
def module_tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def defined_names(body: list[ast.stmt]) -> set[str]:
    """Names a module or class body defines at its own level (functions, classes, assignments,
    imports), looking inside top-level if/try blocks."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            names |= defined_names(node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", []))
    return names


def resolve_dotted(name: str) -> str | None:
    """None when ``runners.a.b[.attr...]`` exists in the repository's source, else what is missing."""
    parts = name.split(".")
    module_path: Path | None = None
    used = 0
    for i in range(1, len(parts) + 1):
        base = ROOT.joinpath(*parts[:i])
        if (base / "__init__.py").is_file():
            module_path, used = base / "__init__.py", i
        elif base.with_suffix(".py").is_file():
            module_path, used = base.with_suffix(".py"), i
            break
        else:
            break
    if module_path is None:
        return f"no module {parts[0]}"
    body = module_tree(module_path).body
    for attr in parts[used:]:
        if attr not in defined_names(body):
            return f"{'.'.join(parts[:used])} ({module_path.relative_to(ROOT)}) defines no {attr!r}"
        classes = [node for node in body if isinstance(node, ast.ClassDef) and node.name == attr]
        body = classes[0].body if classes else []
    return None


def test_resolve_dotted_refuses_what_is_not_there() -> None:
    assert resolve_dotted("runners.store.result_store.SCHEMA_VERSION") is None
    assert resolve_dotted("runners.schedulers.base.SchedulerPolicy.decide") is None
    assert resolve_dotted("runners.metrics.seed_statistics") is None
    assert resolve_dotted("runners.store.result_store.NO_SUCH_NAME") is not None
    assert resolve_dotted("runners.no_such_module.thing") is not None
    assert resolve_dotted("runners.schedulers.base.SchedulerPolicy.no_such_method") is not None


def test_every_cited_runners_name_exists() -> None:
    prose, _ = prose_and_code(design_text())
    names = {token for token in BACKTICKED.findall(prose) if DOTTED.match(token)}
    assert len(names) > 50  # the document names its functions and files
    problems = sorted(f"{name}: {problem}" for name in names if (problem := resolve_dotted(name)))
    assert problems == []


def test_every_cited_call_is_a_function_of_runners() -> None:
    prose, _ = prose_and_code(design_text())
    calls = {match.group(1) for token in BACKTICKED.findall(prose) if (match := CALL.match(token))}
    functions = {
        node.name
        for path in (ROOT / "runners").rglob("*.py")
        if "__pycache__" not in path.parts
        for node in ast.walk(module_tree(path))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert "decide" in calls
    assert sorted(calls - functions) == []


def project_files() -> list[Path]:
    """The project's files: tracked and untracked-but-not-ignored (git), else every file outside
    .git and .venv* folders."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8", "surrogateescape")
        paths = [ROOT / name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        paths = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d != ".git" and not d.startswith(".venv") and d != "__pycache__"]
            paths.extend(Path(folder) / name for name in files)
    return [
        path
        for path in paths
        if not any(part == ".git" or part.startswith(".venv") for part in path.relative_to(ROOT).parts)
        and path != DESIGN
    ]


# A design document cited by any other path than docs/design.md (any case).
OTHER_DESIGN_DOC = re.compile(r"(?<!docs/)\bdesign\.md", re.I)


def other_design_citations() -> list[str]:
    found = []
    for path in project_files():
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):  # another process removed it meanwhile
            continue
        if b"\0" in data[:8192]:  # binary (parquet, png, gzip)
            continue
        text = data.decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            if OTHER_DESIGN_DOC.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_other_design_citation_pattern() -> None:
    bare = "DESIGN" + ".md"
    assert OTHER_DESIGN_DOC.search(f"the contract in {bare};")
    assert OTHER_DESIGN_DOC.search(f"see ../shared/{bare}")
    assert not OTHER_DESIGN_DOC.search("see docs/design.md, Result contracts")
    assert not OTHER_DESIGN_DOC.search("[docs/design.md](../docs/design.md#workload-statistics)")


def test_no_file_cites_a_design_document_other_than_docs_design() -> None:
    assert other_design_citations() == []


def test_the_readme_states_the_collected_test_count() -> None:
    """README.md's test count is generated (tools/readme_test_count.py --write), never typed: it
    equals what the test command collects."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_test_count", ROOT / "tools" / "readme_test_count.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.stated((ROOT / "README.md").read_text()) == tool.collected(), (
        "README.md's test count is stale: run python tools/readme_test_count.py --write"
    )
