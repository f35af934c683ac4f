"""A saved study as the pages show it: the studies in a results folder, a study's member runs,
and the frames of the Results page (per-scheduler mean with its 95% interval, the paired change
against the baseline with its interval, the verdict and seeds won; capacity at a target SLO
attainment per seed for a study over rates, then its interval and paired difference).

Statistics come from study.json (:mod:`runners.study` computes them once, from the member
summaries); capacity is computed here from the member summaries, per seed, with
:func:`runners.compare.capacity_at`, and summarized over seeds with
:mod:`runners.metrics.seed_statistics`. Member runs are read by the exact ids study.json lists,
inside the results folder only: never a prefix, a path or a symbolic link. Nothing here imports
streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from runners.compare import COMPARISON_METRICS, capacity_at
from runners.errors import SchedlabError
from runners.json_values import as_dict
from runners.metrics.catalog import Metric
from runners.metrics.seed_statistics import SINGLE_SEED_NOTE, paired_comparison, summarize
from runners.result_store import RunData, folder_entries, load_run, read_summary, results_folder
from runners.run_ids import RUN_ID_PATTERN
from runners.study import STUDY_FILE, read_study, relative_text

#: Capacity: the highest arrival rate (req/s) at which SLO attainment stays at or above a target.
CAPACITY = Metric("capacity_rps", "capacity (req/s)", True, "req/s", 1.0, 2)
DAMAGED = "damaged"
#: Metric keys that say where requests waited (engine queue or gateway), not how they were served.
WHERE_REQUESTS_WAIT = "queue_s."
#: Verdict -> text colour on the Results page (better green, worse red, no difference grey).
VERDICT_COLOURS = {"better": "#1a7f37", "worse": "#cf222e", "no difference": "#6e7781"}

Loader = Callable[[Path, str], RunData]


# -- finding and reading ---------------------------------------------------------------------------
def list_studies(root: str | Path) -> list[dict[str, Any]]:
    """The study records (study.json) of the folders directly inside ``root``, newest first by
    ``created_at``; ``study_id`` is the folder's name. A study.json that cannot be read is listed
    as ``{"study_id", "status": "damaged", "problem"}`` (last), never raised. SchedlabError only
    when ``root`` itself is not a usable folder."""
    base = results_folder(root)
    good, damaged = [], []
    for name in sorted(folder_entries(base)):
        folder = base / name
        if not RUN_ID_PATTERN.match(name) or folder.is_symlink() or not folder.is_dir():
            continue
        if not (folder / STUDY_FILE).exists():
            continue
        try:
            record = read_study(folder)
            problem = record_problem(record)
            if problem is not None:
                raise SchedlabError(f"{folder / STUDY_FILE}: {problem}; expected a study record")
            good.append({**record, "study_id": name})
        except SchedlabError as exc:
            damaged.append({"study_id": name, "status": DAMAGED, "problem": str(exc)})
        except (OSError, RecursionError, ValueError) as exc:
            damaged.append({"study_id": name, "status": DAMAGED, "problem": f"{folder / STUDY_FILE}: {exc}"})
    good.sort(key=lambda record: str(record.get("created_at") or ""), reverse=True)
    return good + damaged


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def record_problem(record: dict[str, Any]) -> str | None:
    """What in a study record (already checked by :func:`runners.study.read_study`) the pages
    could not show: rates that are not numbers, run entries without their fields, statistics
    per rate that are not objects. None when it can be shown."""
    rates = record.get("rates") or []
    if not isinstance(rates, list) or not all(_number(rate) for rate in rates):
        return "'rates' is not a list of numbers"
    for index, run in enumerate(record.get("runs") or []):
        for key, check, expected in (
            ("scheduler", lambda v: isinstance(v, str), "text"),
            ("status", lambda v: isinstance(v, str), "text"),
            ("seed", lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
            ("rate", lambda v: v is None or _number(v), "a number"),
        ):
            if not check(run.get(key)):
                return f"runs[{index}].{key} is {run.get(key)!r}, not {expected}"
    by_rate = record.get("statistics_by_rate", [])
    if not isinstance(by_rate, list) or not all(
        isinstance(entry, dict)
        and isinstance(entry.get("statistics"), dict)
        and (entry.get("rate") is None or _number(entry.get("rate")))
        for entry in by_rate
    ):
        return "'statistics_by_rate' is not a list of {rate, statistics} objects"
    return None


def stat_count(stats: dict[str, Any], key: str = "n") -> int:
    """A statistics entry's count ``key`` (0 when it is not a count)."""
    value = stats.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def member_records(record: dict[str, Any], status: str | None = "done", rate: Any = None) -> list[dict[str, Any]]:
    """The run records of ``record["runs"]`` with a valid run id (and ``status``, and ``rate``
    when given; None: every status or rate)."""
    runs = []
    for run in record.get("runs") or []:
        run_id = run.get("run_id") if isinstance(run, dict) else None
        if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
            continue
        if status is not None and run.get("status") != status:
            continue
        if rate is not None and run.get("rate") != rate:
            continue
        runs.append(run)
    return runs


