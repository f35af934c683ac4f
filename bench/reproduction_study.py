"""The rows of the reproduction tables (bench/reproduce.py): arms run as paired studies, per-seed
quantities, the paired statistics of runners.metrics.seed_statistics, and the verdict rule.

- An :class:`Arm` is one scheduler with its settings (engine, workload, SLOs, parameters). It is
  planned with :func:`runners.study.plan_study` at every seed of the table (and, for a capacity,
  at every rate of its sweep), so at one seed every arm gets the identical workload and arrival
  times (they depend only on ``workload.*`` and the seed): the comparisons are paired by seed.
  All arms' runs go to one :func:`runners.executors.run_members` call: simulator runs in
  parallel worker processes, real-engine runs one at a time.
- A :class:`Measure` turns one or more arms' runs into one number per seed: a run metric
  (``metric``, a summary key of the catalog), a capacity (``capacity``: the highest arrival rate
  of a sweep at which SLO attainment stays >= the target, :func:`runners.compare.capacity_at`),
  or the least-squares slope of a metric over the request count n (``slope``, one arm per n).
- A :class:`RowSpec` compares two measures (baseline, ours) against the paper's :class:`Claim`;
  :func:`compare_values` pairs the per-seed values (paired_comparison: Student t interval of
  the paired differences and seeds won; relative_change: mean(ours) / mean(baseline) - 1 with a
  bootstrap interval) and :func:`verdict` states the verdict, the one rule of
  :data:`VERDICT_RULE`.

Units: latencies in seconds, rates in requests per second, slopes in seconds per request.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from runners.compare import capacity_at, summary_value
from runners.config import parse_config
from runners.executors import Outcome, choose_execution, run_members
from runners.metrics.catalog import Metric, metric
from runners.metrics.seed_statistics import (
    PairedComparison,
    RelativeChange,
    SeedSummary,
    paired_comparison,
    relative_change,
    summarize,
)
from runners.registry import scheduler_class
from runners.study import StudyMember, StudyPlan, execute_member, plan_study

#: The verdict rule, said once: :func:`verdict` applies it and the tables' notes quote it.
VERDICT_RULE = (
    "Verdict (one rule for every row, bench/reproduction_study.py `verdict`): over the seeds where both "
    "sides have a value, the paired differences ours - baseline get a 95% Student t interval "
    "(runners.metrics.seed_statistics.paired_comparison). **reproduced**: the interval excludes no change on "
    "the side the paper claims (ours better); **not reproduced**: it excludes no change on the other side "
    "(ours worse); **inconclusive**: it contains no change, or fewer than 2 seeds have both values. "
    "The magnitude, the relative change mean(ours) / mean(baseline) - 1 with its 95% bootstrap interval "
    "(paired seeds, BCa), is set against the paper's range: a note says when the whole interval lies outside it."
)
Verdict = Literal["reproduced", "not reproduced", "inconclusive"]
#: The error with which a run that livelocks ends (runners.schedulers.base.PolicyStalled).
STALLED_PREFIX = "stalled:"
LIVELOCK_TEXT = "livelocks (as the paper describes)"

#: Display of the quantities that are not run metrics (catalog Metric: label, direction, unit, format).
CAPACITY = Metric("capacity", "capacity (req/s)", True, "req/s", 1.0, 2)
SLOPE = Metric("slope", "slope of mean E2E over n (s/request)", False, "s/req", 1.0, 4)


@dataclass(frozen=True)
class Arm:
    """One scheduler with its settings, run at every seed of the table. ``name``: unique in the
    table, the prefix of its run ids ([A-Za-z0-9._-]); ``params``: scheduler parameters;
    ``engine`` / ``workload`` / ``slo``: config sections (the target adds the engine kind);
    ``rates``: arrival rates of a sweep (req/s; empty: the workload's one rate)."""

    name: str
    scheduler: str
    params: Mapping[str, Any] = field(default_factory=dict)
    engine: Mapping[str, Any] = field(default_factory=dict)
    workload: Mapping[str, Any] = field(default_factory=dict)
    slo: Mapping[str, Any] | None = None
    rates: tuple[float, ...] = ()


@dataclass(frozen=True)
class Measure:
    """A per-seed number from arms' runs. ``kind``: ``metric`` (summary ``key`` of one arm),
    ``capacity`` (one arm with ``rates``: :func:`runners.compare.capacity_at` of ``key``, SLO
    attainment, at ``target``), ``slope`` (one arm per n of ``xs``: least-squares slope of
    ``key`` over n). ``label``: how the table names it."""

    label: str
    arms: tuple[Arm, ...]
    kind: Literal["metric", "capacity", "slope"] = "metric"
    key: str = "G"
    xs: tuple[float, ...] = ()
    target: float = 0.9

    @property
    def display(self) -> Metric:
        """How the quantity is labelled and formatted."""
        return {"capacity": CAPACITY, "slope": SLOPE}.get(self.kind) or metric(self.key)


@dataclass(frozen=True)
class Claim:
    """What the paper reports: ``text``, and the range of the relative change it reports
    (fractions: 0.08 is +8%; None: open on that side; both None: no number)."""

    text: str
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class RowSpec:
    """One table row: ``ours`` against ``baseline`` in ``setting``, judged against ``claim``;
    ``also``: other summary metrics of the same (metric) arms, reported as relative changes."""

    scenario: str
    setting: str
    baseline: Measure
    ours: Measure
    claim: Claim
    also: tuple[str, ...] = ()


# -- per-seed values -------------------------------------------------------------------------------
RunKey = tuple[str, int, "float | None"]  # (arm name, seed, rate or None)


@dataclass
class Results:
    """Every run's outcome by (arm name, seed, rate): status, summary or None, error or None."""

    outcomes: dict[RunKey, Outcome] = field(default_factory=dict)

    def get(self, arm: Arm, seed: int, rate: float | None = None) -> Outcome:
        return self.outcomes.get((arm.name, seed, rate), ("missing", None, "the run was not planned"))


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (ys' unit per x unit); needs two distinct xs."""
    return float(np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)[0])


def measure_values(
    measure: Measure, results: Results, seeds: Sequence[int]
) -> tuple[dict[int, float | None], dict[int, str]]:
    """(seed -> value or None, seed -> why a seed has none). A seed whose runs did not all end
    ``done`` has no value; its reason is the first failed run's error."""
    values: dict[int, float | None] = {}
    why: dict[int, str] = {}
    for seed in seeds:
        runs = [(arm, rate, results.get(arm, seed, rate)) for arm in measure.arms for rate in (arm.rates or (None,))]
        bad = [(arm, outcome) for arm, _, outcome in runs if outcome[0] != "done" or outcome[1] is None]
        if bad:
            arm, (status, _, error) = bad[0]
            values[seed], why[seed] = None, f"{arm.name}: {status}: {error or 'no summary'}"
            continue
        summaries = [(rate, outcome[1]) for _, rate, outcome in runs]
        if measure.kind == "metric":
            values[seed] = summary_value(summaries[0][1], measure.key)
        elif measure.kind == "capacity":
            values[seed] = capacity_at(
                [rate for rate, _ in summaries],
                [summary_value(summary, measure.key) for _, summary in summaries],
                measure.target,
            )
            if values[seed] is None:
                why[seed] = f"attainment below {measure.target:.0%} at the lowest rate"
        else:
            ys = [summary_value(summary, measure.key) for _, summary in summaries]
            values[seed] = slope(measure.xs, ys) if all(y is not None for y in ys) else None
    return values, why


def capacity_at_top(measure: Measure, values: Mapping[int, float | None]) -> int:
    """Seeds whose capacity is the top of the sweep (every swept rate met the target: a lower bound)."""
    if measure.kind != "capacity":
        return 0
    top = max(measure.arms[0].rates)
    return sum(1 for value in values.values() if value is not None and value >= top)


# -- statistics and the verdict --------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """The statistics of one row: each side's summary over seeds, the paired comparison and the
    relative change (both :mod:`runners.metrics.seed_statistics`)."""

    baseline: SeedSummary
    ours: SeedSummary
    paired: PairedComparison
    relative: RelativeChange


def compare_values(
    baseline: Mapping[int, float | None], ours: Mapping[int, float | None], higher_is_better: bool
) -> Comparison:
    """Pair per-seed values (seed -> value; None: the seed has no value and is dropped)."""
    return Comparison(
        summarize(list(baseline.values())),
        summarize(list(ours.values())),
        paired_comparison(baseline, ours, higher_is_better),
        relative_change(baseline, ours),
    )


def magnitude_note(relative: RelativeChange, claim: Claim, higher_is_better: bool = True) -> str | None:
    """A sentence when the relative change (its whole 95% interval, or the point when it has none)
    lies outside the paper's range: a smaller or a larger gain (in the quantity's good direction)
    than the paper reports. None when it overlaps the range or the paper gives no number."""
    if relative.change is None or (claim.low is None and claim.high is None):
        return None
    low = relative.ci_low if relative.ci_low is not None else relative.change
    high = relative.ci_high if relative.ci_high is not None else relative.change
    paper = paper_range_text(claim)
    above = claim.high is not None and low > claim.high
    below = claim.low is not None and high < claim.low
    if not (above or below):
        return None
    larger = above == higher_is_better
    return f"{'a larger' if larger else 'a smaller'} gain than the paper's {paper}"


def paper_range_text(claim: Claim) -> str:
    """The paper's range of relative change as text (``+8% to +28%``, ``<= -87.5%``)."""
    pct = lambda x: f"{x * 100:+.1f}%".replace(".0%", "%")  # noqa: E731
    if claim.low is not None and claim.high is not None:
        return pct(claim.low) if claim.low == claim.high else f"{pct(claim.low)} to {pct(claim.high)}"
    return f">= {pct(claim.low)}" if claim.low is not None else f"<= {pct(claim.high)}"


