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
from runners.imports import aiperf, aiperf_columns, guidellm, vllm_bench
from runners.imports.base import (
    ImportedRun,
    ImportFormatError,
    WrittenRun,
    bytes_digest,
    default_run_id,
    read_bytes,
    source_copy_name,
    write_imported_run,
)
from runners.registries import Registry
from runners.store.run_ids import validate_run_id

__all__ = [
    "IMPORTERS",
    "Importer",
    "ImportFormatError",
    "WrittenRun",
    "import_file",
    "import_runs",
    "import_bytes",
    "parse_file",
    "importer_names",
]


@dataclass(frozen=True)
class Importer:
    """One tool's importer: ``name`` (CLI value), ``title`` (the tool as people call it),
    ``description`` (what file it reads), ``format`` (``json`` or ``jsonl``), ``sniff`` (None
    when the parsed data is this tool's, else what is missing) and ``parse``; a JSON-lines
    importer may have ``parse_columns`` (path, bytes, text, tool version), which reads the whole
    file at once where it can do so exactly and returns None where it cannot, or where the file
    is not this tool's (the lines are then parsed one by one and given to ``sniff`` and ``parse``)."""

    name: str
    title: str
    description: str
    format: str
    sniff: Callable[[Any], str | None]
    parse: Callable[..., list[ImportedRun]]
    parse_columns: Callable[[Path, bytes, str, str | None], list[ImportedRun] | None] | None = None


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
                aiperf_columns.parse_columns,
            ),
        )
    ),
)


def importer_names() -> list[str]:
    return list(IMPORTERS)


def _text(path: Path, raw: bytes) -> str:
    """``raw`` decoded (UTF-8, a byte-order mark dropped); ImportFormatError when it is not UTF-8."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ImportFormatError(
            f"{path}: not UTF-8 text (byte {exc.start}); expected a JSON or JSON-lines result file of {_titles()}"
        ) from None


def _json_value(text: str) -> tuple[Any, str | None]:
    """(the JSON value of ``text`` or None, why it is not JSON)."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        at_end = exc.pos >= _content_end(text) - 1
        return None, (
            f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}"
            + ("; the file ends early, as if cut short" if at_end else "")
            + ")"
        )
    except RecursionError:
        return None, "nested too deeply to be a result file"


def _content_end(text: str) -> int:
    """``len(text.rstrip())`` without copying a text of hundreds of MB to find it."""
    end = len(text)
    while end and text[end - 1].isspace():
        end -= 1
    return end


def _json_lines(text: str) -> tuple[list[Any] | None, str | None]:
    """(the JSON value of every non-blank line, or None, and why not)."""
    lines: list[Any] = []
    stripped = [line for line in text.splitlines() if line.strip()]
    for number, line in enumerate(stripped, start=1):
        try:
            lines.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError) as exc:
            last = number == len(stripped)
            return None, (
                f"line {number} of {len(stripped)} is not a JSON value"
                + (" (the last line: the file looks cut short)" if last else "")
                + (f": {exc.msg}" if isinstance(exc, json.JSONDecodeError) else "")
            )
    return lines, None


def _titles() -> str:
    return ", ".join(dict.fromkeys(importer.title for importer in IMPORTERS.values()))


def parse_file(path: str | Path, tool: str | None = None, tool_version: str | None = None) -> list[ImportedRun]:
    """The runs in ``path``, parsed by importer ``tool`` or by the one whose format it is."""
    path = Path(path)
    if tool is not None and tool not in IMPORTERS:
        raise ConfigError("tool", f"unknown importer {tool!r}; expected one of: {', '.join(IMPORTERS)}")
    return _parse_bytes(path, read_bytes(path), tool, tool_version)


def _parse_bytes(path: Path, raw: bytes, tool: str | None, tool_version: str | None) -> list[ImportedRun]:
    """:func:`parse_file` of the file's bytes ``raw`` (read once per import)."""
    text = _text(path, raw)
    data, json_problem = _json_value(text)
    lines: list[Any] | None = None
    lines_problem: str | None = None
    lines_read = json_problem is None  # a JSON document is not read as lines
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
            if not lines_read and importer.parse_columns is not None:
                runs = _parsed(path, importer, importer.parse_columns, path, raw, text, tool_version)
                if runs is not None:
                    return runs
            if not lines_read:
                lines, lines_problem = _json_lines(text)
                lines_read = True
            if lines is None:
                tried.append(f"{importer.name}: {lines_problem or json_problem}")
                continue
            if not lines and isinstance(data, (dict, list)):
                lines = [data]
            reason = importer.sniff(lines)
            value = lines
        if reason is None:
            found = _parsed(path, importer, importer.parse, path, value, tool_version=tool_version)
            assert found is not None
            return found
        tried.append(f"{importer.name}: {reason}")
    expected = IMPORTERS[tool].description if tool else f"a result file of {_titles()}"
    raise ImportFormatError(f"{path}: not {expected}. Tried " + "; ".join(tried))


def _parsed(
    path: Path, importer: Importer, parse: Callable[..., list[ImportedRun] | None], *args: Any, **kwargs: Any
) -> list[ImportedRun] | None:
    """``parse(*args, **kwargs)``, a field of a type the reader did not check refused in one line, never a traceback."""
    try:
        return parse(*args, **kwargs)
    except SchedlabError:
        raise
    except (AttributeError, TypeError, KeyError, IndexError, ValueError, OverflowError) as exc:
        raise ImportFormatError(
            f"{path}: looks like {importer.name} but a field has an unexpected shape "
            f"({type(exc).__name__}: {shortened(str(exc))}); expected {importer.description}"
        ) from None


def import_file(
    path: str | Path,
    results: str | Path | None = None,
    name: str | None = None,
    tool: str | None = None,
    tool_version: str | None = None,
) -> list[Path]:
    """Import ``path`` into the result store ``results`` (None: the default results folder);
    returns the run folders written (:func:`import_runs`)."""
    return [written.folder for written in import_runs(path, results, name, tool, tool_version)]


def import_runs(
    path: str | Path,
    results: str | Path | None = None,
    name: str | None = None,
    tool: str | None = None,
    tool_version: str | None = None,
) -> list[WrittenRun]:
    """Import ``path`` into the result store ``results`` (None: the default results folder);
    returns each run folder written with the run it holds and its request rows, so the caller
    need not read the folders back.

    ``name``: the run id (a file with several runs gets ``<name>-b<index>``); default
    ``imported-<tool>-<stem>[-b<index>]-<hash>``. Everything is parsed and every name checked
    before the first folder is written, so a bad file or a taken name writes nothing."""
    if results is None:
        from runners.store.result_store import DEFAULT_RESULTS_DIR

        results = DEFAULT_RESULTS_DIR
    path = Path(path)
    if tool is not None and tool not in IMPORTERS:
        raise ConfigError("tool", f"unknown importer {tool!r}; expected one of: {', '.join(IMPORTERS)}")
    raw = read_bytes(path)  # once: parsed, and hashed for the run ids
    runs = _parse_bytes(path, raw, tool, tool_version)
    if name is not None:
        validate_run_id(name)
    digest = bytes_digest(raw) if name is None else None  # once: per run it made the import quadratic
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
    written: list[WrittenRun] = []
    for run, run_id in zip(runs, ids):  # the source is copied once, then linked (see write_run)
        first = written[0].folder / source_copy_name(path) if written else None
        written.append(write_imported_run(results, run, path, run_id, copy_of_source=first))
    return written


def import_bytes(
    file_name: str,
    data: bytes,
    results: str | Path | None = None,
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