def member_folder(root: str | Path, run_id: str) -> Path:
    """The folder of member ``run_id``: exactly that name directly inside ``root``, a real folder
    (SchedlabError otherwise: gone, a link, a path)."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
        raise SchedlabError(f"member {run_id!r} is not a run id")
    base = results_folder(root)
    folder = base / run_id
    if folder.is_symlink():
        raise SchedlabError(f"member run {run_id!r} is a symbolic link in {base}; not read")
    if not folder.is_dir():
        raise SchedlabError(f"member run {run_id!r} is missing from {base} (deleted or renamed?)")
    return folder


def load_member(root: str | Path, run_id: str) -> RunData:
    """Member ``run_id`` with its tables, by its exact id inside ``root`` (never a prefix)."""
    member_folder(root, run_id)
    run = load_run(root, run_id)
    if run.run_id != run_id:  # load_run also takes prefixes; a study reads exact ids only
        raise SchedlabError(f"member run {run_id!r} is missing from {root}")
    return run


def ordered_schedulers(record: dict[str, Any], names: Iterable[str]) -> list[str]:
    """Scheduler names, the study's order first (baseline first), then any others."""
    order = [str(name) for name in record.get("schedulers") or []]
    baseline = record.get("baseline")
    if baseline in order:
        order.remove(baseline)
    order = ([baseline] if isinstance(baseline, str) else []) + order
    return order + sorted(set(names) - set(order))


def study_member_runs(
    root: str | Path,
    record: dict[str, Any],
    load: Loader | None = None,
    *,
    rate: Any = None,
    problems: list[str] | None = None,
) -> dict[str, list[RunData]]:
    """Scheduler -> its member runs that ended done (with their request and time-series tables),
    loaded by the exact run ids study.json lists, inside ``root`` only, in seed order. ``load``
    (results folder, run id) -> RunData replaces :func:`load_member` (a page passes a cached
    one); ``rate`` keeps one arrival rate's runs. A member that cannot be read is left out and
    its one-line reason appended to ``problems``."""
    load = load or load_member
    base = results_folder(root)
    found: dict[str, list[tuple[Any, RunData]]] = {}
    for run in member_records(record, rate=rate):
        try:
            member_folder(base, run["run_id"])
            data = load(base, run["run_id"])
        except SchedlabError as exc:
            if problems is not None:
                problems.append(str(exc))
            continue
        found.setdefault(str(run.get("scheduler")), []).append((run.get("seed"), data))
    return {
        name: [data for _, data in sorted(found[name], key=lambda item: str(item[0]).zfill(12))]
        for name in ordered_schedulers(record, found)
        if name in found
    }