def verdict(comparison: Comparison, claim: Claim, higher_is_better: bool = True) -> tuple[Verdict, str]:
    """The row's verdict by :data:`VERDICT_RULE`, and its reason (with the magnitude note;
    ``higher_is_better``: the quantity's good direction, which the paper claims ours goes)."""
    paired = comparison.paired
    if paired.n_pairs < 2 or paired.ci_low is None or paired.ci_high is None:
        result: Verdict = "inconclusive"
        reason = f"{paired.n_pairs} seed(s) with both values: no interval"
    elif paired.verdict == "better":
        result, reason = (
            "reproduced",
            f"ours better: the interval excludes no change ({paired.wins} of {paired.n_pairs} seeds better)",
        )
    elif paired.verdict == "worse":
        result, reason = (
            "not reproduced",
            f"ours worse: the interval excludes no change on the other side "
            f"({paired.wins} of {paired.n_pairs} seeds better)",
        )
    elif paired.diff_mean == 0 and paired.ci_low == 0 and paired.ci_high == 0:
        result, reason = "inconclusive", "identical at every seed"
    else:
        result, reason = "inconclusive", "the interval contains no change"
    note = magnitude_note(comparison.relative, claim, higher_is_better)
    return result, reason + (f"; {note}" if note else "")


# -- formatting ------------------------------------------------------------------------------------
def relative_text(relative: RelativeChange) -> str:
    """``+12.3% [+4.1, +20.5]``; ``-`` without a change; ``[no interval]`` without an interval."""
    if relative.change is None:
        return "-"
    if relative.ci_low is None or relative.ci_high is None:
        return f"{relative.change * 100:+.1f}% [no interval]"
    return f"{relative.change * 100:+.1f}% [{relative.ci_low * 100:+.1f}, {relative.ci_high * 100:+.1f}]"


