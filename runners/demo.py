"""The Demo page's ready comparison, on the simulator: one study, and the bundled results that replay it.

Setting (chosen so that scheduling matters and memory binds, not to favour one scheduler; picked
on fcfs's queue and KV usage at exploration seeds 100-102, never at the study's seeds): the mixed
chat + code stand-in workload, 1,000 requests arriving as a Poisson process at 4 req/s, the paper
SLOs, one simulated Qwen2.5-7B / 2 x V100 instance that runs at most 64 requests at a time
(max_num_seqs 64) with its KV cache cut to 16,000 tokens (about 0.9 GB of this model's KV, as on
a GPU shared with other work): 64 requests of this workload need more than that, so memory, not
slots, limits the batch, the engine preempts, and requests queue. Every scheduler keeps its
registry defaults, except static batching's batch size, set to the engine's 64, and mcsf's output
lengths: predicted from a per-task Gaussian warmed from the workload, as slo-sa's, not the oracle.

It is one study (:mod:`runners.study`), id ``demo``: the six schedulers at each of the seeds
0..9, fixed in advance (never chosen by outcome), paired by seed (at one seed every scheduler
gets the identical requests and arrival times), fcfs the baseline. Members are the runs
``demo-<scheduler>-s<seed>``; the study record is ``results/demo/study.json``.
``python -m runners demo`` reruns it and rewrites those folders (the bundled copies), and only
those: anything at one of those names that is not its own stops it, before anything is removed.

The headline sentences (:func:`headline`) state each number with its 95% interval over seeds
and claim a difference only where the paired interval excludes zero (the study's verdict).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from runners.config import RunConfig, parse_config
from runners.errors import SchedlabError
from runners.knowledge import scheduler_display
from runners.metrics.catalog import Metric, metric, timeseries_metric
from runners.metrics.sawtooth import sawtooth_cycles
from runners.metrics.seed_statistics import SINGLE_SEED_NOTE
from runners.result_store import (
    DEFAULT_RESULTS_DIR,
    RunData,
    _results_root,
    delete_run,
    owned_run_folder,
)
from runners.run_ids import RUN_ID_PATTERN
from runners.study import STUDY_FILE, StudyMember, StudyPlan, StudyResult, plan_study, read_study, run_study
from runners.timestamps import id_stamp

DEMO_STUDY_ID = "demo"
#: The study's seeds, fixed in advance: 0..9.
DEMO_SEEDS: tuple[int, ...] = tuple(range(10))
DEMO_SCHEDULERS: tuple[str, ...] = ("fcfs", "static", "slo-sa", "dynamic-mem", "dynamic-sla", "mcsf")
#: The engine's slots (max_num_seqs) and KV cache (tokens): memory binds before the slots do.
DEMO_SLOTS = 64
DEMO_KV_TOKENS = 16_000
#: Scheduler parameters of the study; each scheduler gets the ones it takes: static batches of the
#: engine's slots; every predicting scheduler (slo-sa, mcsf) predicts output lengths the same way,
#: a per-task Gaussian warmed from the workload, so none is told a request's true length (mcsf's
#: registry default is the oracle its paper assumes).
DEMO_PARAMS: dict[str, Any] = {"batch_size": DEMO_SLOTS, "output_predictor": "gaussian"}
DEMO_BASELINE = "fcfs"
DEMO_REQUESTS = 1000
DEMO_RATE_RPS = 4.0
#: Run ids of live reruns start with this (never a member id of the bundled study).
LIVE_PREFIX = "demo-live-"
#: The catalog keys the Demo states as headlines.
HEADLINE_KEYS: tuple[str, ...] = ("slo_attainment", "e2e_s.mean", "G")


def demo_config(
    seeds: Sequence[int] = DEMO_SEEDS,
    study_id: str = DEMO_STUDY_ID,
    pace: float | None = None,
    requests: int = DEMO_REQUESTS,
) -> RunConfig:
    """The study's config: the demo setting with ``trials`` = the demo schedulers at ``seeds``.
    ``pace`` replays the simulator in real time x pace (a live rerun); ``requests`` other than
    1,000 only for quick checks."""
    engine: dict[str, Any] = {"kind": "sim", "max_num_seqs": DEMO_SLOTS, "kv_capacity_tokens": DEMO_KV_TOKENS}
    if pace is not None:
        engine["pace"] = pace
    return parse_config(
        {
            "run_id": study_id,
            "engine": engine,
            "workload": {
                "requests": requests,
                "seed": seeds[0],
                "arrival": {"process": "poisson", "rate": DEMO_RATE_RPS},
            },
            "slo": {"preset": "paper"},
            "scheduler": {"name": DEMO_BASELINE, "params": DEMO_PARAMS},
            "trials": {"schedulers": list(DEMO_SCHEDULERS), "seeds": list(seeds), "baseline": DEMO_BASELINE},
            "notes": "schedlab demo comparison",
        }
    )


def demo_plan(seeds: Sequence[int] = DEMO_SEEDS, requests: int = DEMO_REQUESTS) -> StudyPlan:
    """The bundled study's runs: every demo scheduler at every seed, ids ``demo-<scheduler>-s<seed>``."""
    return plan_study(demo_config(seeds, requests=requests), DEMO_STUDY_ID)


