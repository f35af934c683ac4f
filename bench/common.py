"""What every benchmark shares: the repository root, bench/results/ and writing a report there."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.json_values import dotted_value

ROOT = Path(__file__).resolve().parents[1]
#: Where the benchmarks write their reports (bench/results/<name>.json and .md).
RESULTS = ROOT / "bench" / "results"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown table's lines: ``| a | b |``, the ``|---|---|`` rule, then a line a row (cells as
    ``str``)."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


def measured(summary: Any, dotted: str) -> Any:
    """The value at ``dotted`` (``"completed"``, ``"ttft_s.mean"``) of a run's summary (a
    :class:`runners.store.models.RunSummary`); KeyError naming it when the run did not record it
    (a benchmark reports only numbers the run measured)."""
    value = dotted_value(summary, dotted)
    if value is None:
        raise KeyError(dotted)
    return value


def write_report(name: str, report: Mapping[str, Any], lines: Sequence[str], folder: Path = RESULTS) -> None:
    """Write ``report`` to <folder>/<name>.json (indented; values JSON has no type for as ``str``)
    and ``lines`` to <folder>/<name>.md (``folder``: bench/results/ by default), then print the
    lines."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (folder / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
