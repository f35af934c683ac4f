"""A study's planned runs (runners.study.runner plans them, runners.study.executors runs them): the records
both sides share, in a module of their own so the executors need not import the study."""

from __future__ import annotations

from dataclasses import dataclass, field

from runners.run.config import RunConfig


@dataclass(frozen=True)
class StudyMember:
    """One run of a study: its id, scheduler, seed, arrival rate (req/s) and full config."""

    run_id: str
    scheduler: str
    seed: int
    rate: float | None
    config: RunConfig


@dataclass(frozen=True)
class StudyPlan:
    """The planned runs of a study, baseline first among ``schedulers``; ``rates`` (req/s) empty
    when the study has the config's one rate."""

    study_id: str
    baseline: str
    schedulers: list[str]
    seeds: list[int]
    members: list[StudyMember]
    rates: list[float] = field(default_factory=list)
    workers: int | None = None  # runs at once (config trials.workers); None: all cores
    executor: str | None = None  # serial | process | ray (config trials.executor); None: see runners.study.executors
    config: RunConfig | None = None  # the study's own config (recorded in study.json for --resume)