def live_rerun_configs(seed: int, pace: float | None, stamp: str | None = None) -> list[RunConfig]:
    """One seed of the study, for watching live: the demo schedulers at ``seed``, run ids
    ``demo-live-<UTC stamp>-<scheduler>-s<seed>`` (plain runs, no study record; the verdict
    stays the bundled study's)."""
    stamp = stamp or id_stamp()
    plan = plan_study(demo_config([seed], f"{LIVE_PREFIX}{stamp}", pace))
    return [member.config for member in plan.members]


# -- the bundle -----------------------------------------------------------------------------------
def _study_folder_to_replace(base: Path) -> Path | None:
    """``base/demo`` when it is the demo's own study folder (a real folder directly inside the
    results folder holding study.json or nothing), None when absent; SchedlabError otherwise."""
    folder = base / DEMO_STUDY_ID
    if not os.path.lexists(folder):
        return None
    if folder.is_symlink() or not folder.is_dir():
        raise SchedlabError(
            f"demo: {folder} is a symbolic link or not a folder, not the demo's study; nothing removed "
            "(move it away, then run 'python -m runners demo' again)"
        )
    extra = sorted(entry.name for entry in folder.iterdir() if entry.name != STUDY_FILE)
    if extra:
        raise SchedlabError(
            f"demo: {folder} holds {extra[0]!r} besides {STUDY_FILE}, so it is not the demo's study; nothing removed"
        )
    return folder


def _old_members(folder: Path | None) -> list[str]:
    """Member ids of the study record in ``folder`` that are demo member ids (``demo-<scheduler>-
    s<seed>``); nothing when the record is unreadable (a damaged bundle is replaced all the same)."""
    if folder is None or not (folder / STUDY_FILE).is_file():
        return []
    try:
        record = read_study(folder)
    except SchedlabError:
        return []
    names = [run.get("run_id") for run in record["runs"]]
    return [
        name
        for name in names
        if isinstance(name, str)
        and RUN_ID_PATTERN.match(name)
        and any(
            name.startswith(f"{DEMO_STUDY_ID}-{s}-s") and name.rsplit("-s", 1)[1].isdigit() for s in DEMO_SCHEDULERS
        )
    ]


def clear_demo_results(results_root: str | Path, plan: StudyPlan) -> list[str]:
    """Remove the demo study's folder and its member runs (those ``plan`` will write and those the
    old record lists), after checking every one is the demo's own: a real run folder (or the study
    folder holding study.json only) at that exact name. Anything else stops it with one line
    before anything is removed. Returns the removed names."""
    base = _results_root(results_root)
    folder = _study_folder_to_replace(base)
    members = list(dict.fromkeys([m.run_id for m in plan.members] + _old_members(folder)))
    present = [run_id for run_id in members if os.path.lexists(base / run_id)]
    for run_id in present:
        owned_run_folder(base, run_id, "replace")
    leftover = base / f".{DEMO_STUDY_ID}.creating"
    if os.path.lexists(leftover):
        raise SchedlabError(
            f"demo: {leftover} is left from an interrupted study; remove it, then run 'python -m runners demo' again"
        )
    for run_id in present:
        delete_run(base, run_id)
    if folder is not None:
        (folder / STUDY_FILE).unlink(missing_ok=True)
        folder.rmdir()
    return present + ([DEMO_STUDY_ID] if folder is not None else [])


