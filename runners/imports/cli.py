"""The ``import`` and ``export`` commands (their arguments added to ``python -m runners`` by
:func:`build_import` and :func:`build_export`, only when that command runs):

- ``python -m runners import FILE [--out DIR] [--name RUN_ID] [--tool NAME] [--tool-version V]``
- ``python -m runners export RUN_ID --format vllm-bench [-o FILE] [--out DIR]``
"""

from __future__ import annotations

import argparse

RESULTS_HELP = "results folder (default: results/, or $SCHEDLAB_RESULTS_DIR)"


def command_import(args: argparse.Namespace) -> int:
    """Import ``args.file``; prints one line per run written (from what was written: reading
    each folder back made a file of n benchmarks quadratic). SchedlabError on a bad file."""
    from runners.imports import import_runs

    written = import_runs(args.file, args.out, name=args.name, tool=args.tool, tool_version=args.tool_version)
    for entry in written:
        detail = f"{entry.rows} requests recomputed" if entry.rows else "run-level figures only"
        print(f"{entry.folder.name}: {entry.run.label} ({detail}) -> {entry.folder}")
        for definition in entry.run.definitions:
            print(f"  note {definition.metric}: {definition.note}")
    return 0


def command_export(args: argparse.Namespace) -> int:
    """Export run ``args.run`` as ``args.format``; prints the file written."""
    from runners.imports.export_vllm_bench import export_run

    path = export_run(args.run, args.out, args.output, args.format)
    if path is not None:  # None: written to standard output, which carries only the JSON
        print(f"wrote {path}")
    return 0


def build_import(importer: argparse.ArgumentParser) -> None:
    """The ``import`` command's arguments (the readers named in its description)."""
    from runners.imports import IMPORTERS

    importer.description = (
        "Import a result file of another tool into the result store, as runs labelled "
        "'imported from <tool> <version>'. Readers: "
        + "; ".join(f"{name}: {entry.description}" for name, entry in IMPORTERS.items())
    )
    importer.add_argument("file", help="the tool's result file (it is only read; a copy goes into the run folder)")
    importer.add_argument("--out", "--results", dest="out", default=None, help=RESULTS_HELP)
    importer.add_argument("--name", help="run id (a file with several benchmarks: <name>-b<index>)")
    importer.add_argument("--tool", choices=list(IMPORTERS), help="the importer to use (default: detect the format)")
    importer.add_argument(
        "--tool-version", help="the tool's version, when the file does not record it (vLLM's result JSON does not)"
    )
    importer.set_defaults(handler=command_import)


def build_export(exporter: argparse.ArgumentParser) -> None:
    """The ``export`` command's arguments."""
    from runners.imports.export_vllm_bench import FORMATS

    exporter.add_argument("run", help="run id, unique prefix, or folder")
    exporter.add_argument("--format", choices=FORMATS, default="vllm-bench", help="output format (default vllm-bench)")
    exporter.add_argument(
        "-o",
        "--output",
        help="file to write: a new or regular file in an existing folder, never inside a run folder; "
        "- for standard output (default: <run id>.vllm-bench.json)",
    )
    exporter.add_argument("--out", "--results", dest="out", default=None, help=RESULTS_HELP)
    exporter.set_defaults(handler=command_export)
