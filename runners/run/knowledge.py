"""What a run's policy knew that no deployment would: its oracles, said once for every view.

A policy never sees a request's target length, this run's own length statistics or the
simulated engine's true latency model unless the user chose an oracle (output_predictor oracle or
noisy-oracle, output_prior workload-oracle, an in-engine output_prior max_tokens, or the
simulator's engine.planning_model engine-truth). :func:`run_oracles` lists those a run config
chose, one sentence each; a run's summary.json keeps the list (``oracle``, schema 5) and every
view that names the run's scheduler marks it with :func:`oracle_tag`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runners.schedulers.predictors import oracle_knowledge
from runners.store.models import RunSummary

#: The mark a view adds to the scheduler's name of a run that used an oracle.
ORACLE_TAG = "oracle"


def run_oracles(config: Any) -> list[str]:
    """The oracles the run ``config`` (a RunConfig) gives its policy, one sentence each; empty
    when the policy sees nothing of the run's own future."""
    params = config.scheduler.params
    if isinstance(params, Mapping):  # a config's raw parameters: read as the scheduler's model reads them
        from runners.registry import scheduler_class

        params = scheduler_class(config.scheduler.name).Params.model_validate(params)
    said = oracle_knowledge(params)
    if getattr(config.engine, "planning_model", None) == "engine-truth":
        said.append("oracle: the simulated engine's own latency model (engine.planning_model engine-truth)")
    return said


def summary_oracles(summary: RunSummary | None) -> list[str]:
    """The oracles a run's summary records (an empty list for a run without any, or written
    before schema 5, when results did not record them)."""
    value = summary.oracle if summary is not None else None
    return [str(item) for item in value] if isinstance(value, list) else []


def oracle_tag(summary: RunSummary | None) -> str:
    """`` (oracle)`` for a run whose policy used an oracle, else empty: appended to its scheduler's name."""
    return f" ({ORACLE_TAG})" if summary_oracles(summary) else ""


def display_name(scheduler: str | None, oracles: Sequence[str] | None = None) -> str | None:
    """A scheduler as views name it: its name, `` (oracle)`` added when ``oracles`` (the oracles
    its policy used) is not empty; None without a name."""
    return f"{scheduler}{f' ({ORACLE_TAG})' if oracles else ''}" if scheduler else None


def scheduler_display(summary: RunSummary | None) -> str | None:
    """A run's scheduler as views name it (:func:`display_name` of its summary); None for a
    summary without a scheduler (an imported run)."""
    return display_name(summary.scheduler, summary_oracles(summary)) if summary is not None else None
