"""The properties every fuzz case must keep, and a collector that groups what broke them.

A test runs all its generated cases, hands each outcome to :class:`Failures`, and asserts once
at the end: the message lists each failure class (what broke, where) with how many inputs hit
it and one example input, so a red run reads as a list of defects rather than 300 cases.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fuzzing.sandbox import Outcome

EXIT_CODES = (0, 1, 2, 130)
TERMINAL = ("done", "failed", "cancelled", "interrupted")


def shorten(text: Any, limit: int = 220) -> str:
    value = text if isinstance(text, str) else repr(text)
    value = value.replace("\n", "\\n")
    return value if len(value) <= limit else value[: limit - 30] + f"...<{len(value)} chars>"


@dataclass
class FailureClass:
    key: str
    count: int = 0
    examples: list[tuple[str, str]] = field(default_factory=list)  # (input, detail)


class Failures:
    """Failures grouped by class; ``message()`` is the assertion text."""

    def __init__(self, title: str, examples_per_class: int = 2, cap: int = 40) -> None:
        self.title = title
        self.cases = 0
        self.broken_cases = 0
        self.examples_per_class = examples_per_class
        self.cap = cap
        self.classes: "OrderedDict[str, FailureClass]" = OrderedDict()

    def case(self) -> None:
        self.cases += 1

    def add(self, key: str, case_input: Any, detail: str = "") -> None:
        entry = self.classes.setdefault(key, FailureClass(key))
        entry.count += 1
        if len(entry.examples) < self.examples_per_class:
            entry.examples.append((shorten(case_input, 400), shorten(detail, 400)))

    def extend(self, problems: Iterable[tuple[str, str]], case_input: Any) -> None:
        problems = list(problems)
        if problems:
            self.broken_cases += 1
        for key, detail in problems:
            self.add(key, case_input, detail)

    def __bool__(self) -> bool:
        return bool(self.classes)

    def message(self) -> str:
        lines = [
            f"{self.title}: {self.broken_cases} of {self.cases} generated cases broke a property, "
            f"in {len(self.classes)} failure classes:"
        ]
        for number, entry in enumerate(sorted(self.classes.values(), key=lambda e: -e.count)):
            if number >= self.cap:
                lines.append(f"... and {len(self.classes) - self.cap} more classes")
                break
            lines.append(f"[{entry.count}x] {entry.key}")
            for case_input, detail in entry.examples:
                lines.append(f"      input: {case_input}")
                if detail:
                    lines.append(f"      got:   {detail}")
        return "\n".join(lines)


# -- the properties -------------------------------------------------------------------------------
def outcome_problems(outcome: Outcome, allowed_codes: tuple[int, ...] = EXIT_CODES) -> list[tuple[str, str]]:
    """main() returned an allowed code, did not raise, hang or crash; a 2 is one clean line."""
    problems: list[tuple[str, str]] = []
    if outcome.timed_out:
        return [("hang: main() did not return (killed at the case's time limit)", f"after {outcome.elapsed_s:.1f} s")]
    if outcome.signal:
        return [(f"crash: the process died of signal {outcome.signal}", outcome.err[-200:])]
    if outcome.raised:
        raised = outcome.raised
        return [(f"main() raised {raised['type']} at {raised['where']}", raised["last_line"])]
    if outcome.extra.get("system_exit"):
        # argparse's own rejection of a flag: usage + "error:" line, exit 2, no traceback
        last = outcome.err.strip().splitlines()[-1] if outcome.err.strip() else ""
        if outcome.rc != 2 or "error:" not in last or "Traceback" in outcome.err:
            problems.append(("argparse exit without a clean 'error:' line", shorten(outcome.err, 300)))
        return problems
    if outcome.rc not in allowed_codes:
        problems.append((f"exit code {outcome.rc!r} (expected one of {allowed_codes})", shorten(outcome.err, 200)))
    if "Traceback" in outcome.err or "Traceback" in outcome.out:
        problems.append(("a traceback was printed", shorten(outcome.err or outcome.out, 300)))
    if outcome.rc == 2:
        lines = outcome.err.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("error: "):
            problems.append(("exit 2 without exactly one 'error: ' line on stderr", shorten(outcome.err, 300)))
    return problems


def run_folders(root: Path) -> list[Path]:
    """Folders under ``root`` that a run wrote (they hold a summary or a config)."""
    if not root.is_dir():
        return []
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and ((p / "summary.json").exists() or (p / "config.json").exists())
    )


def folder_problems(outcome: Outcome, out_dir: Path) -> list[tuple[str, str]]:
    """After main() returned: every run folder ends terminal; an input error wrote no folder."""
    problems: list[tuple[str, str]] = []
    folders = run_folders(out_dir)
    if outcome.rc == 2 and not outcome.extra.get("system_exit") and folders:
        problems.append(
            ("exit 2 (bad input) but a run folder was written first", f"{folders[0].name}; {shorten(outcome.err, 200)}")
        )
    for folder in folders:
        try:
            summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(("run folder without a readable summary.json after main() returned", repr(exc)))
            continue
        status = summary.get("status") if isinstance(summary, dict) else None
        if status not in TERMINAL:
            problems.append(
                (
                    f"summary.json status {status!r} after main() returned (expected terminal)",
                    shorten(summary.get("error") if isinstance(summary, dict) else summary, 200),
                )
            )
        elif outcome.rc == 1 and status == "failed" and not str(summary.get("error", "")).startswith("time limit"):
            problems.append(
                (
                    "run failed after its folder was written (input not refused up front?)",
                    shorten(summary.get("error"), 240),
                )
            )
    return problems


def expect_refused(outcome: Outcome, field_name: str | None = None) -> list[tuple[str, str]]:
    """The input must be refused: exit 2 with one line naming ``field_name`` (when given)."""
    if outcome.timed_out or outcome.raised or outcome.signal:
        return []  # reported by outcome_problems already
    if outcome.rc != 2:
        label = f"accepted (exit {outcome.rc}) but should be refused"
        return [(label, shorten(outcome.out.splitlines()[0] if outcome.out else outcome.err, 200))]
    if field_name and field_name not in outcome.err:
        return [("refused, but the error does not name the field/file", shorten(outcome.err, 240))]
    return []


# -- sentinel trees --------------------------------------------------------------------------------
def tree_digest(root: Path, skip: Path | None = None) -> dict[str, str]:
    """{relative path: content hash or link target or 'dir'} of everything under ``root``,
    without following links, except under ``skip``."""
    digest: dict[str, str] = {}
    skip_text = str(skip) if skip else None
    for current, dirs, files in os.walk(root, followlinks=False):
        if skip_text and (current == skip_text or current.startswith(skip_text + os.sep)):
            dirs[:] = []
            continue
        for name in dirs + files:
            path = Path(current) / name
            relative = str(path.relative_to(root))
            if skip_text and str(path) == skip_text:
                continue
            if path.is_symlink():
                digest[relative] = "link->" + os.readlink(path)
            elif path.is_dir():
                digest[relative] = "dir"
            else:
                try:
                    digest[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError as exc:
                    digest[relative] = f"unreadable {exc.errno}"
    return digest


def digest_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What changed between two digests: removed, added or modified paths."""
    changes = [f"removed {p}" for p in before if p not in after]
    changes += [f"added {p}" for p in after if p not in before]
    changes += [f"modified {p}" for p in before if p in after and before[p] != after[p]]
    return sorted(changes)