def side_text(summary: SeedSummary, display: Metric) -> str:
    """A side's mean with its 95% interval over seeds, in display units; ``no value`` without one."""
    if summary.mean is None:
        return "no value"
    unit = f" {display.unit}" if display.unit and display.unit != "%" else ("%" if display.unit == "%" else "")
    return f"{display.format(summary.mean)}{unit} {display.format_interval(summary.ci_low, summary.ci_high)}"


def also_text(display: Metric, baseline: Mapping[int, float | None], ours: Mapping[int, float | None]) -> str:
    """A further metric's relative change with its interval; the two means where there is no
    relative change (a baseline mean of 0)."""
    change = relative_change(baseline, ours)
    if change.change is not None:
        return relative_text(change)
    return f"{display.format(summarize(list(baseline.values())).mean)} -> {display.format(summarize(list(ours.values())).mean)}"


def failures_text(why: Mapping[int, str]) -> str | None:
    """How many seeds had no value and why (a livelock said as such)."""
    if not why:
        return None
    stalled = sum(1 for reason in why.values() if STALLED_PREFIX in reason)
    other = {seed: reason for seed, reason in why.items() if STALLED_PREFIX not in reason}
    parts = []
    if stalled:
        parts.append(f"{LIVELOCK_TEXT} at {stalled} seed(s)")
    if other:
        seed, reason = next(iter(sorted(other.items())))
        parts.append(f"no value at {len(other)} seed(s) (seed {seed}: {reason[:160]})")
    return "; ".join(parts)


