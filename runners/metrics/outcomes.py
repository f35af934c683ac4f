"""How each request of a run ended: completed, failed, cancelled or not run.

Every request has a row in ``requests.parquet``, whatever happened to it. Its outcome, read from
the row (no column of its own, so the file's columns are unchanged):

- ``completed``: no ``error`` and a ``finish_s``: it ran to its last token;
- ``not_run``: never sent (``dispatch_s`` null) because the run ended first: its ``error`` is the
  run's end status, ``cancelled`` or ``failed`` (:data:`RUN_END_ERRORS`). Requests that had not
  arrived yet and requests the scheduler still held alike; no latency was measured for them.
  So is a multi-turn session's later turn never sent because an earlier turn failed
  (:data:`SESSION_ENDED`);
- ``cancelled``: sent (``dispatch_s`` set) and still in flight when the run was cancelled
  (``error`` ``cancelled``); its outcome is unknown;
- ``failed``: every other row with an ``error`` (the engine answered with an error, the request
  was in flight when the run failed, or the scheduler never dispatched it although nothing else
  could happen: a stall is the scheduler's failure).

As GuideLLM (successful / errored / incomplete) and vLLM's benchmark (completed / failed), only
requests that ran to an end of their own are judged: SLO attainment is over completed + failed
(a failure is a miss), latencies over completed; cancelled and not-run requests are counted
beside them (``summary.json`` ``cancelled``, ``not_run``; schema version 3), never as failures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: The outcomes, in the order they are shown.
OUTCOMES: tuple[str, ...] = ("completed", "failed", "cancelled", "not_run")
#: The ``error`` of a request in flight when the run was cancelled (the run's status).
CANCELLED = "cancelled"
#: The ``error`` values a run's end writes on the requests it cut off (the run's status:
#: runners.run.benchmark); with ``dispatch_s`` null the request was never sent: not run.
RUN_END_ERRORS: tuple[str, ...] = (CANCELLED, "failed")
#: The ``error`` of a multi-turn session's later turn that was never sent because an earlier turn
#: of its session failed (runners.workload.sessions): not run, like a request the run's end cut off.
SESSION_ENDED = "session ended: an earlier turn failed"
#: Every ``error`` that, on a request never sent, makes it *not run*.
NOT_SENT_ERRORS: tuple[str, ...] = (*RUN_END_ERRORS, SESSION_ENDED)


def outcome_of(error: str | None, dispatch_s: float | None, finish_s: float | None) -> str:
    """The outcome of one request row (see the module docstring)."""
    if error is None:
        return "completed" if finish_s is not None else "failed"
    if dispatch_s is None and error in NOT_SENT_ERRORS:
        return "not_run"
    return "cancelled" if error == CANCELLED else "failed"


def outcome_masks(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per outcome, a boolean array over ``rows`` (``requests.parquet`` columns); exactly one is
    true per row."""
    if not len(rows):
        return {name: np.zeros(0, dtype=bool) for name in OUTCOMES}
    error = rows["error"]
    has_error = error.notna().to_numpy()
    sent = rows["dispatch_s"].notna().to_numpy()
    run_end = error.isin(NOT_SENT_ERRORS).to_numpy()
    completed = ~has_error & rows["finish_s"].notna().to_numpy()
    not_run = has_error & ~sent & run_end
    cancelled = has_error & ~not_run & (error == CANCELLED).to_numpy()
    failed = ~completed & ~not_run & ~cancelled
    return {"completed": completed, "failed": failed, "cancelled": cancelled, "not_run": not_run}


def outcome_counts(rows: pd.DataFrame) -> dict[str, int]:
    """How many rows ended each way (:data:`OUTCOMES`)."""
    return {name: int(mask.sum()) for name, mask in outcome_masks(rows).items()}


def ran_text(total: int, not_run: int, reason: str | None = None) -> str:
    """The requests of a run that ran, for a progress line: ``1,240 of 2,000 requests ran (760
    not run: cancelled)``; ``2,000 of 2,000 requests ran`` when every request was sent. ``total``:
    the run's requests; ``not_run``: summary.json ``not_run`` (or :func:`outcome_counts`);
    ``reason``: why they did not run (the run's status), shown after ``not run``."""
    ran = total - not_run
    text = f"{ran:,} of {total:,} requests ran"
    if not_run:
        text += f" ({not_run:,} not run: {reason})" if reason else f" ({not_run:,} not run)"
    return text


def count_fields(rows: pd.DataFrame) -> dict[str, Any]:
    """The summary's request counts: ``requests`` (rows), ``completed``, ``failed``,
    ``cancelled``, ``not_run`` (their sum is ``requests``)."""
    return {"requests": int(len(rows)), **outcome_counts(rows)}