def make_demo_results(
    results_root: str | Path = DEFAULT_RESULTS_DIR,
    seeds: Sequence[int] = DEMO_SEEDS,
    progress: Callable[[int, int, StudyMember], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    requests: int = DEMO_REQUESTS,
) -> StudyResult:
    """Run the demo study and (re)write ``demo`` and ``demo-<scheduler>-s<seed>`` under
    ``results_root`` (see :func:`clear_demo_results` for what it refuses to replace)."""
    plan = demo_plan(seeds, requests)
    clear_demo_results(results_root, plan)
    return run_study(plan, results_root, progress=progress, should_stop=should_stop)


# -- reading it -----------------------------------------------------------------------------------
MISSING_MESSAGE = (
    "The bundled demo study (results/demo/study.json and its runs results/demo-<scheduler>-s<seed>) "
    "is missing. Run `python -m runners demo` to make it (a few minutes)."
)


def read_demo_study(results_root: str | Path = DEFAULT_RESULTS_DIR) -> dict[str, Any]:
    """The bundled study's record, checked for what the Demo shows: SchedlabError (one line,
    saying how to remake it) when it is missing, damaged, unfinished, or not the demo's."""
    base = _results_root(results_root)
    folder = base / DEMO_STUDY_ID
    if folder.is_symlink() or not (folder / STUDY_FILE).is_file():
        raise SchedlabError(MISSING_MESSAGE)
    remake = "; run `python -m runners demo` to remake it"
    try:
        record = read_study(folder)
    except SchedlabError as exc:
        raise SchedlabError(f"the bundled demo study is damaged: {exc}{remake}") from None
    if record["study_id"] != DEMO_STUDY_ID or record["baseline"] != DEMO_BASELINE:
        raise SchedlabError(
            f"{folder / STUDY_FILE}: not the demo's study (id {record['study_id']!r}, baseline "
            f"{record['baseline']!r}){remake}"
        )
    if record.get("status") not in ("done", "failed"):
        raise SchedlabError(f"{folder / STUDY_FILE}: the demo study is {record.get('status')!r}, not finished{remake}")
    for key in HEADLINE_KEYS:
        entry = record["statistics"].get(key)
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("schedulers"), dict)
            or not isinstance(entry.get("vs_baseline"), dict)
        ):
            raise SchedlabError(f"{folder / STUDY_FILE}: statistics of {key!r} are missing{remake}")
    return record