def compute_row(spec: RowSpec, results: Results, seeds: Sequence[int]) -> dict[str, Any]:
    """The table row of ``spec`` from the runs' outcomes: formatted cells and raw numbers."""
    base_values, base_why = measure_values(spec.baseline, results, seeds)
    our_values, our_why = measure_values(spec.ours, results, seeds)
    display = spec.ours.display
    comparison = compare_values(base_values, our_values, display.higher_is_better)
    result, reason = verdict(comparison, spec.claim, display.higher_is_better)
    paired, relative = comparison.paired, comparison.relative
    baseline_text = side_text(comparison.baseline, display)
    ours_text = side_text(comparison.ours, display)
    if base_why:
        baseline_text = (
            failures_text(base_why)
            if comparison.baseline.mean is None
            else f"{baseline_text}; {failures_text(base_why)}"
        )
        reason += f"; baseline: {failures_text(base_why)}"
    if our_why:
        ours_text = failures_text(our_why) if comparison.ours.mean is None else f"{ours_text}; {failures_text(our_why)}"
        reason += f"; ours: {failures_text(our_why)}"
    for side, measure, values in (("baseline", spec.baseline, base_values), ("ours", spec.ours, our_values)):
        at_top = capacity_at_top(measure, values)
        if at_top:
            reason += f"; {side}: every swept rate met the target at {at_top} seed(s) (capacity >= the top rate)"
    also = []
    for key in spec.also:
        extra = Measure(key, spec.baseline.arms, "metric", key)
        base_extra, _ = measure_values(extra, results, seeds)
        our_extra, _ = measure_values(dataclasses.replace(extra, arms=spec.ours.arms), results, seeds)
        also.append(f"{metric(key).label} {also_text(metric(key), base_extra, our_extra)}")
    return {
        "scenario": spec.scenario,
        "setting": spec.setting,
        "paper": spec.claim.text,
        "quantity": display.label,
        "baseline_label": spec.baseline.label,
        "ours_label": spec.ours.label,
        "baseline": baseline_text,
        "ours": ours_text,
        "change": relative_text(relative),
        "diff": f"{display.format_change(paired.diff_mean)} {display.format_interval(paired.ci_low, paired.ci_high)}",
        "k_of_n": f"{paired.wins}/{paired.n_pairs}",
        "verdict": result,
        "reason": reason,
        "also": "; ".join(also),
        "baseline_mean": comparison.baseline.mean,
        "ours_mean": comparison.ours.mean,
        "change_frac": relative.change,
        "change_low": relative.ci_low,
        "change_high": relative.ci_high,
        "diff_mean": paired.diff_mean,
        "diff_low": paired.ci_low,
        "diff_high": paired.ci_high,
        "wins": paired.wins,
        "n_pairs": paired.n_pairs,
        "seeds": len(seeds),
    }


def parameters_text(specs: Sequence[RowSpec]) -> str:
    """One line per scheduler the rows use: its registry default parameters (a row's setting
    states what it changes)."""
    names = list(dict.fromkeys(arm.scheduler for arm in unique_arms(specs)))
    lines = []
    for name in names:
        defaults = scheduler_class(name).Params().model_dump()
        lines.append(f"- {name}: " + (", ".join(f"{key} {value!r}" for key, value in defaults.items()) or "none"))
    return "\n".join(lines)


# -- running ---------------------------------------------------------------------------------------
def unique_arms(specs: Sequence[RowSpec]) -> list[Arm]:
    """Every arm the rows use, once (arms of the same name must be the same arm)."""
    arms: dict[str, Arm] = {}
    for spec in specs:
        for arm in spec.baseline.arms + spec.ours.arms:
            if arms.setdefault(arm.name, arm) != arm:
                raise ValueError(f"two different arms are named {arm.name!r}")
    return list(arms.values())


def plan_arms(
    arms: Sequence[Arm], seeds: Sequence[int], config_for: Callable[[Arm], dict[str, Any]]
) -> tuple[list[StudyMember], dict[str, RunKey]]:
    """The runs of every arm at every seed (and rate), planned as one study per arm; and each
    run id's (arm name, seed, rate). ``config_for(arm)``: the arm's run config mapping."""
    members: list[StudyMember] = []
    keys: dict[str, RunKey] = {}
    for arm in arms:
        config = {
            **config_for(arm),
            "run_id": arm.name,
            "trials": {"schedulers": [arm.scheduler], "seeds": list(seeds), "rates": list(arm.rates)},
        }
        for member in plan_study(parse_config(config)).members:
            members.append(member)
            keys[member.run_id] = (arm.name, member.seed, member.rate if arm.rates else None)
    return members, keys


