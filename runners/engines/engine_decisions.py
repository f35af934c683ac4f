"""Reading the in-engine schedulers' decisions while a run goes (no vLLM import).

A vLLM server launched with one of schedlab's scheduler classes appends one JSON object per
recorded step to its decisions file (``$SCHEDLAB_ENGINE_DECISIONS`` in the server's environment,
``engine-decisions-{instance}.jsonl`` in the run folder; the fields are listed in
:mod:`runners.schedulers.vllm.base`). The wall-clock driver reads each instance's file at
every telemetry sample with an :class:`EngineDecisionTracker`, which turns the decisions recorded
since the previous sample into the time series' ``engine_*`` columns (:data:`SAMPLE_COLUMNS`).

The file is read incrementally: the reader remembers the byte offset after the last whole line
and reads only what was appended since; a line without its newline yet (the engine is writing
it) is left for the next read. A line that is not a JSON object with an integer ``limit`` is
skipped and counted (:attr:`DecisionReader.malformed`), never raised. A file that does not exist
yet (the engine has recorded nothing) reads as no decisions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The environment variable naming the file the in-engine scheduler writes its decisions to (the
#: contract with runners.schedulers.vllm's classes, which write it).
DECISIONS_ENV = "SCHEDLAB_ENGINE_DECISIONS"
#: Prefix of the decision lines in the server log.
DECISION_LOG_PREFIX = "SCHEDLAB_DECISION "

#: The time-series columns a tracker fills (all requests; None when nothing is known):
#: ``engine_limit``: the running limit of the latest decision; ``engine_held_back``: the waiting
#: requests that decision's limit kept out; ``engine_admitted``: the requests moved from waiting
#: to running by the steps recorded since the previous sample, summed.
SAMPLE_COLUMNS: tuple[str, ...] = ("engine_limit", "engine_held_back", "engine_admitted")

#: Bytes read at most per call, so a sample never stalls on a huge backlog (the rest comes next time).
READ_LIMIT_BYTES = 4 * 2**20


def decisions_path(environment: Mapping[str, str]) -> Path | None:
    """The decisions file a launched server was given (its environment, ``{instance}`` already
    replaced), or None when it runs no schedlab scheduler class that records them."""
    value = environment.get(DECISIONS_ENV)
    return Path(value) if value else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class DecisionReader:
    """The decisions appended to one JSON-lines file since the previous :meth:`read`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0  # bytes of whole lines read so far
        self.lines = 0  # whole lines read so far (blank ones included)
        self.malformed = 0  # of which skipped: not a JSON object with an integer limit
        self._in_long_line = False  # inside a line longer than READ_LIMIT_BYTES: skip to its end

    def read(self) -> list[dict[str, Any]]:
        """The well-formed decisions in the whole lines appended since the last call, in file
        order; [] when the file does not exist (yet) or cannot be read now."""
        try:
            with open(self.path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < self.offset:  # replaced or truncated: start again from its beginning
                    self.offset = 0
                handle.seek(self.offset)
                chunk = handle.read(READ_LIMIT_BYTES)
        except OSError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            if len(chunk) >= READ_LIMIT_BYTES:  # no decision is this long: skip it, count it once
                self.offset += len(chunk)
                self.malformed += not self._in_long_line
                self._in_long_line = True
            return []
        self.offset += end + 1
        lines = chunk[:end].split(b"\n")
        if self._in_long_line:  # the end of a skipped line
            lines, self._in_long_line = lines[1:], False
            self.lines += 1
        decisions = []
        for raw in lines:
            self.lines += 1
            if not raw.strip():
                continue
            try:
                decision = json.loads(raw)
            except ValueError:  # UnicodeDecodeError is a ValueError
                self.malformed += 1
                continue
            if not isinstance(decision, dict) or _integer(decision.get("limit")) is None:
                self.malformed += 1
                continue
            decisions.append(decision)
        return decisions


class EngineDecisionTracker:
    """One instance's ``engine_*`` time-series values, sample by sample (see :data:`SAMPLE_COLUMNS`).

    ``engine_limit`` and ``engine_held_back`` are those of the latest decision recorded up to the
    sample: the engine records a step at least every ``$SCHEDLAB_ENGINE_DECISION_INTERVAL_S``
    (0.25 s) while it has work and nothing while idle, so between records the latest one still
    holds. ``engine_admitted``: the requests admitted since the previous sample, exact from the
    records' running ``admitted_total`` (every step counted, recorded or not); from a file without
    it (an older plugin), the sum of ``admitted`` over the records read, a lower bound (steps not
    recorded are missing).
    """

    def __init__(self, path: Path) -> None:
        self.reader = DecisionReader(path)
        self.latest: dict[str, Any] | None = None
        self.admitted_total = 0  # the latest record's admitted_total

    def sample(self) -> dict[str, int | None]:
        """The ``engine_*`` columns now: None each until the engine has recorded a decision."""
        decisions = self.reader.read()
        if decisions:
            self.latest = decisions[-1]
        if self.latest is None:
            return dict.fromkeys(SAMPLE_COLUMNS)
        totals = [_integer(decision.get("admitted_total")) for decision in decisions]
        if decisions and all(total is not None for total in totals):
            admitted = max(0, int(totals[-1]) - self.admitted_total)  # type: ignore[arg-type]
            self.admitted_total = int(totals[-1])  # type: ignore[arg-type]
        else:
            admitted = sum(_integer(decision.get("admitted")) or 0 for decision in decisions)
        return {
            "engine_limit": _integer(self.latest.get("limit")),
            "engine_held_back": _integer(self.latest.get("held_back")),
            "engine_admitted": admitted,
        }

    @property
    def malformed(self) -> int:
        """Lines of the file skipped so far as not a decision."""
        return self.reader.malformed