def member_summaries(
    root: str | Path,
    record: dict[str, Any],
    problems: list[str] | None = None,
    read: Callable[[Path], dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """run id -> summary of every member that ended done (summaries only: cheap for hundreds of
    runs). ``read`` (folder) -> summary replaces :func:`runners.result_store.read_summary`; an
    unreadable member is left out and reported in ``problems``."""
    read = read or read_summary
    summaries = {}
    for run in member_records(record):
        try:
            summaries[run["run_id"]] = read(member_folder(root, run["run_id"]))
        except SchedlabError as exc:
            if problems is not None:
                problems.append(str(exc))
    return summaries


# -- what the study is -----------------------------------------------------------------------------
def study_counts(record: dict[str, Any]) -> dict[str, Any]:
    """Runs by status, seeds, rates, and the seeds dropped pairwise (seeds where some scheduler's
    run did not end done at some rate): ``{runs, by_status, done, failed, seeds, rates,
    schedulers, dropped_seeds}``."""
    runs = member_records(record, status=None)
    by_status: dict[str, int] = {}
    for run in runs:
        by_status[str(run.get("status"))] = by_status.get(str(run.get("status")), 0) + 1
    seeds = [seed for seed in record.get("seeds") or []]
    dropped = sorted({run.get("seed") for run in runs if run.get("status") != "done"}, key=str)
    return {
        "runs": len(runs),
        "by_status": by_status,
        "done": by_status.get("done", 0),
        "failed": by_status.get("failed", 0),
        "seeds": seeds,
        "rates": list(record.get("rates") or []),
        "schedulers": ordered_schedulers(record, []),
        "dropped_seeds": dropped,
    }


def study_setting(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the members share, from their summaries: engine, workload, requests per run,
    instances, arrival process (the first summary that has each)."""
    setting: dict[str, Any] = {}
    for summary in summaries.values():
        for key in ("engine", "workload", "requests_total", "instances", "arrival_process"):
            if setting.get(key) is None and summary.get(key) is not None:
                setting[key] = summary.get(key)
    return setting


def statistics_by_rate(record: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(rate in req/s or None, statistics) per arrival rate of the study, in its order."""
    by_rate = [
        entry
        for entry in record.get("statistics_by_rate") or []
        if isinstance(entry, dict) and isinstance(entry.get("statistics"), dict)
    ]
    if by_rate:
        return [(entry.get("rate"), entry["statistics"]) for entry in by_rate]
    statistics = record.get("statistics")
    return [(None, statistics if isinstance(statistics, dict) else {})]


def same_as_baseline(record: dict[str, Any]) -> dict[str, list[Any]]:
    """Scheduler -> the arrival rates (None: the study's one rate) at which the paired difference
    against the baseline of every judged metric a user sees is exactly 0 at every seed (mean 0
    and interval [0, 0], or one pair with difference 0), read from study.json: its results there
    equal the baseline's. Queue time is left out of the check: a scheduler that holds requests at
    the gateway moves their wait from the engine's queue to its own without changing any
    outcome. A scheduler that differs somewhere is left out."""
    found: dict[str, list[Any]] = {}
    for rate, statistics in statistics_by_rate(record):
        pairs: dict[str, list[dict[str, Any]]] = {}
        for key, entry in statistics.items():
            if str(key).startswith(WHERE_REQUESTS_WAIT):
                continue
            for name, pair in as_dict(as_dict(entry).get("vs_baseline")).items():
                if isinstance(pair, dict) and stat_count(pair, "n_pairs"):
                    pairs.setdefault(str(name), []).append(pair)
        for name, entries in pairs.items():
            if all(
                pair.get("diff_mean") == 0 and pair.get("ci_low") in (0, None) and pair.get("ci_high") in (0, None)
                for pair in entries
            ):
                found.setdefault(name, []).append(rate)
    return {name: found[name] for name in ordered_schedulers(record, found) if name in found}


def same_as_baseline_lines(record: dict[str, Any]) -> list[str]:
    """A sentence for each scheduler of :func:`same_as_baseline`: its zeros are no finding, and
    what would let it differ."""
    baseline = record.get("baseline")
    several = len(statistics_by_rate(record)) > 1
    lines = []
    for name, rates in same_as_baseline(record).items():
        where = f" at {', '.join(format(rate, '.4g') for rate in rates)} req/s" if several else ""
        lines.append(
            f"{name} got exactly {baseline}'s results{where} at every seed (attainment, G, throughput and "
            f"every latency: each paired difference is 0): what it decides differently never changed how "
            f"a request was served in this setting, so these zeros are no finding about {name}"
        )
    return lines


# -- the statistics table --------------------------------------------------------------------------
def wins_text(pair: dict[str, Any]) -> str:
    """``3 of 5 seeds`` (seeds where the scheduler is better), with the dropped seeds."""
    dropped = f" ({stat_count(pair, 'dropped')} dropped)" if stat_count(pair, "dropped") else ""
    return f"{stat_count(pair, 'wins')} of {stat_count(pair, 'n_pairs')} seeds{dropped}"


def mean_text(metric: Metric, stats: dict[str, Any]) -> str:
    """``92.1 [88.0, 96.2]``: the mean over seeds and its 95% interval, in display units."""
    return f"{metric.format(stats.get('mean'))} {metric.format_interval(stats.get('ci_low'), stats.get('ci_high'))}"


def change_text(metric: Metric, pair: dict[str, Any]) -> str:
    """``+3.2 pts [-1.0, 7.4]``: the mean paired difference and its 95% interval."""
    return (
        f"{metric.format_change(pair.get('diff_mean'))} "
        f"{metric.format_interval(pair.get('ci_low'), pair.get('ci_high'))}"
    )


def statistics_frame(
    record: dict[str, Any], statistics: dict[str, Any], metrics: Iterable[Metric] = COMPARISON_METRICS
) -> pd.DataFrame:
    """One row per metric and scheduler: ``metric``, ``scheduler``, ``n`` (seeds with a value),
    ``mean [95% CI]``, ``change vs <baseline> [95% CI]``, ``relative change [95% CI]``,
    ``seeds better`` (k of n), ``verdict`` (better / worse / no difference; ``baseline`` on the
    baseline's rows; empty for metrics that describe the setting, which get no verdict) and
    ``note``; hidden helpers ``key`` and ``judged`` (whether the verdict may be coloured).
    Values formatted by the catalog, in display units."""
    baseline = str(record.get("baseline"))
    change_column = f"change vs {baseline} [95% CI]"
    rows = []
    for metric in metrics:
        entry = as_dict(statistics.get(metric.key))
        per = as_dict(entry.get("schedulers"))
        if not per or (metric.real_engines_only and not any(stat_count(as_dict(s)) for s in per.values())):
            continue
        versus = as_dict(entry.get("vs_baseline"))
        for name in ordered_schedulers(record, per):
            stats = as_dict(per.get(name))
            pair = as_dict(versus.get(name))
            row = {
                "metric": metric.label,
                "scheduler": name,
                "n": stat_count(stats),
                "mean [95% CI]": mean_text(metric, stats),
                change_column: "",
                "relative change [95% CI]": "",
                "seeds better": "",
                "verdict": "",
                "note": stats.get("note") or "",
                "key": metric.key,
                "judged": False,
            }
            if metric.describes_setting:
                row["note"] = "describes the setting (how contended the runs were): no verdict"
            elif name == baseline:
                row["verdict"] = "baseline"
            elif pair:
                row.update(
                    {
                        change_column: change_text(metric, pair),
                        "relative change [95% CI]": relative_text(as_dict(pair.get("relative"))),
                        "seeds better": wins_text(pair),
                        "verdict": pair["verdict"] if pair.get("verdict") in VERDICT_COLOURS else "-",
                        "note": pair.get("note") or row["note"],
                        "judged": True,
                    }
                )
            rows.append(row)
    columns = [
        "metric",
        "scheduler",
        "n",
        "mean [95% CI]",
        change_column,
        "relative change [95% CI]",
        "seeds better",
        "verdict",
        "note",
        "key",
        "judged",
    ]
    return pd.DataFrame(rows, columns=columns)


def verdict_colour(verdict: str, judged: bool = True) -> str:
    """CSS for a verdict cell: green better, red worse, grey no difference; none for the baseline
    and for metrics that describe the setting."""
    colour = VERDICT_COLOURS.get(verdict) if judged else None
    return f"color: {colour}; font-weight: 600" if colour else ""


def study_frames(record: dict[str, Any]) -> list[tuple[Any, pd.DataFrame]]:
    """(rate or None, :func:`statistics_frame`) per arrival rate."""
    return [(rate, statistics_frame(record, statistics)) for rate, statistics in statistics_by_rate(record)]


# -- rate studies: sweeps and capacity -------------------------------------------------------------
def sweep_statistics(record: dict[str, Any], key: str) -> pd.DataFrame:
    """Per scheduler and rate, metric ``key``'s ``{n, mean, ci_low, ci_high}`` over seeds (stored
    units), from study.json: the rows of a sweep chart with interval bands."""
    rows = []
    for rate, statistics in statistics_by_rate(record):
        per = as_dict(as_dict(statistics.get(key)).get("schedulers"))
        for name in ordered_schedulers(record, per):
            stats = as_dict(per.get(name))
            rows.append(
                {
                    "scheduler": name,
                    "rate_rps": rate,
                    "n": stat_count(stats),
                    "mean": stats.get("mean"),
                    "ci_low": stats.get("ci_low"),
                    "ci_high": stats.get("ci_high"),
                }
            )
    return pd.DataFrame(rows, columns=["scheduler", "rate_rps", "n", "mean", "ci_low", "ci_high"])


def capacity_per_seed(record: dict[str, Any], summaries: dict[str, dict[str, Any]], target: float) -> pd.DataFrame:
    """Capacity (req/s) at SLO attainment >= ``target`` for each scheduler and seed of a study over
    rates: :func:`runners.compare.capacity_at` over that seed's rates. Columns ``scheduler``,
    ``seed``, ``capacity_rps`` (None: no capacity), ``at_least`` (every rate met the target: the
    capacity is at least the highest rate), ``reason`` (why there is none: below the lowest rate,
    or a run of that seed missing)."""
    rates = [rate for rate in record.get("rates") or []]
    cells: dict[tuple[str, Any], dict[Any, float | None]] = {}
    for run in member_records(record, status=None):
        summary = summaries.get(run["run_id"]) if run.get("status") == "done" else None
        value = summary.get("slo_attainment") if isinstance(summary, dict) else None
        cells.setdefault((str(run.get("scheduler")), run.get("seed")), {})[run.get("rate")] = (
            float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        )
    rows = []
    for (name, seed), by_rate in cells.items():
        measured = {rate: value for rate, value in by_rate.items() if value is not None}
        missing = [rate for rate in rates if rate not in measured]
        capacity, at_least, reason = None, False, ""
        if missing:
            reason = f"no result at {CAPACITY.format(missing[0])} req/s"
        else:
            attainments = [measured[rate] for rate in rates]
            capacity = capacity_at(rates, attainments, target)
            at_least = all(value >= target for value in attainments)
            if capacity is None:
                reason = "below the lowest rate"
        rows.append({"scheduler": name, "seed": seed, "capacity_rps": capacity, "at_least": at_least, "reason": reason})
    frame = pd.DataFrame(rows, columns=["scheduler", "seed", "capacity_rps", "at_least", "reason"])
    order = {name: index for index, name in enumerate(ordered_schedulers(record, frame["scheduler"]))}
    return frame.sort_values(
        ["scheduler", "seed"],
        key=lambda column: column.map(order) if column.name == "scheduler" else column.astype(str).str.zfill(12),
    ).reset_index(drop=True)


def capacity_text(row: dict[str, Any] | pd.Series) -> str:
    """One seed's capacity as shown: ``4.25``, ``≥ 8.00`` (every rate met the target), or why
    there is none."""
    value = row["capacity_rps"]
    if value is None or pd.isna(value):
        return str(row["reason"] or "-")
    return ("≥ " if row["at_least"] else "") + CAPACITY.format(value)


def capacity_table(record: dict[str, Any], per_seed: pd.DataFrame) -> pd.DataFrame:
    """Seeds as rows, schedulers as columns: each seed's capacity text (:func:`capacity_text`)."""
    if per_seed.empty:
        return pd.DataFrame(columns=["seed"])
    shown = per_seed.assign(text=[capacity_text(row) for _, row in per_seed.iterrows()])
    table = shown.pivot(index="seed", columns="scheduler", values="text")
    columns = [name for name in ordered_schedulers(record, table.columns) if name in table.columns]
    return table[columns].reset_index()


#: The numbers behind :func:`capacity_statistics`' text columns (req/s; ``wins`` and ``n_pairs``
#: seeds), kept for export and not shown.
CAPACITY_NUMBER_COLUMNS = ("mean", "ci_low", "ci_high", "diff_mean", "diff_low", "diff_high", "wins", "n_pairs")
#: The tables' columns that a page does not show: ``key`` (the metric's summary key), ``judged``
#: (whether the verdict may be coloured) and the capacity table's numbers.
HIDDEN_COLUMNS = ("key", "judged", *CAPACITY_NUMBER_COLUMNS)


def capacity_statistics(record: dict[str, Any], per_seed: pd.DataFrame) -> pd.DataFrame:
    """Capacity over seeds per scheduler (:func:`summarize`) and against the baseline, paired by
    seed (:func:`paired_comparison`; a seed with no capacity on either side is dropped and
    counted). Columns as :func:`statistics_frame` plus the numbers: ``mean``, ``ci_low``,
    ``ci_high``, ``diff_mean``, ``diff_low``, ``diff_high``, ``wins``, ``n_pairs`` (req/s)."""
    baseline = str(record.get("baseline"))
    change_column = f"change vs {baseline} [95% CI]"
    values = {
        name: dict(zip(group["seed"], group["capacity_rps"].astype(object).where(group["capacity_rps"].notna(), None)))
        for name, group in per_seed.groupby("scheduler", sort=False)
    }
    rows = []
    for name in ordered_schedulers(record, values):
        if name not in values:
            continue
        stats = summarize(list(values[name].values())).as_dict()
        without = sum(1 for value in values[name].values() if value is None)
        row = {
            "scheduler": name,
            "n": stats["n"],
            "mean [95% CI]": mean_text(CAPACITY, stats),
            change_column: "",
            "seeds better": "",
            "verdict": "baseline" if name == baseline else "",
            "note": "; ".join(
                part
                for part in (stats.get("note") or "", f"{without} seed(s) without a capacity" if without else "")
                if part
            ),
            "judged": False,
            "mean": stats["mean"],
            "ci_low": stats["ci_low"],
            "ci_high": stats["ci_high"],
            "diff_mean": None,
            "diff_low": None,
            "diff_high": None,
            "wins": None,
            "n_pairs": None,
        }
        if name != baseline and baseline in values:
            pair = paired_comparison(values[baseline], values[name], CAPACITY.higher_is_better).as_dict()
            row.update(
                {
                    change_column: change_text(CAPACITY, pair),
                    "seeds better": wins_text(pair),
                    "verdict": pair["verdict"],
                    "judged": True,
                    "diff_mean": pair["diff_mean"],
                    "diff_low": pair["ci_low"],
                    "diff_high": pair["ci_high"],
                    "wins": pair["wins"],
                    "n_pairs": pair["n_pairs"],
                    "note": pair.get("note") or row["note"],
                }
            )
        rows.append(row)
    return pd.DataFrame(
        rows,
        columns=[
            "scheduler",
            "n",
            "mean [95% CI]",
            change_column,
            "seeds better",
            "verdict",
            "note",
            "judged",
            *CAPACITY_NUMBER_COLUMNS,
        ],
    )


__all__ = [
    "CAPACITY",
    "SINGLE_SEED_NOTE",
    "VERDICT_COLOURS",
    "list_studies",
    "member_records",
    "member_folder",
    "load_member",
    "record_problem",
    "study_member_runs",
    "member_summaries",
    "study_counts",
    "study_setting",
    "statistics_by_rate",
    "same_as_baseline",
    "same_as_baseline_lines",
    "statistics_frame",
    "study_frames",
    "verdict_colour",
    "wins_text",
    "mean_text",
    "change_text",
    "sweep_statistics",
    "capacity_per_seed",
    "capacity_text",
    "capacity_table",
    "capacity_statistics",
]