#: A rough cost of one simulator run, seconds: START_S plus this many seconds per request (the
#: annealing schedulers plan on every arrival and completion). From runs on a 2-core machine;
#: only for the estimate printed before a table starts.
START_S = 0.5
PER_REQUEST_S = {"slo-sa": 0.12, "slo-exhaustive": 0.5}
PER_REQUEST_DEFAULT_S = 0.008
#: The same for a run against real servers: requests sent at once take about this long each (the
#: CPU vLLM's table of issue 4 took 1,001 s for about 2,900 requests); a Poisson run lasts about
#: its arrivals' span (requests / rate), plus a tenth to drain.
REAL_START_S = 2.0
REAL_PER_REQUEST_S = 0.3


def run_cost_s(member: StudyMember) -> float:
    """The rough seconds one run takes (see :data:`PER_REQUEST_S`, :data:`REAL_PER_REQUEST_S`)."""
    workload = member.config.workload
    if member.config.engine.kind != "sim":
        if workload.arrival.process == "poisson" and workload.arrival.rate:
            return REAL_START_S + 1.1 * workload.requests / workload.arrival.rate
        return REAL_START_S + workload.requests * REAL_PER_REQUEST_S
    return START_S + workload.requests * PER_REQUEST_S.get(member.scheduler, PER_REQUEST_DEFAULT_S)


def execute(
    members: Sequence[StudyMember],
    keys: Mapping[str, RunKey],
    results_root: Path,
    workers: int | None = None,
    executor: str | None = None,
    on_finish: Callable[[StudyMember, Outcome], None] | None = None,
    log: Callable[[str], None] = print,
) -> Results:
    """Run ``members`` with :func:`runners.executors.run_members` (simulator: a pool of worker
    processes, default all cores, the longest runs first; real engines: one at a time, in
    order), printing progress with a remaining-time estimate; the outcomes by (arm, seed, rate)."""
    plan = StudyPlan(
        "reproduction",
        members[0].scheduler if members else "fcfs",
        [],
        [],
        list(members),
        workers=workers,
        executor=executor,
    )
    execution = choose_execution(plan)
    if execution.kind != "serial":  # longest first, so that no long run starts last and runs alone
        members = sorted(members, key=run_cost_s, reverse=True)
    total_cost = sum(run_cost_s(member) for member in members) or 1.0
    parallel = max(execution.workers or 1, 1)
    log(f"{len(members)} runs; {execution.note}; rough estimate {total_cost / parallel / 60:.0f} min")
    results = Results()
    started = time.perf_counter()
    done_cost = 0.0
    state = {"done": 0, "said": 0.0}

    def finished(member: StudyMember, outcome: Outcome) -> None:
        nonlocal done_cost
        results.outcomes[keys[member.run_id]] = outcome
        state["done"] += 1
        done_cost += run_cost_s(member)
        if outcome[0] != "done":
            log(f"  {member.run_id}: {outcome[0]}: {outcome[2]}")
        elapsed = time.perf_counter() - started
        if elapsed - state["said"] >= 30 or state["done"] == len(members):
            state["said"] = elapsed
            left = elapsed * (total_cost - done_cost) / done_cost if done_cost else math.nan
            log(f"  {state['done']}/{len(members)} runs, {elapsed / 60:.1f} min, about {left / 60:.1f} min left")
        if on_finish is not None:
            on_finish(member, outcome)

    run_members(execution, members, results_root, execute_member, lambda *_: None, finished)
    return results


def run_rows(
    specs: Sequence[RowSpec],
    seeds: Sequence[int],
    config_for: Callable[[Arm], dict[str, Any]],
    results_root: Path,
    workers: int | None = None,
    executor: str | None = None,
    prepare: Callable[[list[StudyMember]], list[StudyMember]] | None = None,
    on_finish: Callable[[StudyMember, Outcome], None] | None = None,
    log: Callable[[str], None] = print,
) -> tuple[list[dict[str, Any]], Results]:
    """Plan, run and tabulate ``specs``: the rows (:func:`compute_row`) and the outcomes.
    ``prepare``: a last change to the planned members (the real engines' warm-up)."""
    members, keys = plan_arms(unique_arms(specs), seeds, config_for)
    if prepare is not None:
        members = prepare(members)
    results = execute(members, keys, results_root, workers, executor, on_finish, log)
    return [compute_row(spec, results, seeds) for spec in specs], results


def without_warmup(members: list[StudyMember]) -> list[StudyMember]:
    """Members against servers launched once: the first sends the engine's warm-up waves, the
    rest find the servers warm (``engine.warmup_concurrency`` emptied)."""
    return members[:1] + [
        dataclasses.replace(
            member,
            config=member.config.model_copy(
                update={"engine": member.config.engine.model_copy(update={"warmup_concurrency": []})}
            ),
        )
        for member in members[1:]
    ]
