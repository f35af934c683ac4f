"""The documentation cites only what exists, and the project cites docs/design.md rather than a
design file it lacks. The checks run over docs/design.md, README.md and every docs/**/*.md:

- every relative link (``[text](path#anchor)``) resolves to a file of the repository, and its
  anchor to a heading of that file (GitHub's heading slugs);
- every path in backticks (or in a code block) that starts at a top-level entry of the repository
  (``runners/...``, ``bench/...``, ``README.md`` ...) exists; paths with placeholders
  (``results/<run_id>/``) are not paths and are skipped;
- every dotted name ``runners.a.b[.attr]`` in backticks is a module of the repository, or a name
  defined at the top level of one (read from the source with ``ast``, not imported: the in-engine
  scheduler classes import vLLM, which the test environment need not have);
- every call written in backticks (``decide(now)``) names a function defined somewhere in runners/;
- no file of the project cites a design document other than docs/design.md;
- README.md stays short (at most 300 lines) and links every docs/**/*.md file, directly or through
  a docs index (docs/index.md or docs/README.md) it links.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs/design.md"
README = ROOT / "README.md"
#: The README's length limit (issue 42): the reference lives in docs/.
README_MAX_LINES = 300
#: Every document the checks read: the design document first, the README, the rest of docs/.
DOCUMENTS = [DESIGN, README, *sorted(path for path in (ROOT / "docs").rglob("*.md") if path != DESIGN)]
DOCUMENT_IDS = [str(path.relative_to(ROOT)) for path in DOCUMENTS]
#: Paths the documents name that a checkout does not hold, and why.
NOT_IN_A_CHECKOUT = {
    "results/.jobs/": "the dashboard's job folders, made when a job is launched (git-ignored)",
    "results/demo/": "the earlier one-regime Demo bundle, which `python -m runners demo` removes",
}

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
BACKTICKED = re.compile(r"`([^`\n]+)`")
PATH_LIKE = re.compile(r"^[\w.\-/]+$")
DOTTED = re.compile(r"^runners(\.\w+)+$")
CALL = re.compile(r"^(\w+)\([\w, ]*\)$")


def design_text() -> str:
    return DESIGN.read_text(encoding="utf-8")


def documents() -> pytest.MarkDecorator:
    """Parametrize a test over every document (``doc``: its path)."""
    return pytest.mark.parametrize("doc", DOCUMENTS, ids=DOCUMENT_IDS)


def relative_links(path: Path) -> list[str]:
    """The link targets in ``path``'s prose (images too) that are not URLs (http:, mailto: ...)."""
    prose, _ = prose_and_code(path.read_text(encoding="utf-8"))
    return [target for target in LINK.findall(prose) if not re.match(r"^[a-z]+:", target)]


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


@documents()
def test_every_cited_path_exists(doc: Path) -> None:
    cited = cited_paths(doc.read_text(encoding="utf-8")) - NOT_IN_A_CHECKOUT.keys()
    missing = sorted(path for path in cited if not (ROOT / path).exists())
    assert missing == [], f"{doc.relative_to(ROOT)} cites paths that do not exist: {missing}"


def link_problems(doc: Path) -> list[str]:
    """What is wrong with ``doc``'s relative links: a file that is not there, an anchor that no
    heading of the file has."""
    problems = []
    for target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.is_file():
            problems.append(f"{target}: no file {path}")
        elif anchor and anchor not in anchors(path):
            problems.append(f"{target}: no heading with anchor #{anchor} in {path.name}")
    return problems


@documents()
def test_every_relative_link_resolves(doc: Path) -> None:
    if doc == DESIGN:
        assert len(relative_links(doc)) >= 5  # the user documentation and the document's own sections
    assert link_problems(doc) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A heading\n", encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# Top\n[ok](other.md#a-heading) [self](#top) [no file](missing.md) [no anchor](other.md#nope)\n"
        "```\n[in code](missing.md)\n```\n",
        encoding="utf-8",
    )
    problems = link_problems(doc)
    assert [problem.split(":")[0] for problem in problems] == ["missing.md", "other.md#nope"]


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


@documents()
def test_every_cited_runners_name_exists(doc: Path) -> None:
    prose, _ = prose_and_code(doc.read_text(encoding="utf-8"))
    names = {token for token in BACKTICKED.findall(prose) if DOTTED.match(token)}
    if doc == DESIGN:
        assert len(names) > 50  # the document names its functions and files
    problems = sorted(f"{name}: {problem}" for name in names if (problem := resolve_dotted(name)))
    assert problems == []


@documents()
def test_every_cited_call_is_a_function_of_runners(doc: Path) -> None:
    prose, _ = prose_and_code(doc.read_text(encoding="utf-8"))
    calls = {match.group(1) for token in BACKTICKED.findall(prose) if (match := CALL.match(token))}
    functions = {
        node.name
        for path in (ROOT / "runners").rglob("*.py")
        if "__pycache__" not in path.parts
        for node in ast.walk(module_tree(path))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    if doc == DESIGN:
        assert "decide" in calls
    assert sorted(calls - functions - set(dir(builtins))) == []  # super() is Python's


def test_the_readme_is_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference text to docs/"


def linked_files(doc: Path) -> set[Path]:
    """The files ``doc`` links to (relative links, anchors dropped)."""
    return {(doc.parent / target.partition("#")[0]).resolve() for target in relative_links(doc) if target[0] != "#"}


def test_the_readme_links_every_document() -> None:
    linked = linked_files(README)
    for index in (ROOT / "docs/index.md", ROOT / "docs/README.md"):
        if index.resolve() in linked:
            linked |= linked_files(index)
    unlinked = [name for path, name in zip(DOCUMENTS, DOCUMENT_IDS) if path != README and path.resolve() not in linked]
    assert unlinked == [], f"README.md links neither these documents nor a docs index that does: {unlinked}"


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


def cites_other_design(line: str, path: Path) -> bool:
    """Whether ``line`` of ``path`` cites a design document other than docs/design.md; a relative
    link from a file of docs/ to its sibling (``](`` + DESIGN.name) is docs/design.md."""
    if path.parent == DESIGN.parent:
        line = line.replace(f"]({DESIGN.name}", f"](docs/{DESIGN.name}")
    return OTHER_DESIGN_DOC.search(line) is not None


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
            if cites_other_design(line, path):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_other_design_citation_pattern() -> None:
    bare = "DESIGN" + ".md"
    assert OTHER_DESIGN_DOC.search(f"the contract in {bare};")
    assert OTHER_DESIGN_DOC.search(f"see ../shared/{bare}")
    assert not OTHER_DESIGN_DOC.search("see docs/design.md, Result contracts")
    assert not OTHER_DESIGN_DOC.search("[docs/design.md](../docs/design.md#workload-statistics)")
    sibling = f"[docs/design.md]({DESIGN.name}#layers)"
    assert not cites_other_design(sibling, ROOT / "docs/layout.md")
    assert cites_other_design(sibling, ROOT / "examples/notes.md")
    assert cites_other_design(f"[the design]({bare})", ROOT / "docs/layout.md")


def test_no_file_cites_a_design_document_other_than_docs_design() -> None:
    assert other_design_citations() == []


@pytest.mark.e2e
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
