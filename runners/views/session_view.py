"""The Results page's view of multi-turn runs (issue 31 item 7): per-session outcomes per run.

A multi-turn run (``workload.multi_turn``) stores ``summary.sessions`` (sessions sent, turns,
sessions whose every turn completed, sessions whose every turn met its SLO and their share) and
``summary.turns`` (per turn index; runners.metrics.sessions). :func:`session_table` is the table of
the first, one row per run, labels and units from the catalog
(:data:`runners.metrics.catalog.SESSION_METRICS`); the per-turn TTFT chart is
:func:`runners.views.charts.turn_ttft_chart`. Runs without sessions have no row: nothing new is
shown for them. Nothing here imports streamlit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from runners.metrics.catalog import SESSION_METRICS, summary_value
from runners.views.charts import has_turns

#: The sessions table's first two columns: the run's display name and its id.
RUN_COLUMN = "run"
RUN_ID_COLUMN = "run id"
#: What the sessions table's figures mean, said under it on the Results page.
SESSIONS_NOTE = (
    "A session is one conversation sent turn by turn; the run's request count is its number of sessions. "
    "A session is within its SLO when every one of its turns completed and met its task's SLO: one late reply "
    "and the person was not served on time. The TTFT of a turn counts from the moment it was ready (the "
    "previous reply plus the think time), so queueing is included."
)


def session_runs(summaries: Sequence[Any]) -> list[Any]:
    """The summaries of ``summaries`` that are multi-turn runs (with ``summary.turns``), in order."""
    return [summary for summary in summaries if has_turns(summary)]


def session_table(summaries: Sequence[Any], names: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per multi-turn run of ``summaries`` (others are left out): its display name
    (``names``: run id -> name; the run id where none), its run id, then each
    :data:`runners.metrics.catalog.SESSION_METRICS` value as the catalog formats it (``-`` when
    missing), under the metric's label (unit in brackets)."""
    rows = []
    for summary in session_runs(summaries):
        run_id = str(summary.run_id)
        row = {RUN_COLUMN: (names or {}).get(run_id, run_id), RUN_ID_COLUMN: run_id}
        for entry in SESSION_METRICS:
            row[entry.label] = entry.format(summary_value(summary, entry.key))
        rows.append(row)
    return pd.DataFrame(rows, columns=[RUN_COLUMN, RUN_ID_COLUMN, *(entry.label for entry in SESSION_METRICS)])


def session_column_help() -> dict[str, str]:
    """Column label -> what it counts, for the sessions table's column tooltips: the catalog's
    definitions (:data:`runners.metrics.catalog.SESSION_METRICS`), where one is given."""
    return {entry.label: entry.definition for entry in SESSION_METRICS if entry.definition}
