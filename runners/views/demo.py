"""The Demo page's ready comparisons on the simulator: one study per load regime, and the bundled
results that replay them.

Setting, the same in every regime (chosen so that scheduling matters and memory binds, not to
favour one scheduler; picked on fcfs's queue and KV usage at exploration seeds 100-102, never at
the study's seeds): the mixed chat + code stand-in workload, 1,000 requests arriving as a Poisson
process, the paper SLOs, one simulated Qwen2.5-7B / 2 x V100 instance that runs at most 64
requests at a time (max_num_seqs 64) with its KV cache cut to 16,000 tokens (about 0.9 GB of this
model's KV, as on a GPU shared with other work): 64 requests of this workload need more than that,
so memory, not slots, limits the batch. Every scheduler keeps its registry defaults, which know
nothing of the run's own requests (issue 25: length predictors start from a calibration sample of
the same datasets that the run does not send, mcsf predicts with the per-task Gaussian, policies
plan with a fitted latency model), except static batching's batch size, set to the engine's 64.

Regimes (:data:`DEMO_REGIMES`), each its own study, their rates fixed in this file before any
study seed was run at them:

- ``demo-below``, **below capacity**: 2.2 req/s, about 80% of the engine's measured capacity.
  Capacity (:func:`measure_capacity`) is fcfs's completed requests per second (completed /
  (last finish - first arrival), summary ``request_throughput_rps``) when offered 8 req/s, twice
  the overload rate and so more than it can serve, averaged over the exploration seeds 100, 101
  and 102 (not study seeds). Measured again on 2026-11-27, after the simulator gained prefix
  caching (summary schema 6: a preempted request reuses its cached blocks): 2.605, 2.833 and
  2.648 req/s, mean :data:`MEASURED_CAPACITY_RPS` = 2.695 req/s (2026-11-26, before it: 2.552,
  2.787 and 2.598, mean 2.646, and the rate 2.1). The same rule as then: 0.8 x 2.695 = 2.156,
  rounded to 0.1 req/s: :data:`BELOW_RATE_RPS` = 2.2 (82% of capacity). Reproduce (about 2 s)::

      python -c "from runners.views.demo import measure_capacity; print(measure_capacity())"

  A check at the same exploration seeds before the study ran: fcfs at 2.2 req/s met 97.9-98.6%
  of SLOs, at most 2-13 requests waiting: below capacity. tests/integration/test_demo_study.py
  measures the capacity again, so a change to the simulator that moves it is noticed.
- ``demo-overload``, **overload**: 4 req/s (:data:`OVERLOAD_RATE_RPS`, the rate of the earlier
  one-regime demo, about 148% of capacity): a queue grows all run long.

Each study (:mod:`runners.study.runner`) runs the six schedulers at each of the seeds 0..9, fixed in
advance (never chosen by outcome), paired by seed (at one seed every scheduler gets the identical
requests and arrival times), fcfs the baseline. Members are the runs
``<study id>-<scheduler>-s<seed>``; the study record is ``results/<study id>/study.json``.
``python -m runners demo`` reruns every regime and rewrites those folders (the bundled copies),
and removes the earlier one-regime bundle (``results/demo/`` and ``demo-<scheduler>-s<seed>``),
and only those: anything at one of those names that is not the demo's own stops it, before
anything is removed.

Every sentence that names a winner or a cost (:func:`headline`, :func:`who_pays_sentence`,
:func:`card_verdict`) decides from the paired 95% interval's numbers (:func:`clear_direction`:
a difference is claimed only where the interval excludes zero, on the side the metric's direction
says), never from a stored verdict string. Who waits per task (:func:`task_tail_statistics`) is
computed from the member runs' requests.parquet: per run (one seed) the 99th percentile of the
E2E latency of that task's completed requests, then over seeds as the study's metrics are.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeGuard

import numpy as np
import pandas as pd

from runners.errors import SchedlabError
from runners.json_values import is_stored
from runners.metrics.catalog import Metric, metric, timeseries_metric
from runners.metrics.sawtooth import sawtooth_cycles
from runners.metrics.seed_statistics import SINGLE_SEED_NOTE, paired_comparison, summarize
from runners.run.config import RunConfig, parse_config
from runners.run.knowledge import display_name as scheduler_name
from runners.run.knowledge import scheduler_display
from runners.store.models import MetricStatistics, PairedComparison, SeedSummary, StudyRecord
from runners.store.result_store import (
    DEFAULT_RESULTS_DIR,
    RunData,
    delete_run,
    owned_run_folder,
    results_folder,
)
from runners.store.run_ids import RUN_ID_PATTERN
from runners.study.runner import STUDY_FILE, StudyMember, StudyPlan, StudyResult, plan_study, read_study, run_study
from runners.timestamps import id_stamp
from runners.views.study_view import change_text, mean_text, wins_text
from runners.workload.slo import TASKS

#: The earlier one-regime demo's study id (overload only; removed by ``python -m runners demo``)
#: and the prefix of every regime's study id.
DEMO_STUDY_ID = "demo"
#: The study's seeds, fixed in advance: 0..9.
DEMO_SEEDS: tuple[int, ...] = tuple(range(10))
DEMO_SCHEDULERS: tuple[str, ...] = ("fcfs", "static", "slo-sa", "dynamic-mem", "dynamic-sla", "mcsf")
#: The engine's slots (max_num_seqs) and KV cache (tokens): memory binds before the slots do.
DEMO_SLOTS = 64
DEMO_KV_TOKENS = 16_000
#: Scheduler parameters of the studies: static batches of the engine's slots; every other
#: parameter of every scheduler is its registry default (none of them an oracle).
DEMO_PARAMS: dict[str, Any] = {"batch_size": DEMO_SLOTS}
DEMO_BASELINE = "fcfs"
DEMO_REQUESTS = 1000

#: Capacity measurement (:func:`measure_capacity`): fcfs offered this rate (req/s), twice the
#: overload rate, at the exploration seeds (never study seeds).
CAPACITY_OFFERED_RPS = 8.0
CAPACITY_SEEDS: tuple[int, ...] = (100, 101, 102)
#: What :func:`measure_capacity` gave (req/s), 2026-11-27 (with prefix caching): the mean of
#: 2.605, 2.833 and 2.648.
MEASURED_CAPACITY_RPS = 2.695
#: The below-capacity regime's share of capacity, and its rate: 0.8 x 2.695 rounded to 0.1 req/s.
BELOW_SHARE = 0.8
BELOW_RATE_RPS = 2.2
OVERLOAD_RATE_RPS = 4.0
#: The earlier one-regime demo's rate (its runs are the overload regime's setting).
DEMO_RATE_RPS = OVERLOAD_RATE_RPS


@dataclass(frozen=True)
class DemoRegime:
    """One load regime of the Demo: its own study (``study_id``, members ``<study_id>-<scheduler>-
    s<seed>``) at Poisson arrivals of ``rate_rps``; ``label`` names it on the page."""

    key: str
    study_id: str
    rate_rps: float
    label: str

    @property
    def load(self) -> float:
        """The offered rate as a share of the measured capacity (:data:`MEASURED_CAPACITY_RPS`)."""
        return self.rate_rps / MEASURED_CAPACITY_RPS

    @property
    def title(self) -> str:
        """``Below capacity: 2.2 req/s``."""
        return f"{self.label}: {self.rate_rps:g} req/s"


DEMO_REGIMES: tuple[DemoRegime, ...] = (
    DemoRegime("below", f"{DEMO_STUDY_ID}-below", BELOW_RATE_RPS, "Below capacity"),
    DemoRegime("overload", f"{DEMO_STUDY_ID}-overload", OVERLOAD_RATE_RPS, "Overload"),
)
#: Run ids of live reruns start with this (never a member id of a bundled study).
LIVE_PREFIX = "demo-live-"
#: The catalog keys of study.json the Demo shows; a record without their statistics is refused.
HEADLINE_KEYS: tuple[str, ...] = (
    "slo_attainment",
    "G",
    "ttft_s.p99",
    "e2e_s.p99",
    "slo_attainment_by_task.chat",
    "slo_attainment_by_task.code",
    "e2e_s.mean",
)
#: The tail metrics the Demo shows beside attainment and G.
TAIL_KEYS: tuple[str, ...] = ("ttft_s.p99", "e2e_s.p99")
#: Which requests' tail the per-task "who waits" numbers take (percentile of E2E per task).
TASK_TAIL_PERCENT = 99.0


def demo_regime(regime: DemoRegime | str) -> DemoRegime:
    """The regime itself, or the one whose key or study id is ``regime``; SchedlabError otherwise."""
    if isinstance(regime, DemoRegime):
        return regime
    for known in DEMO_REGIMES:
        if regime in (known.key, known.study_id):
            return known
    raise SchedlabError(
        f"demo: no regime {regime!r}; expected one of: {', '.join(known.key for known in DEMO_REGIMES)}"
    )


def _setting(rate_rps: float, seed: int, requests: int, pace: float | None = None) -> dict[str, Any]:
    """The demo setting's engine, workload and SLOs (a config's fields) at ``rate_rps``."""
    engine: dict[str, Any] = {"kind": "sim", "max_num_seqs": DEMO_SLOTS, "kv_capacity_tokens": DEMO_KV_TOKENS}
    if pace is not None:
        engine["pace"] = pace
    return {
        "engine": engine,
        "workload": {"requests": requests, "seed": seed, "arrival": {"process": "poisson", "rate": rate_rps}},
        "slo": {"preset": "paper"},
    }


def demo_config(
    seeds: Sequence[int] = DEMO_SEEDS,
    study_id: str | None = None,
    pace: float | None = None,
    requests: int = DEMO_REQUESTS,
    regime: DemoRegime | str = "overload",
) -> RunConfig:
    """The study config of ``regime``: the demo setting at its rate with ``trials`` = the demo
    schedulers at ``seeds``; ``study_id`` defaults to the regime's. ``pace`` replays the simulator
    in real time x pace (a live rerun); ``requests`` other than 1,000 only for quick checks."""
    regime = demo_regime(regime)
    return parse_config(
        {
            "run_id": study_id or regime.study_id,
            **_setting(regime.rate_rps, seeds[0], requests, pace),
            "scheduler": {"name": DEMO_BASELINE, "params": DEMO_PARAMS},
            "trials": {"schedulers": list(DEMO_SCHEDULERS), "seeds": list(seeds), "baseline": DEMO_BASELINE},
            "notes": f"schedlab demo comparison, {regime.label.lower()} ({regime.rate_rps:g} req/s)",
        }
    )


def demo_plan(
    seeds: Sequence[int] = DEMO_SEEDS, requests: int = DEMO_REQUESTS, regime: DemoRegime | str | None = None
) -> StudyPlan:
    """The bundled study of ``regime``: every demo scheduler at every seed, ids ``<study id>-
    <scheduler>-s<seed>``. Without a regime, every regime's runs in one plan (study id ``demo``):
    what ``python -m runners demo`` runs, for counting them (it runs one study per regime)."""
    if regime is not None:
        chosen = demo_regime(regime)
        return plan_study(demo_config(seeds, requests=requests, regime=chosen), chosen.study_id)
    plans = [demo_plan(seeds, requests, each) for each in DEMO_REGIMES]
    first = plans[0]
    members = [member for plan in plans for member in plan.members]
    return StudyPlan(DEMO_STUDY_ID, first.baseline, first.schedulers, first.seeds, members)


def demo_plans(seeds: Sequence[int] = DEMO_SEEDS, requests: int = DEMO_REQUESTS) -> list[StudyPlan]:
    """One study plan per regime (:data:`DEMO_REGIMES`), in order."""
    return [demo_plan(seeds, requests, regime) for regime in DEMO_REGIMES]


def live_rerun_configs(
    seed: int, pace: float | None, stamp: str | None = None, regime: DemoRegime | str = "overload"
) -> list[RunConfig]:
    """One seed of ``regime``'s study, for watching live: the demo schedulers at ``seed``, run ids
    ``demo-live-<UTC stamp>-<regime>-<scheduler>-s<seed>`` (plain runs, no study record; the
    verdict stays the bundled study's)."""
    chosen = demo_regime(regime)
    stamp = stamp or id_stamp()
    plan = plan_study(demo_config([seed], f"{LIVE_PREFIX}{stamp}-{chosen.key}", pace, regime=chosen))
    return [member.config for member in plan.members]


@dataclass(frozen=True)
class CapacityMeasurement:
    """fcfs's completed requests per second at each exploration seed when offered more than it
    serves, and their mean (the capacity, req/s)."""

    offered_rps: float
    seeds: tuple[int, ...]
    per_seed_rps: tuple[float, ...]

    @property
    def capacity_rps(self) -> float:
        return float(np.mean(self.per_seed_rps))

    def __str__(self) -> str:
        each = ", ".join(f"seed {seed}: {rps:.3f}" for seed, rps in zip(self.seeds, self.per_seed_rps))
        return (
            f"capacity {self.capacity_rps:.3f} req/s (fcfs offered {self.offered_rps:g} req/s; {each}); "
            f"{BELOW_SHARE:.0%} of it: {BELOW_SHARE * self.capacity_rps:.3f} req/s"
        )


def measure_capacity(
    seeds: Sequence[int] = CAPACITY_SEEDS, offered_rps: float = CAPACITY_OFFERED_RPS, requests: int = DEMO_REQUESTS
) -> CapacityMeasurement:
    """The capacity of the Demo's engine setting: fcfs runs the demo workload offered
    ``offered_rps`` (more than it serves) at each exploration seed, in a temporary folder (nothing
    kept); each run's completed requests per second (summary ``request_throughput_rps``).
    SchedlabError when a run served nearly all it was offered (then the rate did not exceed
    capacity and the number is not one)."""
    from runners.run.benchmark import execute_run

    config = parse_config(
        {
            "run_id": "capacity",
            **_setting(offered_rps, seeds[0], requests),
            "scheduler": {"name": DEMO_BASELINE},
            "trials": {"seeds": list(seeds)},
        }
    )
    rates = []
    with tempfile.TemporaryDirectory(prefix="schedlab-capacity-") as folder:
        for member in plan_study(config, "capacity").members:
            outcome = execute_run(member.config, folder)
            served = outcome.summary.request_throughput_rps
            if outcome.status != "done" or not _number(served):
                raise SchedlabError(f"demo: capacity run at seed {member.seed} ended {outcome.status}: {outcome.error}")
            if served >= 0.9 * offered_rps:
                raise SchedlabError(
                    f"demo: fcfs served {served:.3f} of {offered_rps:g} req/s offered at seed {member.seed}: "
                    "not more than it serves; offer a higher rate"
                )
            rates.append(float(served))
    return CapacityMeasurement(float(offered_rps), tuple(seeds), tuple(rates))


# -- the bundle -----------------------------------------------------------------------------------
def _study_folder_to_replace(base: Path, study_id: str) -> Path | None:
    """``base/<study_id>`` when it is the demo's own study folder (a real folder directly inside
    the results folder holding study.json or nothing), None when absent; SchedlabError otherwise."""
    folder = base / study_id
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


def _is_member_id(name: Any, study_id: str) -> TypeGuard[str]:
    """Whether ``name`` is ``<study_id>-<demo scheduler>-s<seed>``."""
    return (
        isinstance(name, str)
        and bool(RUN_ID_PATTERN.match(name))
        and any(
            name.startswith(f"{study_id}-{scheduler}-s") and name[len(f"{study_id}-{scheduler}-s") :].isdigit()
            for scheduler in DEMO_SCHEDULERS
        )
    )


def _old_members(folder: Path | None, study_id: str) -> list[str]:
    """Member ids of the study record in ``folder`` that are demo member ids of ``study_id``;
    nothing when the record is unreadable (a damaged bundle is replaced all the same)."""
    if folder is None or not (folder / STUDY_FILE).is_file():
        return []
    try:
        record = read_study(folder)
    except SchedlabError:
        return []
    return [name for name in (run.run_id for run in record.runs) if _is_member_id(name, study_id)]


def clear_demo_results(results_root: str | Path, plans: StudyPlan | Sequence[StudyPlan]) -> list[str]:
    """Remove the demo studies' folders and member runs: for each of ``plans`` its study folder,
    the runs it will write and those its old record lists; and the earlier one-regime bundle
    (``demo/``, the members its record lists and ``demo-<scheduler>-s<seed>`` at the plans'
    seeds). Every one is checked first to be the demo's own: a real run folder (or a study folder
    holding study.json only) at that exact name. Anything else stops it with one line before
    anything is removed. Returns the removed names."""
    base = results_folder(results_root)
    plans = [plans] if isinstance(plans, StudyPlan) else list(plans)
    studies: list[tuple[str, Path | None]] = []
    members: list[str] = []
    for plan in plans:
        folder = _study_folder_to_replace(base, plan.study_id)
        studies.append((plan.study_id, folder))
        members += [member.run_id for member in plan.members] + _old_members(folder, plan.study_id)
    if DEMO_STUDY_ID not in {plan.study_id for plan in plans}:  # the earlier one-regime bundle
        legacy = _study_folder_to_replace(base, DEMO_STUDY_ID)
        studies.append((DEMO_STUDY_ID, legacy))
        seeds = sorted({member.seed for plan in plans for member in plan.members})
        members += [f"{DEMO_STUDY_ID}-{name}-s{seed}" for name in DEMO_SCHEDULERS for seed in seeds]
        members += _old_members(legacy, DEMO_STUDY_ID)
    members = list(dict.fromkeys(members))
    present = [run_id for run_id in members if os.path.lexists(base / run_id)]
    for run_id in present:
        owned_run_folder(base, run_id, "replace")
    for study_id, _ in studies:
        leftover = base / f".{study_id}.creating"
        if os.path.lexists(leftover):
            raise SchedlabError(
                f"demo: {leftover} is left from an interrupted study; remove it, then run "
                "'python -m runners demo' again"
            )
    for run_id in present:
        delete_run(base, run_id)
    removed = list(present)
    for study_id, folder in studies:
        if folder is not None:
            (folder / STUDY_FILE).unlink(missing_ok=True)
            folder.rmdir()
            removed.append(study_id)
    return removed


def make_demo_studies(
    results_root: str | Path = DEFAULT_RESULTS_DIR,
    seeds: Sequence[int] = DEMO_SEEDS,
    progress: Callable[[int, int, StudyMember], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    requests: int = DEMO_REQUESTS,
) -> list[StudyResult]:
    """Run every regime's study (:data:`DEMO_REGIMES`, in order) and (re)write their folders
    under ``results_root``, after removing the old ones (see :func:`clear_demo_results` for what
    it refuses to replace). A cancelled study (``should_stop``) ends it: the regimes after it are
    not run. At least one study runs (a stop before it gives a cancelled record)."""
    plans = demo_plans(seeds, requests)
    clear_demo_results(results_root, plans)
    results = []
    for plan in plans:
        result = run_study(plan, results_root, progress=progress, should_stop=should_stop)
        results.append(result)
        if result.record.status == "cancelled":
            break
    return results


def make_demo_results(
    results_root: str | Path = DEFAULT_RESULTS_DIR,
    seeds: Sequence[int] = DEMO_SEEDS,
    progress: Callable[[int, int, StudyMember], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    requests: int = DEMO_REQUESTS,
) -> StudyResult:
    """:func:`make_demo_studies`, returning one study's result (for a caller that reports one):
    the first that did not end done, else the last."""
    results = make_demo_studies(results_root, seeds, progress, should_stop, requests)
    return next((result for result in results if result.record.status != "done"), results[-1])


# -- reading it -----------------------------------------------------------------------------------
def missing_message(regime: DemoRegime | str, results_root: str | Path | None = None) -> str:
    """Why a regime's bundle cannot be shown and how to make it; names the earlier one-regime
    bundle when ``results_root`` still holds it."""
    chosen = demo_regime(regime)
    text = (
        f"The bundled demo study of the {chosen.label.lower()} regime (results/{chosen.study_id}/study.json and "
        f"its runs results/{chosen.study_id}-<scheduler>-s<seed>) is missing. Run `python -m runners demo` to "
        "make every regime (a few minutes)."
    )
    if results_root is not None and (results_folder(results_root) / DEMO_STUDY_ID / STUDY_FILE).is_file():
        text += (
            f" results/{DEMO_STUDY_ID}/ is the earlier one-regime demo (overload only); it still opens on the "
            "Results page, and `python -m runners demo` replaces it."
        )
    return text


#: The message of a missing bundle, for the overload regime (see :func:`missing_message`).
MISSING_MESSAGE = missing_message("overload")


def read_demo_study(
    results_root: str | Path = DEFAULT_RESULTS_DIR, regime: DemoRegime | str = "overload"
) -> StudyRecord:
    """The bundled study record of ``regime``, checked for what the Demo shows: SchedlabError (one
    line, saying how to remake it) when it is missing, damaged, unfinished, or not the demo's."""
    chosen = demo_regime(regime)
    base = results_folder(results_root)
    folder = base / chosen.study_id
    if folder.is_symlink() or not (folder / STUDY_FILE).is_file():
        raise SchedlabError(missing_message(chosen, base))
    remake = "; run `python -m runners demo` to remake it"
    try:
        record = read_study(folder)
    except SchedlabError as exc:
        raise SchedlabError(f"the bundled demo study {chosen.study_id} is damaged: {exc}{remake}") from None
    if record.study_id != chosen.study_id or record.baseline != DEMO_BASELINE:
        raise SchedlabError(
            f"{folder / STUDY_FILE}: not the demo's study (id {record.study_id!r}, baseline "
            f"{record.baseline!r}){remake}"
        )
    if record.status not in ("done", "failed"):
        raise SchedlabError(f"{folder / STUDY_FILE}: the demo study is {record.status!r}, not finished{remake}")
    for key in HEADLINE_KEYS:
        entry = record.statistics.get(key)
        if entry is None or not is_stored(entry, "schedulers") or not is_stored(entry, "vs_baseline"):
            raise SchedlabError(f"{folder / STUDY_FILE}: statistics of {key!r} are missing{remake}")
    return record


# -- numbers in words -----------------------------------------------------------------------------
def _number(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a number (a bool is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plain(m: Metric, value: Any) -> str:
    """``m.format(value)`` (the catalog's rounding), written without an exponent for words:
    ``0.00008254``, not ``8.254e-05``."""
    text = m.format(value)
    shown = m.display(value)
    if "e" not in text or shown is None:
        return text
    return np.format_float_positional(float(text), precision=4, unique=False, fractional=False, trim="-")


def _unit(m: Metric) -> str:
    return m.unit if m.unit == "%" else f" {m.unit}" if m.unit else ""


def value_text(m: Metric, value: Any) -> str:
    """A stored value in display units with its unit: ``76.0%``, ``11.57 s``."""
    return f"{_plain(m, value)}{_unit(m)}" if _number(value) else "-"


def interval_text(m: Metric, low: Any, high: Any) -> str:
    """``70.0 to 82.0%`` in display units, cut to what the value can be (``79.2 to 100.0%*``:
    runners.metrics.catalog.CUT_NOTE); ``no interval`` when either end is missing."""
    if not (_number(low) and _number(high)):
        return "no interval"
    low, high, cut = m.value_interval(low, high)
    return f"{_plain(m, low)} to {_plain(m, high)}{_unit(m)}" + ("*" if cut else "")


def _signed(m: Metric, value: Any) -> str:
    """``+4.0``, ``-1.0``; a negative value that rounds to zero keeps its sign (``-0.0``), so an
    interval that includes zero never reads as one wholly above it."""
    text = _plain(m, value)
    if text.startswith("-"):
        return text
    return f"-{text}" if _number(value) and value < 0 else f"+{text}"


def _difference_unit(m: Metric) -> str:
    return " points" if m.unit == "%" else _unit(m)


def task_tail_key(task: str) -> str:
    """The key of a task's tail in the Demo's statistics: ``e2e_s.p99.code``."""
    return f"e2e_s.p99.{task}"


def demo_metric(key: str) -> Metric:
    """The catalog's entry of ``key``, or for a task's tail (:func:`task_tail_key`) its own:
    E2E p99 of that task's requests, in seconds, lower is better."""
    for task in TASKS:
        if key == task_tail_key(task):
            return Metric(
                key,
                f"E2E p99, {task} (s)",
                False,
                "s",
                1.0,
                3,
                definition=f"per run, the 99th percentile of the E2E latency of its completed {task} requests",
            )
    return metric(key)


Direction = Literal["better", "worse"]


def clear_direction(key: str, pair: PairedComparison | None) -> Direction | None:
    """``better`` or ``worse`` than the baseline when the paired 95% interval of ``key``
    (``ci_low``, ``ci_high``: scheduler - baseline) lies wholly on one side of zero, read in the
    metric's direction; None when it includes zero or is missing. Decided from the numbers only:
    a stored ``verdict`` is never read."""
    if pair is None:
        return None
    low, high = pair.ci_low, pair.ci_high
    if not (_number(low) and _number(high)) or low > high:
        return None
    if low > 0:
        up = True
    elif high < 0:
        up = False
    else:
        return None
    return "better" if up == demo_metric(key).higher_is_better else "worse"


def display_name(record: StudyRecord, name: str) -> str:
    """A study's scheduler as the Demo names it: :func:`runners.run.knowledge.display_name`,
    `` (oracle)`` added when the study records an oracle for its runs (study.json ``oracles``)."""
    return scheduler_name(name, (record.oracles or {}).get(name)) or name


@dataclass(frozen=True)
class SchedulerResult:
    """One scheduler's value of one metric over the study's seeds, and against the baseline."""

    scheduler: str
    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    pair: PairedComparison | None  # vs_baseline entry; None for the baseline
    name: str = ""  # the study's name of the scheduler (``scheduler`` is its display name)


#: Statistics beside study.json's, in its shape (metric key -> statistics; :func:`task_tail_statistics`).
ExtraStatistics = Mapping[str, MetricStatistics]


def _statistics(record: StudyRecord, extra: ExtraStatistics | None = None) -> dict[str, MetricStatistics]:
    return {**record.statistics, **(extra or {})}


def scheduler_results(record: StudyRecord, key: str, extra: ExtraStatistics | None = None) -> list[SchedulerResult]:
    """Per scheduler (the study's order, baseline first) the statistics of ``key`` in study.json
    (or in ``extra``, e.g. :func:`task_tail_statistics`), named by :func:`display_name`."""
    entry = _statistics(record, extra).get(key) or MetricStatistics()
    names = [record.baseline] + [name for name in record.schedulers if name != record.baseline]
    results = []
    for name in names:
        stats = entry.schedulers.get(name)
        if stats is None:
            continue
        pair = entry.vs_baseline.get(name) if name != record.baseline else None
        results.append(
            SchedulerResult(display_name(record, name), stats.n, stats.mean, stats.ci_low, stats.ci_high, pair, name)
        )
    return results


def card_value(key: str, result: SchedulerResult) -> str:
    """A card's value: the mean over seeds in display units, with its unit when that is ``%``
    (``83.2%``) and without it otherwise (``0.005981``: :func:`card_unit` heads the cards, so the
    value stays whole in a card a third of a 1,024 px page wide); ``(1 seed)`` added when the study
    has one seed."""
    m = demo_metric(key)
    if not _number(result.mean):
        return "-"
    text = value_text(m, result.mean) if m.unit == "%" else _plain(m, result.mean)
    return f"{text} (1 seed)" if result.n == 1 else text


def card_unit(key: str) -> str:
    """The unit the cards of ``key`` give their values in, for their heading: ``" (1/s)"``; empty
    for a share (its values carry the ``%``)."""
    m = demo_metric(key)
    return f" ({m.unit})" if m.unit and m.unit != "%" else ""


def card_interval(key: str, result: SchedulerResult) -> str:
    """The line under a card's value: ``± 4.0 (95% interval 79.2 to 87.3%)``, half the Student t
    interval (symmetric about the mean), or why there is none."""
    m = demo_metric(key)
    if not (_number(result.ci_low) and _number(result.ci_high)):
        return SINGLE_SEED_NOTE if result.n == 1 else "no interval"
    if m.value_interval(result.ci_low, result.ci_high)[2]:  # cut at 0 or 100%: no longer symmetric
        return f"95% interval {interval_text(m, result.ci_low, result.ci_high)}"
    return (
        f"± {_plain(m, (result.ci_high - result.ci_low) / 2)} (95% interval "
        f"{interval_text(m, result.ci_low, result.ci_high)})"
    )


def card_delta(key: str, result: SchedulerResult, baseline: str) -> str | None:
    """A card's change against the baseline: the mean paired difference (``+28.9 pts vs fcfs``),
    or None for the baseline."""
    if result.pair is None:
        return None
    return f"{demo_metric(key).format_change(result.pair.diff_mean)} vs {baseline}"


def card_verdict(
    result: SchedulerResult, baseline: str, key: str = "slo_attainment", record: StudyRecord | None = None
) -> str:
    """The verdict under a card, from the paired interval (:func:`clear_direction`), with seeds
    better: ``clearly better than fcfs (9 of 10 seeds better)``, ``no clear difference from fcfs
    (...)``; ``the baseline`` for the baseline. With the study's ``record``, a difference the
    headline does not name (:func:`named_direction`: under the minimum effect or not surviving
    Holm) reads ``better than fcfs, too small or too uncertain to name (...)``."""
    pair = result.pair
    if pair is None:
        return "the baseline"
    seeds = f"{pair.wins} of {pair.n_pairs} seeds better"
    direction = clear_direction(key, pair)
    if direction is not None and record is not None and result.name and key in MINIMUM_EFFECTS:
        if named_direction(record, key, result.name) is None:
            return f"{direction} than {baseline}, too small or too uncertain to name ({seeds})"
    if direction is not None:
        return f"clearly {direction} than {baseline} ({seeds})"
    return f"no clear difference from {baseline} ({seeds})"


def _names(names: Sequence[str]) -> str:
    """``**a**``, ``**a** and **b**``, ``**a**, **b** and **c**``."""
    bold = [f"**{name}**" for name in names]
    return bold[0] if len(bold) == 1 else ", ".join(bold[:-1]) + " and " + bold[-1]


def _pair(record: StudyRecord, key: str, name: str, extra: ExtraStatistics | None = None) -> PairedComparison | None:
    entry = _statistics(record, extra).get(key)
    return entry.vs_baseline.get(name) if entry is not None else None


@dataclass(frozen=True)
class MinimumEffect:
    """The smallest difference against the baseline the Demo's headline names (issue 43): an
    ``absolute`` difference in the metric's stored unit, or a ``relative`` one (a fraction of the
    baseline's mean); ``words`` say it on the page."""

    kind: Literal["absolute", "relative"]
    size: float
    words: str


#: Per metric the headline judges: a winner or a loser is named only for a difference at least
#: this large (and significant after Holm's correction, :func:`named_direction`). One point of
#: attainment and 2% of G are the sizes issue 43 states; 5% of a p99 is the tail's equivalent.
MINIMUM_EFFECTS: dict[str, MinimumEffect] = {
    "slo_attainment": MinimumEffect("absolute", 0.01, "1 point of attainment"),
    "G": MinimumEffect("relative", 0.02, "2% of G"),
    "ttft_s.p99": MinimumEffect("relative", 0.05, "5% of a p99"),
    "e2e_s.p99": MinimumEffect("relative", 0.05, "5% of a p99"),
}
#: The family-wise error rate of the headline's claims per metric (Holm).
HEADLINE_ALPHA = 0.05
#: The metrics whose clear losses the headline names beside SLO attainment, with their words.
LOSS_WORDS: dict[str, str] = {"G": "lower G", "ttft_s.p99": "a longer p99 TTFT", "e2e_s.p99": "a longer p99 E2E"}


def _holm_p(record: StudyRecord, key: str, name: str) -> float | None:
    """``name``'s Holm-adjusted p value against the baseline on ``key``, the family being every
    scheduler of the study compared with the baseline on it (None: no p value recorded)."""
    from runners.metrics.seed_statistics import holm_adjust

    entry = record.statistics.get(key)
    if entry is None:
        return None
    names = [n for n in record.schedulers if n != record.baseline and n in entry.vs_baseline]
    adjusted = dict(zip(names, holm_adjust([entry.vs_baseline[n].p_value for n in names])))
    return adjusted.get(name)


def matters(record: StudyRecord, key: str, pair: PairedComparison) -> bool:
    """Whether the mean paired difference reaches :data:`MINIMUM_EFFECTS` (a metric without one: always)."""
    minimum = MINIMUM_EFFECTS.get(key)
    if minimum is None or not _number(pair.diff_mean):
        return minimum is None
    if minimum.kind == "absolute":
        return abs(pair.diff_mean) >= minimum.size
    entry = record.statistics.get(key)
    base = entry.schedulers.get(record.baseline) if entry is not None else None
    if base is None or not _number(base.mean) or base.mean == 0:
        return False
    return abs(pair.diff_mean) / abs(base.mean) >= minimum.size


def named_direction(record: StudyRecord, key: str, name: str) -> Direction | None:
    """``better`` or ``worse`` only for a difference the headline may name: the paired 95% interval
    excludes zero (:func:`clear_direction`), the difference reaches the metric's minimum effect
    (:func:`matters`), and its p value survives Holm's correction over the study's comparisons on
    ``key`` at :data:`HEADLINE_ALPHA` (a record without p values is judged on the first two)."""
    pair = _pair(record, key, name)
    direction = clear_direction(key, pair)
    if direction is None or pair is None or not matters(record, key, pair):
        return None
    adjusted = _holm_p(record, key, name)
    return direction if adjusted is None or adjusted < HEADLINE_ALPHA else None


def headline_rule(record: StudyRecord) -> str:
    """The rule the headline names by, said on the page."""
    compared = sum(1 for name in record.schedulers if name != record.baseline)
    sizes = list(dict.fromkeys(m.words for m in MINIMUM_EFFECTS.values()))
    return (
        f"paired 95% intervals over {len(record.seeds)} seeds; a difference is named only when it is at least "
        f"{_joined(sizes, 'or')} and significant after Holm's correction over the {compared} comparisons with "
        f"{record.baseline}"
    )


def headline(record: StudyRecord) -> str:
    """A regime's headline: which schedulers met more or fewer SLOs than the baseline by a
    difference that matters (:func:`named_direction`: the paired 95% interval excludes zero, the
    difference reaches :data:`MINIMUM_EFFECTS`, Holm's correction keeps it), whether those that met
    more made the slowest 1% wait longer (p99 TTFT or E2E, same rule), the others' clear losses in
    G and the p99 tails named as plainly as the wins, the differences too small or too uncertain to
    name, and which show no clear difference at all."""
    key = "slo_attainment"
    baseline = record.baseline
    better: list[str] = []
    worse: list[str] = []
    small: list[str] = []
    none: list[str] = []
    payers: list[str] = []
    losses: dict[str, list[str]] = {}
    for name in record.schedulers:
        if name == baseline or _pair(record, key, name) is None:
            continue
        shown = display_name(record, name)
        named = named_direction(record, key, name)
        if named is not None:
            (better if named == "better" else worse).append(shown)
        lost = [words for tail, words in LOSS_WORDS.items() if named_direction(record, tail, name) == "worse"]
        if named == "better" and any(named_direction(record, tail, name) == "worse" for tail in TAIL_KEYS):
            payers.append(shown)
        elif named is None and lost:  # about as many SLOs met, and a clear loss elsewhere: named as plainly
            losses.setdefault(_joined(lost), []).append(shown)
        elif named is None and clear_direction(key, _pair(record, key, name)) is not None:
            small.append(shown)
        elif named is None:
            none.append(shown)
    parts = []
    if better:
        won = f"{_names(better)} met clearly more SLOs than {baseline}"
        if payers:
            who = ("it" if len(payers) == 1 else "each of them") if payers == better else _names(payers)
            won += f", but the slowest 1% of requests waited clearly longer with {who} (p99 TTFT or E2E)"
        else:
            won += " without a clearly longer tail (p99 TTFT and E2E)"
        parts.append(won)
    else:
        parts.append(f"No strategy met clearly more SLOs than {baseline}")
    if worse:
        parts.append(f"{_names(worse)} clearly fewer")
    for lost_words, who_lost in losses.items():
        parts.append(f"{_names(who_lost)} met no more SLOs but had clearly {lost_words}")
    if small:
        parts.append(f"a difference in SLOs met too small or too uncertain to name: {_names(small)}")
    if none:
        parts.append(f"no clear difference: {_names(none)}")
    return "; ".join(parts) + f" ({headline_rule(record)})."


# -- who gains and who pays -------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """One quantity of :func:`who_pays_sentence`: its statistics key, its short name, and what a
    clear gain or a clear loss means for whom, in plain words."""

    key: str
    short: str
    gains: str
    pays: str


#: The outcomes weighed beside SLO attainment, in the order the sentences name them.
OUTCOMES: tuple[Outcome, ...] = (
    Outcome(
        "G",
        "G",
        "overall, more requests finish on time per second they spend in the system",
        "overall, fewer requests finish on time per second they spend in the system",
    ),
    Outcome(
        "slo_attainment_by_task.chat",
        "chat on time",
        "chat requests meet their SLO more often",
        "chat requests meet their SLO less often",
    ),
    Outcome(
        "slo_attainment_by_task.code",
        "code on time",
        "code requests meet their SLO more often",
        "code requests meet their SLO less often",
    ),
    Outcome(
        "ttft_s.p99",
        "p99 TTFT",
        "the slowest 1% of requests get a first token sooner",
        "the slowest 1% of requests wait longer for a first token",
    ),
    Outcome(
        "e2e_s.p99", "p99 E2E", "the slowest 1% of requests finish sooner", "the slowest 1% of requests finish later"
    ),
    Outcome(
        task_tail_key("chat"), "p99 E2E of chat", "long chat requests finish sooner", "long chat requests wait longer"
    ),
    Outcome(
        task_tail_key("code"), "p99 E2E of code", "long code requests finish sooner", "long code requests wait longer"
    ),
)


def change_words(key: str, pair: PairedComparison, short: str = "") -> str:
    """A paired change in words: ``+12.0 points, 95% interval +8.0 to +16.0 points, better at 10
    of 10 seeds``; ``short`` (the quantity's name) first when given."""
    m = demo_metric(key)
    diff, low, high = pair.diff_mean, pair.ci_low, pair.ci_high
    unit = _difference_unit(m)
    if diff == 0 and low == 0 and high == 0:
        return f"{short + ': ' if short else ''}the same at each of the {pair.n_pairs} seeds"
    interval = (
        f"95% interval {_signed(m, low)} to {_signed(m, high)}{unit}"
        if _number(low) and _number(high)
        else "no interval"
    )
    seeds = f"better at {pair.wins} of {pair.n_pairs} seeds"
    change = f"{_signed(m, diff)}{unit}" if _number(diff) else "-"
    return f"{short + ' ' if short else ''}{change}, {interval}, {seeds}"


def who_pays_sentence(
    record: StudyRecord, name: str, extra: ExtraStatistics | None = None, nested: bool = False
) -> str:
    """One sentence on scheduler ``name`` against the baseline, in plain words: SLOs met (more,
    fewer, or no clear difference), who gains and who pays among :data:`OUTCOMES` (each claimed
    only where its paired 95% interval excludes zero, :func:`clear_direction`, with the change, its
    interval and the seeds better), and what shows no clear difference. ``extra``: statistics
    beside study.json's (the per-task tails, :func:`task_tail_statistics`). ``nested``: the same
    sentence with each clause after the first on its own nested Markdown list line (for a page
    whose list item it is), so a long sentence can be read at a glance."""
    baseline = record.baseline
    shown = display_name(record, name)
    lead_pair = _pair(record, "slo_attainment", name, extra)
    if lead_pair is None or not _number(lead_pair.diff_mean):
        return f"**{shown}**: no seed to compare with {baseline}."
    lead_words = change_words("slo_attainment", lead_pair)
    direction = clear_direction("slo_attainment", lead_pair)
    if direction == "better":
        text = f"**{shown}** meets more SLOs than {baseline} ({lead_words})"
    elif direction == "worse":
        text = f"**{shown}** meets fewer SLOs than {baseline} ({lead_words})"
    else:
        text = f"**{shown}**: no clear difference from {baseline} in SLOs met ({lead_words})"
    gains, pays, unclear = [], [], []
    for outcome in OUTCOMES:
        pair = _pair(record, outcome.key, name, extra)
        if pair is None or not _number(pair.diff_mean):
            continue
        said = clear_direction(outcome.key, pair)
        words = change_words(outcome.key, pair, outcome.short)
        if said == "better":
            gains.append(f"{outcome.gains} ({words})")
        elif said == "worse":
            pays.append(f"{outcome.pays} ({words})")
        else:
            unclear.append(outcome.short)
    clauses = [text]
    if gains:
        clauses.append("who gains: " + _joined(gains))
    if pays:
        clauses.append("who pays: " + _joined(pays))
    elif direction != "worse":
        clauses.append("nobody clearly pays (no tail or per-task outcome is clearly worse)")
    if unclear:
        clauses.append("no clear difference in " + _joined(unclear))
    return (";\n    - " if nested else "; ").join(clauses) + "."


def _joined(parts: Sequence[str], last: str = "and") -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" {last} " + parts[-1]


# -- who waits, per task: from the member runs' requests -------------------------------------------
def task_tail(requests: pd.DataFrame, task: str, percent: float = TASK_TAIL_PERCENT) -> float | None:
    """The ``percent`` percentile (numpy's linear one, as the run summary's) of the E2E latency of
    the completed ``task`` requests in one run's requests table; None when it has none."""
    if not len(requests) or "task" not in requests or "e2e_s" not in requests:
        return None
    values = pd.to_numeric(requests.loc[requests["task"] == task, "e2e_s"], errors="coerce").to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    return float(np.percentile(values, percent)) if values.size else None


def task_tail_statistics(
    record: StudyRecord, runs_by_scheduler: Mapping[str, Sequence[RunData]], percent: float = TASK_TAIL_PERCENT
) -> dict[str, MetricStatistics]:
    """Who waits, per task: for each task, keyed :func:`task_tail_key`, the statistics of each
    scheduler's per-seed :func:`task_tail` (over seeds: mean with its 95% Student t interval,
    ``summarize``; against the baseline paired by seed, ``paired_comparison``), in study.json's
    shape (``schedulers``, ``vs_baseline``). Seeds from the study record's runs; a run the record
    does not list is left out."""
    seed_of = {run.run_id: run.seed for run in record.runs}
    baseline = record.baseline
    out: dict[str, MetricStatistics] = {}
    for task in TASKS:
        values: dict[str, dict[int | None, float | None]] = {
            name: {seed_of[run.run_id]: task_tail(run.requests, task, percent) for run in runs if run.run_id in seed_of}
            for name, runs in runs_by_scheduler.items()
        }
        per = {
            name: SeedSummary.model_validate(summarize(list(by_seed.values())).as_dict())
            for name, by_seed in values.items()
        }
        versus = {
            name: PairedComparison.model_validate(
                paired_comparison(values[baseline], by_seed, higher_is_better=False).as_dict()
            )
            for name, by_seed in values.items()
            if name != baseline and baseline in values
        }
        out[task_tail_key(task)] = MetricStatistics(schedulers=per, vs_baseline=versus)
    return out


# -- tables ---------------------------------------------------------------------------------------
def verdict_cell(key: str, pair: PairedComparison | None) -> str:
    """A table's verdict against the baseline, from the paired interval (:func:`clear_direction`):
    ``clearly better``, ``clearly worse``, ``no clear difference``; ``baseline`` for the baseline."""
    if pair is None:
        return "baseline"
    direction = clear_direction(key, pair)
    return f"clearly {direction}" if direction else "no clear difference"


def _outcome_rows(
    record: StudyRecord, key: str, extra: ExtraStatistics | None, first: Mapping[str, str]
) -> list[dict[str, Any]]:
    """One row per scheduler of ``key``: ``first`` (the leading columns), the mean over seeds
    [95% interval], the change against the baseline [95% interval], the verdict and seeds better."""
    baseline, m = record.baseline, demo_metric(key)
    rows = []
    for result in scheduler_results(record, key, extra):
        pair = result.pair
        rows.append(
            {
                **first,
                "strategy": result.scheduler,
                "mean [95% interval]": mean_text(
                    m, SeedSummary(mean=result.mean, ci_low=result.ci_low, ci_high=result.ci_high)
                ),
                f"change vs {baseline} [95% interval]": change_text(m, pair) if pair is not None else "",
                "verdict": verdict_cell(key, pair),
                "seeds better": wins_text(pair) if pair is not None else "",
            }
        )
    return rows


def _columns(record: StudyRecord, first: Sequence[str]) -> list[str]:
    """The columns of a tails or tasks table: ``first``, the strategy, its verdict and seeds better,
    then the mean and the change, whose intervals make them the widest."""
    baseline = record.baseline
    return [  # verdict and seeds better right after the names: visible at 1,024 px before the wide columns
        *first,
        "strategy",
        "verdict",
        "seeds better",
        "mean [95% interval]",
        f"change vs {baseline} [95% interval]",
    ]


def tail_frame(record: StudyRecord) -> pd.DataFrame:
    """The tails beside attainment and G: per tail (p99 TTFT, p99 E2E; its label with the unit)
    and scheduler, the mean over seeds [95% interval], the change against the baseline [95%
    interval], the verdict from that interval (:func:`verdict_cell`) and the seeds better."""
    rows = [row for key in TAIL_KEYS for row in _outcome_rows(record, key, None, {"tail": demo_metric(key).label})]
    return pd.DataFrame(rows, columns=_columns(record, ["tail"]))


#: The per-task outcomes of :func:`task_frame`: (name, key of a task's value).
TASK_OUTCOMES: tuple[tuple[str, Callable[[str], str]], ...] = (
    ("on time (%)", lambda task: f"slo_attainment_by_task.{task}"),
    ("E2E p99 (s)", task_tail_key),
)


def task_frame(record: StudyRecord, tails: ExtraStatistics) -> pd.DataFrame:
    """Per task, outcome (its share on time; the p99 E2E of its requests, from ``tails``,
    :func:`task_tail_statistics`) and scheduler: as :func:`tail_frame`'s rows."""
    rows = [
        row
        for task in TASKS
        for outcome, key in TASK_OUTCOMES
        for row in _outcome_rows(record, key(task), tails, {"task": task, "outcome": outcome})
    ]
    return pd.DataFrame(rows, columns=_columns(record, ["task", "outcome"]))


def regime_text(regime: DemoRegime, record: StudyRecord | None = None) -> str:
    """What a regime is, in words: its rate as a share of the measured capacity, and (with its
    record) how long fcfs's queue grew."""
    if regime.load < 1:
        load = (
            f"about {regime.load:.0%} of the {MEASURED_CAPACITY_RPS:.2f} per second this server completes with "
            f"{DEMO_BASELINE} when offered more than it can serve (measured at seeds "
            f"{', '.join(str(seed) for seed in CAPACITY_SEEDS)}, not the study's): below capacity"
        )
    else:
        load = (
            f"about {regime.load:.0%} of the {MEASURED_CAPACITY_RPS:.2f} per second this server completes with "
            f"{DEMO_BASELINE} when offered more than it can serve: overload, the queue grows all run long"
        )
    text = f"Requests arrive at {regime.rate_rps:g} per second, {load}."
    contention = record.statistics.get("contention.waiting_peak") if record is not None else None
    peak = contention.schedulers.get(DEMO_BASELINE) if contention is not None else None
    if peak is not None and _number(peak.mean):
        text += (
            f" With {DEMO_BASELINE}, up to {peak.mean:,.0f} requests waited at once (each run's peak, mean over seeds)."
        )
    return text


# -- what the page says about each strategy ----------------------------------------------------------
#: How the page reads a 95% interval (not "holds the true average with 95% confidence").
INTERVAL_WORDING = "95% interval: an interval computed this way covers the true mean in 95 of 100 studies"
#: What mcsf knows under its default predictor (the per-task Gaussian).
MCSF_TASK_ONLY = "mcsf orders by a guess from the request's task only (chat vs code), not its own length"


def used_oracle(records: Iterable[StudyRecord], name: str) -> bool:
    """Whether scheduler ``name`` used an oracle in any of ``records`` (study.json ``oracles``)."""
    return any(display_name(record, name) != name for record in records)


def strategy_notes(records: Sequence[StudyRecord], paper_title: Callable[[str], str]) -> list[str]:
    """How each demo strategy works, one line each, in plain words; what a predicting one knows
    follows what the studies recorded (an oracle is named as one, :func:`display_name`).
    ``paper_title``: paper id -> its title."""
    mcsf = display_name(records[0], "mcsf") if records else "mcsf"
    if used_oracle(records, "mcsf"):
        mcsf_knows = (
            f"**{mcsf}** (from *{paper_title('003')}*) admits the requests with the shortest answers first, reading "
            "each request's true length: an oracle no deployment has, so its numbers are an upper bound"
        )
    else:
        mcsf_knows = (
            f"**{mcsf}** (from *{paper_title('003')}*): {MCSF_TASK_ONLY}. Each guess is a random draw from its task's "
            "length distribution (fitted on a calibration sample of other conversations, updated as requests "
            "finish), so chat goes before code on average but within a task the order is random. It admits only as "
            "many as will still fit in memory when each has grown to its guess; answers that outgrow their guess "
            "still cause evictions. Its paper assumes the true lengths are known; that oracle is not used here"
        )
    slo_sa = display_name(records[0], "slo-sa") if records else "slo-sa"
    return [
        f"**fcfs** sends each request on arrival; the engine admits up to {DEMO_SLOTS} and, when their answers "
        "outgrow the memory, evicts the newest and recomputes it later, work done twice.",
        f"**static** sends {DEMO_SLOTS} requests and waits until all have finished before sending more, so one long "
        "answer keeps the other slots idle.",
        f"**{slo_sa}** (from *{paper_title('004')}*) holds requests at the gateway and orders them to maximise G, "
        "with each one's output length guessed from its task only (as mcsf's) and latency from a fitted model; it "
        "does not look at memory.",
        f"**dynamic-mem** (Alg. 1 of *{paper_title('000')}*) caps requests in flight at the number whose memory fits "
        "with 95% probability, from average prompt and output lengths of a calibration sample: it avoids evictions "
        "but also leaves memory unused when the answers turn out short.",
        "**dynamic-sla** (Alg. 2 of the same paper) also moves a batch-size window to keep decode latency near 50 ms, "
        "and uses the smaller of that and the memory cap.",
        mcsf_knows + ".",
    ]


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
    evictions = "; ".join(f"{run.summary.scheduler or run.run_id} {run.summary.preemptions or 0:,}" for run in runs)
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
    "DEMO_REGIMES",
    "DemoRegime",
    "LIVE_PREFIX",
    "HEADLINE_KEYS",
    "TAIL_KEYS",
    "MISSING_MESSAGE",
    "INTERVAL_WORDING",
    "MCSF_TASK_ONLY",
    "demo_regime",
    "demo_config",
    "demo_plan",
    "demo_plans",
    "live_rerun_configs",
    "measure_capacity",
    "clear_demo_results",
    "make_demo_studies",
    "make_demo_results",
    "missing_message",
    "read_demo_study",
    "clear_direction",
    "display_name",
    "scheduler_results",
    "card_value",
    "card_interval",
    "card_delta",
    "card_verdict",
    "headline",
    "who_pays_sentence",
    "task_tail",
    "task_tail_statistics",
    "verdict_cell",
    "tail_frame",
    "task_frame",
    "regime_text",
    "strategy_notes",
    "value_text",
    "interval_text",
    "KVUsage",
    "kv_usage",
    "kv_sentence",
    "kv_caption",
]
