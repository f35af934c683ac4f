"""Drive generated CLI cases through the sandbox and check the common properties."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fuzzing.checks import Failures, folder_problems, outcome_problems
from tests.fuzzing.sandbox import Outcome, Sandbox

#: Multiplies every generated-case count (1 = the CI size; raise it for a longer local fuzz).
SCALE = float(os.environ.get("SCHEDLAB_FUZZ_SCALE", "1"))
SEED = int(os.environ.get("SCHEDLAB_FUZZ_SEED", "1234"))


def count(base: int) -> int:
    return max(1, int(base * SCALE))


#: The generated cases of each fuzz test are split by index into two disjoint shares: every
#: QUICK_EVERY-th case (0, 4, 8, ...) in the quick loop, the others marked ``e2e`` (the full suite,
#: CI). CI runs every case once; the quick loop a fixed quarter of them, the same cases each time.
QUICK_EVERY = 4
#: ``@pytest.mark.parametrize("share", SHARES)`` on a fuzz test: its quick and its rest share.
SHARES = [pytest.param("quick", id="quick"), pytest.param("rest", id="rest", marks=pytest.mark.e2e)]


def in_share(index: int, share: str) -> bool:
    """Whether case ``index`` belongs to ``share`` ("quick" or "rest")."""
    return (index % QUICK_EVERY == 0) == (share == "quick")


def shared(n: int, share: str) -> list[int]:
    """The indices below ``n`` of the cases in ``share``."""
    return [index for index in range(n) if in_share(index, share)]


def case_rng(name: str, index: int) -> random.Random:
    """A generator for one case, so any case can be regenerated alone from its name and index."""
    return random.Random(f"{SEED}/{name}/{index}")


@dataclass
class CaseRunner:
    """Runs ``main(argv)`` cases in the sandbox, each with a fresh ``--out`` folder, and stops
    waiting long for hangs once a few were seen (each one otherwise costs a full time limit)."""

    sandbox: Sandbox
    workdir: Path
    failures: Failures
    timeout_s: float = 5.0
    short_timeout_s: float = 2.0
    hang_budget: int = 3
    mem_mb: int = 2048
    hangs: int = 0
    number: int = 0

    def folder(self) -> Path:
        self.number += 1
        path = self.workdir / f"case-{self.number:04d}"
        path.mkdir(parents=True)
        return path

    def case_file(self, name: str, data: bytes) -> tuple[Path, Path]:
        """A new case folder holding ``data`` as ``name``: (that file, the case's results folder)."""
        folder = self.folder()
        path = folder / name
        path.write_bytes(data)
        return path, folder / "results"

    def cli(
        self,
        argv: list[Any],
        case_input: Any,
        out_dir: Path | None = None,
        cwd: Path | None = None,
        check_folders: bool = True,
        expect: Callable[[Outcome], list[tuple[str, str]]] | None = None,
    ) -> Outcome:
        """Run one case and record every broken property under ``case_input``: the common ones,
        and what ``expect(outcome)`` reports (only when main() returned normally)."""
        timeout = self.timeout_s if self.hangs < self.hang_budget else self.short_timeout_s
        outcome = self.sandbox.cli([str(a) for a in argv], cwd=cwd, timeout_s=timeout, mem_mb=self.mem_mb)
        if outcome.timed_out:
            self.hangs += 1
        problems = outcome_problems(outcome)
        if check_folders and out_dir is not None and not outcome.timed_out:
            problems += folder_problems(outcome, out_dir)
        if expect is not None and outcome.clean:
            problems += expect(outcome)
        self.failures.case()
        self.failures.extend(problems, case_input)
        return outcome
