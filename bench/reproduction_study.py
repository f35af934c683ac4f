"""The rows of the reproduction tables (bench/reproduce.py): arms run as paired studies, per-seed
quantities, the paired statistics of runners.metrics.seed_statistics, and the verdict rule.

- An :class:`Arm` is one scheduler with its settings (engine, workload, SLOs, parameters). It is
  planned with :func:`runners.study.runner.plan_study` at every seed of the table (and, for a capacity,
  at every rate of its sweep), so at one seed every arm gets the identical workload and arrival
  times (they depend only on ``workload.*`` and the seed): the comparisons are paired by seed.
  All arms' runs go to one :func:`runners.study.executors.run_members` call: simulator runs in
  parallel worker processes, real-engine runs one at a time.
- A :class:`Measure` turns one or more arms' runs into one number per seed: a run metric
  (``metric``, a summary key of the catalog), a capacity (``capacity``: the highest arrival rate
  of a sweep at which SLO attainment stays >= the target, :func:`runners.views.compare.capacity_at`),
  the least-squares slope of a metric over the request count n (``slope``, one arm per n), or the
  best of several measures at each seed (``best``: 003's "best baseline").
- A :class:`RowSpec` compares two measures (baseline, ours) against the paper's :class:`Claim`;
  its ``role`` says whether it is the one row of a paper claim (``claim``: tallied, in the table's
  Holm family) or a ``supporting`` row (shown, not tallied). :func:`row_record` keeps a row's
  identity and every per-seed value (the table's ``.seeds.json``); :func:`judge_records`
  recomputes every row of a table from those records alone: :func:`compare_values` pairs the
  per-seed values (paired_comparison: Student t interval of the paired differences, seeds won,
  the paired test's p; relative_change: mean(ours) / mean(baseline) - 1 with Fieller's or a BCa
  interval), Holm's correction runs over the table's claim rows, and :func:`verdict` states the
  verdict, the one rule of :data:`VERDICT_RULE`.

Units: latencies in seconds, rates in requests per second, slopes in seconds per request; p values
and relative changes are fractions.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from runners.metrics.catalog import Metric, metric
from runners.metrics.seed_statistics import (
    RELATIVE_INTERVAL_NOTE,
    PairedComparison,
    RelativeChange,
    SeedSummary,
    holm_adjust,
    paired_comparison,
    paired_test,
    relative_change,
    summarize,
)
from runners.registry import scheduler_class
from runners.run.config import parse_config
from runners.study.executors import Outcome, choose_execution, run_members
from runners.study.runner import StudyMember, StudyPlan, execute_member, plan_study
from runners.views.compare import capacity_at, summary_value

#: The significance level of every verdict (family-wise over a table's claim rows).
ALPHA = 0.05
#: A table made on a real engine with fewer seeds than this is a pilot (:func:`verdict`).
PILOT_BELOW_SEEDS = 10
#: The verdict rule, said once: :func:`verdict` applies it and the tables' notes quote it.
VERDICT_RULE = (
    "Verdict (one rule for every row, bench/reproduction_study.py `verdict`): over the seeds where both "
    "sides have a value, the paired differences ours - baseline get a two-sided test of no difference "
    "(runners.metrics.seed_statistics.paired_test): the exact sign-flip permutation test below 10 pairs "
    "(all 2^n sign assignments; its smallest p at n pairs is 2 / 2^n, so below 6 pairs no difference is "
    "significant), the paired Student t test from 10. Each paper claim is one **claim** row; the claim "
    "rows' p values get Holm's step-down correction within the table (family-wise 5%). **Supporting** "
    "rows (other settings, ablations, baselines the paper gives no number for) are judged on their "
    "unadjusted p and are not counted. **inconclusive**: fewer than 2 pairs, or p (Holm-adjusted for "
    "claim rows) >= 0.05. **not reproduced**: significant, ours worse. Significant and ours better: "
    "**reproduced** when the 95% interval of the relative change mean(ours) / mean(baseline) - 1 "
    f"({RELATIVE_INTERVAL_NOTE}) overlaps the paper's range; **on the boundary** when it overlaps the range "
    "only within half the shown digit (0.05 points); **direction "
    "only** when it lies wholly below or above that range (the reason says which, with the numbers) or "
    "when the paper gives no number; a change without an interval is set against the range as a point "
    "(said so). A claim that ours is at most X% worse is tested against that bound instead (the same test "
    "on the paired differences ours - (1 - X) x baseline where higher is better, ours - (1 + X) x "
    "baseline where lower is better): reproduced when significantly within the bound, not reproduced "
    "when significantly beyond it. A table made on a real engine with fewer than 10 seeds is a "
    "**pilot**: its rows read pilot: direction holds / pilot: against / pilot: inconclusive, and none "
    "counts as reproduced."
)
Verdict = Literal[
    "reproduced",
    "on the boundary",
    "direction only",
    "direction only (no paper number)",
    "not reproduced",
    "inconclusive",
    "pilot: direction holds",
    "pilot: bound holds",
    "pilot: against",
    "pilot: inconclusive",
]
#: What a pilot table says in place of each verdict (it never counts a row as reproduced).
PILOT_VERDICT: dict[str, Verdict] = {
    "reproduced": "pilot: direction holds",
    "on the boundary": "pilot: direction holds",
    "direction only": "pilot: direction holds",
    "direction only (no paper number)": "pilot: direction holds",
    "not reproduced": "pilot: against",
    "inconclusive": "pilot: inconclusive",
}
Role = Literal["claim", "supporting"]
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


def quantity_display(kind: str, key: str) -> Metric:
    """How a quantity of measure ``kind`` and summary ``key`` is labelled and formatted."""
    return {"capacity": CAPACITY, "slope": SLOPE}.get(kind) or metric(key)


@dataclass(frozen=True)
class Measure:
    """A per-seed number from arms' runs. ``kind``: ``metric`` (summary ``key`` of one arm),
    ``capacity`` (one arm with ``rates``: :func:`runners.views.compare.capacity_at` of ``key``, SLO
    attainment, at ``target``), ``slope`` (one arm per n of ``xs``: least-squares slope of
    ``key`` over n), ``best`` (``parts``, measures of one quantity: at each seed the best value
    among them by the quantity's direction; a part without a value at a seed is left out there;
    ``arms``: every part's arms, :func:`best_of` builds it). ``label``: how the table names it."""

    label: str
    arms: tuple[Arm, ...]
    kind: Literal["metric", "capacity", "slope", "best"] = "metric"
    key: str = "G"
    xs: tuple[float, ...] = ()
    target: float = 0.9
    parts: tuple[Measure, ...] = ()

    @property
    def quantity_kind(self) -> str:
        """The kind of the quantity (a ``best`` measure's is its parts')."""
        return self.parts[0].quantity_kind if self.kind == "best" else self.kind

    @property
    def display(self) -> Metric:
        """How the quantity is labelled and formatted."""
        return quantity_display(self.quantity_kind, self.key)


def best_of(label: str, parts: Sequence[Measure]) -> Measure:
    """A ``best`` measure over ``parts`` (measures of the same quantity)."""
    if not parts or len({(part.quantity_kind, part.key) for part in parts}) != 1:
        raise ValueError("best_of needs one or more measures of the same quantity")
    return Measure(label, tuple(arm for part in parts for arm in part.arms), "best", parts[0].key, parts=tuple(parts))


@dataclass(frozen=True)
class Claim:
    """What the paper reports: ``text``, and the range of the relative change it reports
    (fractions: 0.08 is +8%; None: open on that side; both None: no number). ``kind``: ``gain``
    (ours better, by a change in the range) or ``at-most-worse`` (ours worse by at most the
    range's end on the quantity's bad side: ``low`` where higher is better, e.g. -0.019 for "G
    falls by at most 1.9%"; ``high`` where lower is better)."""

    text: str
    low: float | None = None
    high: float | None = None
    kind: Literal["gain", "at-most-worse"] = "gain"


@dataclass(frozen=True)
class RowSpec:
    """One table row: ``ours`` against ``baseline`` in ``setting``, judged against ``claim``;
    ``also``: other summary metrics of the same (metric) arms, reported as relative changes;
    ``role``: ``claim`` (the one row of a paper claim: tallied, in the table's Holm family) or
    ``supporting`` (other settings, ablations, baselines without a paper number: shown with its
    unadjusted p, not tallied; the default, so that no row is tallied unless its builder says it
    is a claim's row); ``note``: a sentence added to the row's reason (e.g. where a gain comes
    from resources rather than the algorithm)."""

    scenario: str
    setting: str
    baseline: Measure
    ours: Measure
    claim: Claim
    also: tuple[str, ...] = ()
    role: Role = "supporting"
    note: str = ""


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


def best_values(
    parts: Sequence[tuple[Mapping[int, float | None], Mapping[int, str]]], seeds: Sequence[int], higher_is_better: bool
) -> tuple[dict[int, float | None], dict[int, str]]:
    """At each seed the best value among the parts' (seed -> value, seed -> why none) that have
    one there (max where higher is better, else min); a seed where none has a value has none, its
    reason the first part's."""
    values: dict[int, float | None] = {}
    why: dict[int, str] = {}
    pick = max if higher_is_better else min
    for seed in seeds:
        present = [value for part_values, _ in parts if (value := part_values.get(seed)) is not None]
        values[seed] = pick(present) if present else None
        if not present:
            reasons = [part_why[seed] for _, part_why in parts if seed in part_why]
            why[seed] = reasons[0] if reasons else "no part has a value"
    return values, why


def measure_values(
    measure: Measure, results: Results, seeds: Sequence[int]
) -> tuple[dict[int, float | None], dict[int, str]]:
    """(seed -> value or None, seed -> why a seed has none). A seed whose runs did not all end
    ``done`` has no value; its reason is the first failed run's error. A ``best`` measure: see
    :func:`best_values`."""
    if measure.kind == "best":
        parts = [measure_values(part, results, seeds) for part in measure.parts]
        return best_values(parts, seeds, measure.display.higher_is_better)
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
            rates = [rate for rate, _ in summaries]
            assert all(rate is not None for rate in rates), "a capacity measure's arms all have rates"
            values[seed] = capacity_at(
                [float(rate) for rate in rates if rate is not None],
                [summary_value(summary, measure.key) for _, summary in summaries],
                measure.target,
            )
            if values[seed] is None:
                why[seed] = f"attainment below {measure.target:.0%} at the lowest rate"
        else:
            ys = [y for _, summary in summaries if (y := summary_value(summary, measure.key)) is not None]
            values[seed] = slope(measure.xs, ys) if len(ys) == len(summaries) else None
    return values, why


def capacity_at_top(measure: Measure, values: Mapping[int, float | None]) -> int:
    """Seeds whose capacity is the top of the sweep (every swept rate met the target: a lower bound)."""
    if measure.kind != "capacity":
        return 0
    return _at_top(max(measure.arms[0].rates), values)


def _at_top(top: float | None, values: Mapping[Any, float | None]) -> int:
    if top is None:
        return 0
    return sum(1 for value in values.values() if value is not None and value >= top)


# -- records: a row's identity and per-seed values (the .seeds.json file) ---------------------------
def _side_record(measure: Measure, results: Results, seeds: Sequence[int]) -> dict[str, Any]:
    values, why = measure_values(measure, results, seeds)
    side: dict[str, Any] = {
        "label": measure.label,
        "values": [values.get(seed) for seed in seeds],
        "why": {str(seed): reason[:300] for seed, reason in why.items()},
    }
    if measure.kind == "capacity":
        side["top_rate"] = max(measure.arms[0].rates)
    if measure.kind == "best":
        side["parts"] = [_side_record(part, results, seeds) for part in measure.parts]
    return side


def row_id(scenario: str, setting: str, baseline_label: str, ours_label: str, key: str) -> str:
    """A row's identity in its table: scenario, setting, both sides' labels and the quantity."""
    return " | ".join((scenario, setting, f"{baseline_label} vs {ours_label}", key))


def row_record(spec: RowSpec, results: Results, seeds: Sequence[int]) -> dict[str, Any]:
    """The row's identity (scenario, setting, role, claim, quantity and direction, labels) and the
    per-seed values of both sides and of every ``also`` metric (seed order of ``seeds``; None:
    no value, with its reason in ``why``); JSON-ready. :func:`judge_records` needs nothing else."""
    display = spec.ours.display
    also = []
    for key in spec.also:
        extra = Measure(key, spec.baseline.arms, "metric", key)
        base_extra, _ = measure_values(extra, results, seeds)
        our_extra, _ = measure_values(dataclasses.replace(extra, arms=spec.ours.arms), results, seeds)
        also.append(
            {"key": key, "baseline": [base_extra.get(s) for s in seeds], "ours": [our_extra.get(s) for s in seeds]}
        )
    return {
        "id": row_id(spec.scenario, spec.setting, spec.baseline.label, spec.ours.label, spec.ours.key),
        "scenario": spec.scenario,
        "setting": spec.setting,
        "role": spec.role,
        "note": spec.note,
        "claim": dataclasses.asdict(spec.claim),
        "quantity": {
            "kind": spec.ours.quantity_kind,
            "key": spec.ours.key,
            "higher_is_better": display.higher_is_better,
        },
        "seeds": list(seeds),
        "baseline": _side_record(spec.baseline, results, seeds),
        "ours": _side_record(spec.ours, results, seeds),
        "also": also,
    }


def _by_seed(record: Mapping[str, Any], values: Sequence[Any]) -> dict[int, float | None]:
    return {int(seed): (None if value is None else float(value)) for seed, value in zip(record["seeds"], values)}


def side_values(record: Mapping[str, Any], side: Mapping[str, Any]) -> tuple[dict[int, float | None], dict[int, str]]:
    """A side's (seed -> value, seed -> why none) from its record; a ``best`` side's values are
    recomputed from its parts' (:func:`best_values`)."""
    if side.get("parts"):
        parts = [side_values(record, part) for part in side["parts"]]
        return best_values(parts, [int(s) for s in record["seeds"]], record["quantity"]["higher_is_better"])
    return _by_seed(record, side["values"]), {int(seed): reason for seed, reason in side.get("why", {}).items()}


# -- statistics and the verdict --------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """The statistics of one row: each side's summary over seeds, the paired comparison and the
    relative change (both :mod:`runners.metrics.seed_statistics`), and the (baseline, ours) pairs
    they were computed from."""

    baseline: SeedSummary
    ours: SeedSummary
    paired: PairedComparison
    relative: RelativeChange
    pairs: tuple[tuple[float, float], ...] = ()


def compare_values(
    baseline: Mapping[int, float | None], ours: Mapping[int, float | None], higher_is_better: bool
) -> Comparison:
    """Pair per-seed values (seed -> value; None: the seed has no value and is dropped)."""
    pairs = tuple(
        (float(b), float(o))
        for seed in sorted(set(baseline) & set(ours))
        if (b := baseline[seed]) is not None and (o := ours[seed]) is not None and math.isfinite(b) and math.isfinite(o)
    )
    return Comparison(
        summarize(list(baseline.values())),
        summarize(list(ours.values())),
        paired_comparison(baseline, ours, higher_is_better),
        relative_change(baseline, ours),
        pairs,
    )


def bound_of(claim: Claim, higher_is_better: bool) -> float:
    """An ``at-most-worse`` claim's bound: the relative change ours may fall to (higher is better)
    or rise to (lower is better)."""
    bound = claim.low if higher_is_better else claim.high
    if bound is None:
        raise ValueError(f"{claim.text!r}: an at-most-worse claim needs its bound on the bad side")
    return bound


def claim_test(comparison: Comparison, claim: Claim, higher_is_better: bool = True) -> tuple[float | None, str | None]:
    """The row's p value and test name: the paired test of no difference (a ``gain`` claim), or
    of ours = (1 + bound) x baseline on the paired differences ours - (1 + bound) x baseline (an
    ``at-most-worse`` claim: the same test, shifted to the bound)."""
    if claim.kind == "gain":
        return comparison.paired.p_value, comparison.paired.test
    factor = 1.0 + bound_of(claim, higher_is_better)
    p_value, test = paired_test([o - factor * b for b, o in comparison.pairs])
    return p_value, (f"{test} against the bound" if test else None)


def pct(fraction: float) -> str:
    """A fraction as a signed percentage (``+8%``, ``-87.5%``)."""
    return f"{fraction * 100:+.1f}%".replace(".0%", "%")


def paper_range_text(claim: Claim) -> str:
    """The paper's range of relative change as text (``+8% to +28%``, ``<= -87.5%``)."""
    if claim.low is not None and claim.high is not None:
        return pct(claim.low) if claim.low == claim.high else f"{pct(claim.low)} to {pct(claim.high)}"
    if claim.low is not None:
        return f">= {pct(claim.low)}"
    return f"<= {pct(claim.high)}" if claim.high is not None else "no number"


#: How close (a fraction: 0.0005 = 0.05 points, half the tables' last shown digit) an interval's edge
#: may come to the paper's range, inside or outside, for the row to be on the boundary rather than
#: in or out of it (issue 43 item 9): the shown digits cannot tell the two apart.
BOUNDARY_TOLERANCE = 0.0005


def magnitude_position(
    relative: RelativeChange, claim: Claim, higher_is_better: bool = True
) -> tuple[Literal["within", "below", "above", "boundary"] | None, bool]:
    """Where the relative change lies against the paper's range, in the size of the gain (the
    quantity's good direction: a latency change of -50% is a smaller gain than -80%): ``within``
    (its point inside the range, or its 95% interval overlapping the range by more than
    :data:`BOUNDARY_TOLERANCE`), ``boundary`` (the interval and the range meet or miss each other
    by at most that), ``below`` / ``above`` (wholly a smaller / larger gain), None (no change, or
    the paper gives no number); and whether the point stood in for a missing interval."""
    if relative.change is None or (claim.low is None and claim.high is None):
        return None, False
    point = relative.ci_low is None or relative.ci_high is None
    low = relative.change if point or relative.ci_low is None else relative.ci_low
    high = relative.change if point or relative.ci_high is None else relative.ci_high
    sign = 1.0 if higher_is_better else -1.0  # the gain: +change, or -change where lower is better
    gain_low, gain_high = sorted((sign * low, sign * high))
    raw_low = claim.low if claim.low is not None else -math.inf  # an open side is unbounded
    raw_high = claim.high if claim.high is not None else math.inf
    paper_low, paper_high = sorted((sign * raw_low, sign * raw_high))
    if gain_high < paper_low:
        return ("boundary" if paper_low - gain_high <= BOUNDARY_TOLERANCE else "below"), point
    if gain_low > paper_high:
        return ("boundary" if gain_low - paper_high <= BOUNDARY_TOLERANCE else "above"), point
    if paper_low <= sign * relative.change <= paper_high:
        return "within", point
    overlap = min(gain_high, paper_high) - max(gain_low, paper_low)
    return ("boundary" if overlap <= BOUNDARY_TOLERANCE else "within"), point


def relative_text(relative: RelativeChange) -> str:
    """``+12.3% [+4.1, +20.5]``; ``-`` without a change; ``[no interval]`` without an interval."""
    if relative.change is None:
        return "-"
    if relative.ci_low is None or relative.ci_high is None:
        return f"{relative.change * 100:+.1f}% [no interval]"
    return f"{relative.change * 100:+.1f}% [{relative.ci_low * 100:+.1f}, {relative.ci_high * 100:+.1f}]"


def p_text(p_value: float | None) -> str:
    """A p value for the table (two significant digits)."""
    return "-" if p_value is None else f"{p_value:.2g}"


def verdict(
    comparison: Comparison,
    claim: Claim,
    higher_is_better: bool = True,
    adjusted_p: float | None = None,
    pilot: bool = False,
) -> tuple[Verdict, str]:
    """The row's verdict by :data:`VERDICT_RULE` and its reason. ``higher_is_better``: the
    quantity's good direction; ``adjusted_p``: the Holm-adjusted p of a claim row (None: the
    row's own p, :func:`claim_test`); ``pilot``: a real-engine table with fewer than
    :data:`PILOT_BELOW_SEEDS` seeds (no row counts as reproduced)."""
    paired, relative = comparison.paired, comparison.relative
    raw_p, test = claim_test(comparison, claim, higher_is_better)
    p_value = adjusted_p if adjusted_p is not None else raw_p
    n = paired.n_pairs
    said_p = f"p {p_text(raw_p)}" + (f", Holm {p_text(adjusted_p)}" if adjusted_p is not None else "")
    result: Verdict
    if n < 2 or p_value is None or paired.diff_mean is None:
        result, reason = "inconclusive", f"{n} seed(s) with both values: no test"
    elif p_value >= ALPHA:
        result = "inconclusive"
        if claim.kind == "gain" and all(b == o for b, o in comparison.pairs):
            reason = "identical at every seed"
        else:
            reason = f"not significant ({said_p} >= {ALPHA:g}; {test}, {n} pairs)"
            if n < PILOT_BELOW_SEEDS and 2.0 ** (1 - n) >= ALPHA:
                reason += f"; the exact test's smallest p at {n} pairs is {2.0 ** (1 - n):.3g}"
    elif claim.kind == "at-most-worse":
        result, reason = _bound_verdict(comparison, claim, higher_is_better, said_p, test)
    else:
        better = (paired.diff_mean > 0) == higher_is_better
        seeds_better = f"{paired.wins} of {n} seeds better"
        if not better:
            result, reason = "not reproduced", f"ours worse ({said_p}; {test}; {seeds_better})"
        else:
            result, reason = _magnitude_verdict(relative, claim, higher_is_better)
            reason = f"ours better ({said_p}; {test}; {seeds_better}); {reason}"
    if pilot:
        pilot_result = "pilot: bound holds" if claim.kind == "at-most-worse" and result == "reproduced" else None
        result = pilot_result or PILOT_VERDICT.get(result, result)  # type: ignore[assignment]
        reason = f"pilot (fewer than {PILOT_BELOW_SEEDS} seeds on a real engine): {reason}"
    return result, reason


def _magnitude_verdict(relative: RelativeChange, claim: Claim, higher_is_better: bool) -> tuple[Verdict, str]:
    position, point = magnitude_position(relative, claim, higher_is_better)
    if claim.low is None and claim.high is None:
        return "direction only (no paper number)", "the paper gives no number to set the change against"
    if position is None:
        return "direction only", "no relative change to set against the paper's range (a baseline mean of 0)"
    shown = relative_text(relative) + (" (no interval: the point estimate is set against the range)" if point else "")
    if position == "within":
        return "reproduced", f"the change {shown} overlaps the paper's {paper_range_text(claim)}"
    if position == "boundary":
        return (
            "on the boundary",
            f"the change {shown} meets the paper's {paper_range_text(claim)} only within half the shown digit",
        )
    size = "smaller" if position == "below" else "larger"
    return (
        "direction only",
        f"magnitude {position} the paper's range (a {size} gain): {shown} against {paper_range_text(claim)}",
    )


def _bound_verdict(
    comparison: Comparison, claim: Claim, higher_is_better: bool, said_p: str, test: str | None
) -> tuple[Verdict, str]:
    bound = bound_of(claim, higher_is_better)
    factor = 1.0 + bound
    margin = float(np.mean([o - factor * b for b, o in comparison.pairs]))
    within = (margin > 0) == higher_is_better
    change = relative_text(comparison.relative)
    if within:
        return "reproduced", f"within the paper's bound of {pct(bound)} ({said_p}; {test}): the change is {change}"
    return "not reproduced", f"beyond the paper's bound of {pct(bound)} ({said_p}; {test}): the change is {change}"


# -- formatting ------------------------------------------------------------------------------------
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


def best_text(record: Mapping[str, Any], side: Mapping[str, Any]) -> str | None:
    """What a ``best`` side left out: how many of its parts had no value at how many seeds, the
    ones that livelocked said as such (they are excluded at those seeds)."""
    parts = side.get("parts") or []
    if not parts:
        return None
    missing = []
    for part in parts:
        _, why = side_values(record, part)
        if why:
            missing.append(f"{part['label']}: {failures_text(why)}")
    seeds_short = sum(
        1 for index in range(len(record["seeds"])) if any(part["values"][index] is None for part in parts)
    )
    text = f"best of {len(parts)} per seed"
    if not missing:
        return text + " (every one has a value at every seed)"
    return (
        f"{text}; at {seeds_short} seed(s) some had no value and the best of those present was taken "
        f"(a livelocking baseline is excluded at that seed): " + "; ".join(missing)
    )


def judge_records(records: Sequence[Mapping[str, Any]], pilot: bool = False) -> list[dict[str, Any]]:
    """Every row of one table from its records alone (:func:`row_record`): the statistics, Holm's
    correction over the claim rows' p values (supporting rows keep their own), the verdicts
    (``pilot``: see :func:`verdict`) and the formatted cells."""
    stats = [_record_statistics(record) for record in records]
    claims = [index for index, record in enumerate(records) if record["role"] == "claim"]
    adjusted = holm_adjust([stats[index][1][0] for index in claims])
    holm = dict(zip(claims, adjusted))
    return [
        _format_row(record, stat, holm.get(index), index in holm, pilot)
        for index, (record, stat) in enumerate(zip(records, stats))
    ]


def _record_statistics(record: Mapping[str, Any]) -> tuple[Comparison, tuple[float | None, str | None]]:
    base_values, _ = side_values(record, record["baseline"])
    our_values, _ = side_values(record, record["ours"])
    claim = Claim(**record["claim"])
    higher = bool(record["quantity"]["higher_is_better"])
    comparison = compare_values(base_values, our_values, higher)
    return comparison, claim_test(comparison, claim, higher)


def _format_row(
    record: Mapping[str, Any],
    stat: tuple[Comparison, tuple[float | None, str | None]],
    adjusted_p: float | None,
    is_claim: bool,
    pilot: bool,
) -> dict[str, Any]:
    comparison, (raw_p, test) = stat
    quantity = record["quantity"]
    display = quantity_display(quantity["kind"], quantity["key"])
    higher = bool(quantity["higher_is_better"])
    claim = Claim(**record["claim"])
    result, reason = verdict(comparison, claim, higher, adjusted_p, pilot)
    paired, relative = comparison.paired, comparison.relative
    base_side, our_side = record["baseline"], record["ours"]
    _, base_why = side_values(record, base_side)
    _, our_why = side_values(record, our_side)
    baseline_text = side_text(comparison.baseline, display)
    ours_text = side_text(comparison.ours, display)
    if base_why:
        said = failures_text(base_why) or ""
        baseline_text = said if comparison.baseline.mean is None else f"{baseline_text}; {said}"
        reason += f"; baseline: {said}"
    if our_why:
        said = failures_text(our_why) or ""
        ours_text = said if comparison.ours.mean is None else f"{ours_text}; {said}"
        reason += f"; ours: {said}"
    for name, side in (("baseline", base_side), ("ours", our_side)):
        best = best_text(record, side)
        if best:
            reason += f"; {name}: {best}"
        at_top = _at_top(side.get("top_rate"), side_values(record, side)[0])
        if at_top:
            reason += f"; {name}: every swept rate met the target at {at_top} seed(s) (capacity >= the top rate)"
    if record.get("note"):
        reason += f"; {record['note']}"
    also = []
    for extra in record.get("also", []):
        extra_metric = metric(extra["key"])
        text = also_text(extra_metric, _by_seed(record, extra["baseline"]), _by_seed(record, extra["ours"]))
        also.append(f"{extra_metric.label} {text}")
    if raw_p is None:
        shown_p = "-"
    elif is_claim:
        shown_p = f"p {p_text(raw_p)} (Holm {p_text(adjusted_p)})"
    else:
        shown_p = f"p {p_text(raw_p)}"
    n_seeds = len(record["seeds"])
    return {
        "scenario": record["scenario"],
        "setting": record["setting"],
        "role": record["role"],
        "paper": claim.text,
        "quantity": display.label,
        "baseline_label": base_side["label"],
        "ours_label": our_side["label"],
        "baseline": baseline_text,
        "ours": ours_text,
        "change": relative_text(relative),
        "diff": f"{display.format_change(paired.diff_mean)} {display.format_change_interval(paired.ci_low, paired.ci_high)}",
        "k_of_n": f"{paired.wins}/{paired.n_pairs}",
        "p": shown_p + (f", {test}" if test else ""),
        "verdict": result,
        "reason": reason,
        "also": "; ".join(also),
        "baseline_mean": comparison.baseline.mean,
        "ours_mean": comparison.ours.mean,
        "change_frac": relative.change,
        "change_low": relative.ci_low,
        "change_high": relative.ci_high,
        "change_method": relative.method,
        "diff_mean": paired.diff_mean,
        "diff_low": paired.ci_low,
        "diff_high": paired.ci_high,
        "p_value": raw_p,
        "p_holm": adjusted_p,
        "test": test,
        "wins": paired.wins,
        "n_pairs": paired.n_pairs,
        "seeds": n_seeds,
        "pilot": pilot,
        "record": dict(record),
    }


def compute_row(spec: RowSpec, results: Results, seeds: Sequence[int]) -> dict[str, Any]:
    """The table row of ``spec`` from the runs' outcomes, judged alone (a claim row is its own
    Holm family of one: its p unadjusted); a table's rows are judged together by
    :func:`judge_records` when it is written."""
    return judge_records([row_record(spec, results, seeds)])[0]


def tally_text(rows: Sequence[Mapping[str, Any]], pilot: bool = False) -> str:
    """The table's bottom line: the claim rows' verdicts counted, the supporting rows not."""
    claims = [row for row in rows if row.get("role") == "claim"]
    supporting = len(rows) - len(claims)
    count = lambda *names: sum(1 for row in claims if row.get("verdict") in names)  # noqa: E731
    tail = f"(of {len(claims)} claim rows); {supporting} supporting rows not counted."
    if pilot:
        return (
            f"Pilot (fewer than {PILOT_BELOW_SEEDS} seeds on a real engine): no row counts as reproduced. "
            f"{count('pilot: direction holds', 'pilot: bound holds')} direction holds, "
            f"{count('pilot: against')} against, {count('pilot: inconclusive')} inconclusive {tail}"
        )
    return (
        f"{count('reproduced')} reproduced, {count('on the boundary')} on the boundary, "
        f"{count('direction only', 'direction only (no paper number)')} direction "
        f"only, {count('not reproduced')} not reproduced, {count('inconclusive')} inconclusive {tail}"
    )


def holm_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """The table's header line on Holm's correction."""
    claims = [row for row in rows if row.get("role") == "claim"]
    tested = sum(1 for row in claims if row.get("p_value") not in (None, ""))
    text = (
        f"Holm's correction over the {tested} claim rows of this table (family-wise 5%); supporting rows are "
        "shown with their unadjusted p and are not counted"
    )
    if tested < len(claims):
        text += f" ({len(claims) - tested} further claim row(s) have no test: fewer than 2 seeds with both values)"
    return text + "."


def seeds_file_text(records: Sequence[Mapping[str, Any]], table: str, pilot: bool) -> str:
    """The compact ``.seeds.json`` of a table: one record a line."""
    head = json.dumps({"table": table, "pilot": pilot, "relative_interval": "fieller"})[:-1]
    body = ",\n".join(json.dumps(record, separators=(",", ":")) for record in records)
    return f'{head}, "rows": [\n{body}\n]}}\n'


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
    """Run ``members`` with :func:`runners.study.executors.run_members` (simulator: a pool of worker
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