def _number(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a number (a bool is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _unit(m: Metric) -> str:
    return m.unit if m.unit == "%" else f" {m.unit}" if m.unit else ""


def value_text(m: Metric, value: Any) -> str:
    """A stored value in display units with its unit: ``76.0%``, ``11.57 s``."""
    return f"{m.format(value)}{_unit(m)}" if _number(value) else "-"


def interval_text(m: Metric, low: Any, high: Any) -> str:
    """``70.0-82.0%`` in display units; ``no interval`` when either end is missing."""
    if not (_number(low) and _number(high)):
        return "no interval"
    return f"{m.format(low)} to {m.format(high)}{_unit(m)}"


def _signed(m: Metric, value: Any) -> str:
    text = m.format(value)
    return text if text.startswith("-") else f"+{text}"


def _difference_unit(m: Metric) -> str:
    return " points" if m.unit == "%" else _unit(m)


@dataclass(frozen=True)
class SchedulerResult:
    """One scheduler's value of one metric over the study's seeds, and against the baseline."""

    scheduler: str
    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    pair: dict[str, Any] | None  # vs_baseline entry; None for the baseline


def scheduler_results(record: dict[str, Any], key: str) -> list[SchedulerResult]:
    """Per scheduler (the study's order, baseline first) the statistics of ``key`` in study.json."""
    entry = record["statistics"].get(key) or {}
    per, versus = entry.get("schedulers") or {}, entry.get("vs_baseline") or {}
    names = [record["baseline"]] + [name for name in record.get("schedulers") or [] if name != record["baseline"]]
    results = []
    for name in names:
        stats = per.get(name)
        if not isinstance(stats, dict):
            continue
        pair = versus.get(name) if name != record["baseline"] else None
        results.append(
            SchedulerResult(
                name,
                int(stats.get("n") or 0),
                stats.get("mean"),
                stats.get("ci_low"),
                stats.get("ci_high"),
                pair if isinstance(pair, dict) else None,
            )
        )
    return results


def card_value(key: str, result: SchedulerResult) -> str:
    """A card's value: the mean over seeds in display units (``83.2%``); ``(1 seed)`` added when
    the study has one seed."""
    m = metric(key)
    if not _number(result.mean):
        return "-"
    return f"{value_text(m, result.mean)} (1 seed)" if result.n == 1 else value_text(m, result.mean)


def card_interval(key: str, result: SchedulerResult) -> str:
    """The line under a card's value: ``± 4.0 (95% interval 79.2 to 87.3%)``, half the Student t
    interval (symmetric about the mean), or why there is none."""
    m = metric(key)
    if not (_number(result.ci_low) and _number(result.ci_high)):
        return SINGLE_SEED_NOTE if result.n == 1 else "no interval"
    return (
        f"± {m.format((result.ci_high - result.ci_low) / 2)} (95% interval "
        f"{interval_text(m, result.ci_low, result.ci_high)})"
    )


def card_delta(key: str, result: SchedulerResult, baseline: str) -> str | None:
    """A card's change against the baseline: the mean paired difference (``+28.9 pts vs fcfs``),
    or None for the baseline."""
    if result.pair is None:
        return None
    return f"{metric(key).format_change(result.pair.get('diff_mean'))} vs {baseline}"


def card_verdict(result: SchedulerResult, baseline: str) -> str:
    """The verdict under a card, with seeds better: ``clearly better than fcfs (9 of 10 seeds
    better)``, ``no clear difference from fcfs (...)``; ``the baseline`` for the baseline."""
    pair = result.pair
    if pair is None:
        return "the baseline"
    seeds = f"{int(pair.get('wins') or 0)} of {int(pair.get('n_pairs') or 0)} seeds better"
    if pair.get("verdict") in ("better", "worse"):
        return f"clearly {pair['verdict']} than {baseline} ({seeds})"
    return f"no clear difference from {baseline} ({seeds})"


def scheduler_sentence(key: str, result: SchedulerResult, baseline: str, what: str = "{value}") -> str:
    """One scheduler's headline in plain words: its mean (``what`` with ``{value}`` in it, e.g.
    ``served {value} of requests on time``) with the 95% interval and seed count, and (not for
    the baseline) the paired difference with its interval and seeds better."""
    m = metric(key)
    seeds = f"{result.n} seed{'s' if result.n != 1 else ''}"
    head = (
        f"**{result.scheduler}** {what.format(value=value_text(m, result.mean))} (95% interval "
        f"{interval_text(m, result.ci_low, result.ci_high)}, {seeds})"
    )
    pair = result.pair
    if pair is None:
        return head + "."
    n_pairs, wins = int(pair.get("n_pairs") or 0), int(pair.get("wins") or 0)
    diff, low, high = pair.get("diff_mean"), pair.get("ci_low"), pair.get("ci_high")
    if not _number(diff):
        return head + f"; no seed to compare with {baseline}."
    if diff == 0 and low == 0 and high == 0:
        return head + f": **no difference** from {baseline}, the same at each of the {n_pairs} paired seeds."
    more = ("longer" if diff > 0 else "shorter") if m.unit in ("s", "ms") else ("more" if diff > 0 else "less")
    interval = (
        f"95% interval {_signed(m, low)} to {_signed(m, high)}{_difference_unit(m)}"
        if _number(low) and _number(high)
        else "no interval"
    )
    amount = f"{m.format(abs(diff))}{_difference_unit(m)} {more} on average ({interval})"
    better = f"better at {wins} of {n_pairs} paired seeds"
    if pair.get("verdict") == "no difference":
        return head + f": **no clear difference** from {baseline}: {amount}; {better}."
    return head + f": **{pair.get('verdict')}** than {baseline}: {amount}; {better}."


def headline(record: dict[str, Any]) -> str:
    """The page's headline on SLO attainment: which schedulers served clearly more or fewer
    requests on time than the baseline at 95% (the paired verdict), and which show no clear
    difference. It never names a winner the intervals do not support."""
    key = "slo_attainment"
    baseline = record["baseline"]
    by_verdict: dict[str, list[str]] = {"better": [], "worse": [], "no difference": []}
    for result in scheduler_results(record, key):
        if result.pair is not None and result.pair.get("verdict") in by_verdict:
            by_verdict[str(result.pair["verdict"])].append(f"**{result.scheduler}**")
    seeds = len(record.get("seeds") or [])
    parts = []
    if by_verdict["better"]:
        parts.append(f"{', '.join(by_verdict['better'])} served clearly more requests on time than {baseline}")
    if by_verdict["worse"]:
        parts.append(f"{', '.join(by_verdict['worse'])} clearly fewer")
    if by_verdict["no difference"]:
        parts.append(f"{', '.join(by_verdict['no difference'])} no clear difference")
    if not by_verdict["better"]:
        parts.insert(0, f"No strategy served clearly more requests on time than {baseline}")
    return "; ".join(parts) + f" (95% confidence, {seeds} seeds)."


# -- the memory chart's caption: what the shown runs' KV usage did, measured -----------------------
#: A cache at least this full (a fraction) counts as full.
KV_FULL = 0.95
#: Rise-and-fall cycles (runners.metrics.sawtooth.sawtooth_cycles) from which a run is said to
#: fill and drain the cache in a sawtooth.
SAWTOOTH_CYCLES = 3


@dataclass(frozen=True)
class KVUsage:
    """One run's KV-cache usage over its time series (mean over instances per sample time):
    ``peak`` and ``full_share`` (share of samples at least :data:`KV_FULL` full) as fractions,
    ``cycles`` of rise and fall (:func:`runners.metrics.sawtooth.sawtooth_cycles`)."""

    scheduler: str
    peak: float | None
    full_share: float | None
    cycles: int


def kv_usage(run: RunData) -> KVUsage:
    """What ``run``'s KV cache did (see :class:`KVUsage`); None values for a run without samples."""
    frame = run.timeseries
    series = frame.groupby("t_s")["kv_usage"].mean().dropna().to_numpy() if len(frame) else np.zeros(0)
    name = str(scheduler_display(run.summary) or run.run_id)
    if not series.size:
        return KVUsage(name, None, None, 0)
    return KVUsage(name, float(series.max()), float(np.mean(series >= KV_FULL)), sawtooth_cycles(series))


def kv_sentence(usage: KVUsage) -> str:
    """One run's KV usage in words, numbers measured: ``fcfs peaks at 100.0% and is at least 95%
    full 86% of the time``; a run that never fills the cache says so (``never fills it: peaks at
    1.2%``); a sawtooth is named only when it rose and fell at least :data:`SAWTOOTH_CYCLES` times."""
    kv = timeseries_metric("kv_usage")
    if usage.peak is None:
        return f"**{usage.scheduler}** has no memory samples"
    peak = value_text(kv, usage.peak)
    if usage.peak < KV_FULL:
        text = f"**{usage.scheduler}** never fills it: it peaks at {peak}"
    else:
        text = (
            f"**{usage.scheduler}** peaks at {peak} and is at least {value_text(kv, KV_FULL)} full "
            f"{usage.full_share:.0%} of the time"
        )
    if usage.cycles >= SAWTOOTH_CYCLES:
        text += f", rising and falling {usage.cycles} times (a sawtooth)"
    return text


def kv_caption(runs: Sequence[RunData], seed: Any) -> str:
    """The Demo's memory chart caption: what the chart shows, then each shown run's measured KV
    usage (:func:`kv_sentence`) and evictions; no claim the numbers do not carry."""
    usages = [kv_usage(run) for run in runs]
    evictions = "; ".join(
        f"{run.summary.get('scheduler', run.run_id)} {run.summary.get('preemptions', 0):,}" for run in runs
    )
    return (
        f"One seed only (seed {seed}), to show how memory is used, not which strategy is better: the GPU "
        "memory (KV cache) held for requests over time, as a share of the cache (0-100%). "
        + "; ".join(kv_sentence(usage) for usage in usages)
        + f". A full cache makes the engine evict requests and recompute them later; evictions "
        f"(preemptions) in this seed: {evictions}."
    )


__all__ = [
    "DEMO_STUDY_ID",
    "DEMO_SEEDS",
    "DEMO_SCHEDULERS",
    "DEMO_BASELINE",
    "LIVE_PREFIX",
    "HEADLINE_KEYS",
    "MISSING_MESSAGE",
    "demo_config",
    "demo_plan",
    "live_rerun_configs",
    "clear_demo_results",
    "make_demo_results",
    "read_demo_study",
    "scheduler_results",
    "card_value",
    "card_interval",
    "card_delta",
    "card_verdict",
    "scheduler_sentence",
    "headline",
    "value_text",
    "interval_text",
    "KVUsage",
    "kv_usage",
    "kv_sentence",
    "kv_caption",
]
