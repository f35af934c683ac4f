"""Per-session and per-turn metrics of a multi-turn run (runners.workload.sessions), from the request
rows' ``session`` and ``turn`` columns (``requests.parquet`` version 7).

- ``sessions``: sessions sent, their turns (rows), turns per session, sessions whose every turn
  completed (``completed``), and sessions whose every turn completed and met its SLO
  (``all_turns_met``, and its share ``slo_attainment``): a person whose conversation had one late
  reply was not served on time.
- ``turns``: per turn index (1, 2, ...): requests, completed, mean and p99 TTFT of the completed
  ones (seconds, from the moment the turn was ready), and SLO attainment over the turns that ran to
  an end of their own (runners.metrics.outcomes), as the run's attainment is.

Nothing here for a run without sessions: :func:`session_summary` returns None.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from runners.metrics.outcomes import outcome_masks

#: The request columns these metrics read.
SESSION_COLUMNS: tuple[str, ...] = ("session", "turn", "ttft_s", "slo_met", "error", "dispatch_s", "finish_s")


def session_summary(rows: pd.DataFrame) -> dict[str, Any] | None:
    """``{"sessions": {...}, "turns": [...]}`` of the rows that are sessions' turns (module
    docstring), or None when none is."""
    if "session" not in rows.columns:
        return None
    turns = rows[rows["session"].notna()]
    if not len(turns):
        return None
    outcomes = outcome_masks(turns)
    completed = outcomes["completed"]
    judged = completed | outcomes["failed"]
    met = turns["slo_met"].fillna(False).astype(bool).to_numpy() & completed
    frame = pd.DataFrame(
        {"session": turns["session"].to_numpy(), "completed": completed, "met": met, "turn": turns["turn"].to_numpy()}
    )
    per_session = frame.groupby("session", sort=False).agg(completed=("completed", "all"), met=("met", "all"))
    sessions = int(len(per_session))
    all_met = int(per_session["met"].sum())
    by_turn = []
    ttft = turns["ttft_s"].to_numpy(dtype=float, na_value=np.nan)
    index = turns["turn"].to_numpy(dtype=np.int64)
    for turn in sorted(set(index.tolist())):
        at = index == turn
        done = ttft[at & completed]
        ran = int((at & judged).sum())
        by_turn.append(
            {
                "turn": int(turn),
                "requests": int(at.sum()),
                "completed": int((at & completed).sum()),
                "ttft_mean_s": float(done.mean()) if done.size else None,
                "ttft_p99_s": float(np.percentile(done, 99)) if done.size else None,
                "slo_attainment": float((at & met).sum()) / ran if ran else None,
            }
        )
    return {
        "sessions": {
            "sessions": sessions,
            "turns": int(len(turns)),
            "turns_per_session_mean": len(turns) / sessions,
            "completed": int(per_session["completed"].sum()),
            "all_turns_met": all_met,
            "slo_attainment": all_met / sessions,
        },
        "turns": by_turn,
    }
