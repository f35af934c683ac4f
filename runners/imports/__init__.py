"""Results from the tools people already use: import vLLM ``bench serve``, GuideLLM and AIPerf
result files as ordinary runs (labelled "imported from <tool> <version>"), and export any run
as a vLLM ``bench serve``-compatible JSON.

:data:`IMPORTERS` is the registry (name -> :class:`Importer`) the CLI and the Results page list.
:func:`import_file` detects the format (or uses the named importer), parses the whole file
before writing anything, and writes one run folder per run in the file (GuideLLM: one per
benchmark). A file no importer reads, or a truncated or malformed one, raises SchedlabError
naming the file, what was expected and which importers were tried; nothing is written then, and
the source file is only ever read (a copy lands in each run folder).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from runners.errors import ConfigError, SchedlabError, shortened
from runners.imports import aiperf, guidellm, vllm_bench
from runners.imports.base import (
    ImportedRun,
    ImportFormatError,
    default_run_id,
    file_digest,
    read_bytes,
    source_copy_name,
    write_run,
)
from runners.registries import Registry
from runners.store.result_store import DEFAULT_RESULTS_DIR
from runners.store.run_ids import validate_run_id

__all__ = ["IMPORTERS", "Importer", "ImportFormatError", "import_file", "import_bytes", "parse_file", "importer_names"]


@dataclass(frozen=True)
class Importer:
    """One tool's importer: ``name`` (CLI value), ``title`` (the tool as people call it),
    ``description`` (what file it reads), ``format`` (``json`` or ``jsonl``), ``sniff`` (None
    when the parsed data is this tool's, else what is missing) and ``parse``."""

    name: str
    title: str
    description: str
    format: str
    sniff: Callable[[Any], str | None]
    parse: Callable[..., list[ImportedRun]]


def _importer(module: ModuleType, format: str) -> Importer:
    return Importer(module.NAME, module.TITLE, module.DESCRIPTION, format, module.sniff, module.parse)


IMPORTERS: Registry[Importer] = Registry(
    "importer",
    "tool",
    (
        (importer.name, importer)
        for importer in (
            _importer(vllm_bench, "json"),
            _importer(guidellm, "json"),
            _importer(aiperf, "json"),
            Importer(
                aiperf.RECORDS_NAME,
                aiperf.TITLE,
                aiperf.RECORDS_DESCRIPTION,
                "jsonl",
                aiperf.sniff_records,
                aiperf.parse_records,
            ),
        )
    ),
)


def importer_names() -> list[str]:
    return list(IMPORTERS)


def _decode(path: Path, raw: bytes) -> tuple[Any, str | None, Any, str | None]:
    """(JSON value or None, why it is not JSON, JSON-lines values or None, why they are not)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(
            f"{path}: not UTF-8 text (byte {exc.start}); expected a JSON or JSON-lines result file of {_titles()}"
        ) from None
    data, json_problem = None, None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        at_end = exc.pos >= len(text.rstrip()) - 1
        json_problem = (
            f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}"
            + ("; the file ends early, as if cut short" if at_end else "")
            + ")"
        )
    except RecursionError:
        json_problem = "nested too deeply to be a result file"
    lines: list[Any] | None = None
    lines_problem: str | None = None
    if json_problem is not None:
        lines = []
        stripped = [line for line in text.splitlines() if line.strip()]
        for number, line in enumerate(stripped, start=1):
            try:
                lines.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError) as exc:
                last = number == len(stripped)
                lines_problem = (
                    f"line {number} of {len(stripped)} is not a JSON value"
                    + (" (the last line: the file looks cut short)" if last else "")
                    + (f": {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "")
                )
                lines = None
                break
    return data, json_problem, lines, lines_problem


def _titles() -> str:
    return ", ".join(dict.fromkeys(importer.title for importer in IMPORTERS.values()))


def parse_file(path: str | Path, tool: str | None = None, tool_version: str | None = None) -> list[ImportedRun]:
    """The runs in ``path``, parsed by importer ``tool`` or by the one whose format it is."""
    path = Path(path)
    if tool is not None and tool not in IMPORTERS:
        raise ConfigError("tool", f"unknown importer {tool!r}; expected one of: {', '.join(IMPORTERS)}")
    raw = read_bytes(path)
    data, json_problem, lines, lines_problem = _decode(path, raw)
    candidates = [IMPORTERS[tool]] if tool else list(IMPORTERS.values())
    tried = []
    for importer in candidates:
        if importer.format == "json":
            if json_problem is not None:
                tried.append(f"{importer.name}: {json_problem}")
                continue
            reason = importer.sniff(data)
            value = data
        else:
            if lines is None:
                tried.append(f"{importer.name}: {lines_problem or json_problem}")
                continue
            if not lines and isinstance(data, (dict, list)):
                lines = [data]
            reason = importer.sniff(lines)
            value = lines
        if reason is None:
            try:
                return importer.parse(path, value, tool_version=tool_version)
            except SchedlabError:
                raise
            except (AttributeError, TypeError, KeyError, IndexError, ValueError, OverflowError) as exc:
                # a field of an unexpected type the reader did not check: one line, never a traceback
                raise ImportFormatError(
                    f"{path}: looks like {importer.name} but a field has an unexpected shape "
                    f"({type(exc).__name__}: {shortened(str(exc))}); expected {importer.description}"
                ) from None
        tried.append(f"{importer.name}: {reason}")
    expected = IMPORTERS[tool].description if tool else f"a result file of {_titles()}"
    raise ImportFormatError(f"{path}: not {expected}. Tried " + "; ".join(tried))


def import_file(
    path: str | Path,
    results: str | Path = DEFAULT_RESULTS_DIR,
    name: str | None = None,
    tool: str | None = None,
    tool_version: str | None = None,
) -> list[Path]:
    """Import ``path`` into the result store ``results``; returns the run folders written.

    ``name``: the run id (a file with several runs gets ``<name>-b<index>``); default
    ``imported-<tool>-<stem>[-b<index>]-<hash>``. Everything is parsed and every name checked
    before the first folder is written, so a bad file or a taken name writes nothing."""
    path = Path(path)
    runs = parse_file(path, tool, tool_version)
    if name is not None:
        validate_run_id(name)
    digest = file_digest(path) if name is None else None  # once: per run it made the import quadratic
    ids = [
        (name if len(runs) == 1 else f"{name}-b{run.benchmark if run.benchmark is not None else index}")
        if name
        else default_run_id(run, path, digest)
        for index, run in enumerate(runs)
    ]
    for run_id in ids:
        validate_run_id(run_id)
        if (Path(results) / run_id).exists():
            raise ConfigError(
                "name",
                f"a run named {run_id!r} already exists in {results}; pass another --name "
                "(or delete that run) to import this file again",
            )
    folders: list[Path] = []
    for run, run_id in zip(runs, ids):  # the source is copied once, then linked (see write_run)
        first = folders[0] / source_copy_name(path) if folders else None
        folders.append(write_run(results, run, path, run_id, copy_of_source=first))
    return folders


def import_bytes(
    file_name: str,
    data: bytes,
    results: str | Path = DEFAULT_RESULTS_DIR,
    name: str | None = None,
    tool: str | None = None,
    tool_version: str | None = None,
) -> list[Path]:
    """:func:`import_file` for an uploaded file: ``data`` is written under its own name
    (``file_name``'s last part, made safe) in a private temporary folder, imported, and the
    temporary copy removed; each run folder keeps its own copy. Errors name ``file_name``."""
    import re
    import tempfile

    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(file_name)).name)[:120] or "upload"
    with tempfile.TemporaryDirectory(prefix="schedlab-import-") as folder:
        path = Path(folder) / safe
        path.write_bytes(data)
        try:
            return import_file(path, results, name=name, tool=tool, tool_version=tool_version)
        except ConfigError:
            raise
        except SchedlabError as exc:
            raise ImportFormatError(str(exc).replace(str(path), f"uploaded file {file_name!r}")) from None
