"""A saved study as the pages show it: the studies in a results folder, a study's member runs,
and the frames of the Results page (per-scheduler mean with its 95% interval, the paired change
against the baseline with its interval, the verdict and seeds won; capacity at a target SLO
attainment per seed for a study over rates, then its interval and paired difference).

Statistics come from study.json (:mod:`runners.study.runner` computes them once, from the member
summaries); capacity is computed here from the member summaries, per seed, with
:func:`runners.views.compare.capacity_at`, and summarized over seeds with
:mod:`runners.metrics.seed_statistics`. Member runs are read by the exact ids study.json lists,
inside the results folder only: never a prefix, a path or a symbolic link. Nothing here imports
streamlit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from runners.errors import SchedlabError
from runners.json_values import dotted_value, is_stored
from runners.metrics.catalog import RUN_METRICS, Metric
from runners.metrics.seed_statistics import SINGLE_SEED_NOTE, paired_comparison, summarize
from runners.store.models import (
    MetricStatistics,
    Number,
    PairedComparison,
    RunSummary,
    SeedSummary,
    StudyRecord,
    StudyRun,
)
from runners.store.result_store import RunData, folder_entries, load_run, read_summary, results_folder
from runners.store.run_ids import RUN_ID_PATTERN
from runners.study.runner import STUDY_FILE, read_study, relative_text
from runners.views.compare import capacity_at

#: Capacity: the highest arrival rate (req/s) at which SLO attainment stays at or above a target.
CAPACITY = Metric("capacity_rps", "capacity (req/s)", True, "req/s", 1.0, 2)
DAMAGED = "damaged"
#: Metric keys that say where requests waited (engine queue or gateway), not how they were served.
WHERE_REQUESTS_WAIT = "queue_s."
#: Verdict -> text colour on the Results page (better green, worse red, no difference grey).
VERDICT_COLOURS = {"better": "#1a7f37", "worse": "#cf222e", "no difference": "#6e7781"}

Loader = Callable[[Path, str], RunData]


class StudyEntry(StudyRecord):
    """A study as :func:`list_studies` lists it: its record (``study_id`` = the folder's name), or,
    for a study.json that cannot be read, only ``study_id``, ``status`` (``damaged``) and
    ``problem`` (why). Never written to a file."""

    baseline: str = ""  # empty on a damaged entry
    runs: list[StudyRun] = []
    statistics: dict[str, MetricStatistics] = {}
    problem: str | None = None


# -- finding and reading ---------------------------------------------------------------------------
def list_studies(root: str | Path) -> list[StudyEntry]:
    """The study records (study.json) of the folders directly inside ``root``, newest first by
    ``created_at``; ``study_id`` is the folder's name. A study.json that cannot be read is listed
    as an entry with only ``study_id``, ``status`` ``damaged`` and ``problem`` (last), never raised.
    SchedlabError only when ``root`` itself is not a usable folder."""
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
            fields = record.model_dump(mode="python", exclude_unset=True)
            good.append(StudyEntry.model_validate({**fields, "study_id": name}))
        except SchedlabError as exc:
            damaged.append(StudyEntry(study_id=name, status=DAMAGED, problem=str(exc)))
        except (OSError, RecursionError, ValueError) as exc:
            damaged.append(StudyEntry(study_id=name, status=DAMAGED, problem=f"{folder / STUDY_FILE}: {exc}"))
    good.sort(key=lambda record: str(record.created_at or ""), reverse=True)
    return good + damaged


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def record_problem(record: StudyRecord) -> str | None:
    """What in a study record (already checked by :func:`runners.study.runner.read_study`) the pages
    could not show: rates that are not finite numbers, run entries without their fields,
    statistics per rate without their statistics. None when it can be shown."""
    if not all(_number(rate) for rate in record.rates):
        return "'rates' is not a list of numbers"
    for index, run in enumerate(record.runs):
        checks: tuple[tuple[str, Any, bool, str], ...] = (
            ("scheduler", run.scheduler, run.scheduler is not None, "text"),
            ("status", run.status, run.status is not None, "text"),
            ("seed", run.seed, run.seed is not None, "an integer"),
            ("rate", run.rate, run.rate is None or _number(run.rate), "a number"),
        )
        for key, value, fits, expected in checks:
            if not fits:
                return f"runs[{index}].{key} is {value!r}, not {expected}"
    if not all(
        is_stored(entry, "statistics") and (entry.rate is None or _number(entry.rate))
        for entry in record.statistics_by_rate
    ):
        return "'statistics_by_rate' is not a list of {rate, statistics} objects"
    return None


def stat_count(stats: SeedSummary | PairedComparison | None, key: str = "n") -> int:
    """A statistics entry's count ``key`` (``n``, ``n_pairs``, ``wins``, ``dropped``; 0 without
    the entry)."""
    value = getattr(stats, key, None)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def member_records(record: StudyRecord, status: str | None = "done", rate: Any = None) -> list[StudyRun]:
    """The runs of ``record.runs`` with a valid run id (and ``status``, and ``rate`` when given;
    None: every status or rate)."""
    runs = []
    for run in record.runs:
        if not isinstance(run.run_id, str) or not RUN_ID_PATTERN.match(run.run_id):
            continue
        if status is not None and run.status != status:
            continue
        if rate is not None and run.rate != rate:
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


def ordered_schedulers(record: StudyRecord, names: Iterable[str]) -> list[str]:
    """Scheduler names, the study's order first (baseline first), then any others."""
    order = list(record.schedulers)
    if record.baseline in order:
        order.remove(record.baseline)
    order = [record.baseline, *order]
    return order + sorted(set(names) - set(order))


def study_member_runs(
    root: str | Path,
    record: StudyRecord,
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
    found: dict[str, list[tuple[int | None, RunData]]] = {}
    for run in member_records(record, rate=rate):
        try:
            member_folder(base, str(run.run_id))
            data = load(base, str(run.run_id))
        except SchedlabError as exc:
            if problems is not None:
                problems.append(str(exc))
            continue
        found.setdefault(str(run.scheduler), []).append((run.seed, data))
    return {
        name: [data for _, data in sorted(found[name], key=lambda item: str(item[0]).zfill(12))]
        for name in ordered_schedulers(record, found)
        if name in found
    }


def member_summaries(
    root: str | Path,
    record: StudyRecord,
    problems: list[str] | None = None,
    read: Callable[[Path], RunSummary] | None = None,
) -> dict[str, RunSummary]:
    """run id -> summary of every member that ended done (summaries only: cheap for hundreds of
    runs). ``read`` (folder) -> summary replaces :func:`runners.store.result_store.read_summary`; an
    unreadable member is left out and reported in ``problems``."""
    read = read or read_summary
    summaries = {}
    for run in member_records(record):
        run_id = str(run.run_id)
        try:
            summaries[run_id] = read(member_folder(root, run_id))
        except SchedlabError as exc:
            if problems is not None:
                problems.append(str(exc))
    return summaries


# -- what the study is -----------------------------------------------------------------------------
def study_counts(record: StudyRecord) -> dict[str, Any]:
    """Runs by status, seeds, rates, and the seeds dropped pairwise (seeds where some scheduler's
    run did not end done at some rate): ``{runs, by_status, done, failed, seeds, rates,
    schedulers, dropped_seeds}``."""
    runs = member_records(record, status=None)
    by_status: dict[str, int] = {}
    for run in runs:
        by_status[str(run.status)] = by_status.get(str(run.status), 0) + 1
    dropped = sorted({run.seed for run in runs if run.status != "done"}, key=str)
    return {
        "runs": len(runs),
        "by_status": by_status,
        "done": by_status.get("done", 0),
        "failed": by_status.get("failed", 0),
        "seeds": list(record.seeds),
        "rates": list(record.rates),
        "schedulers": ordered_schedulers(record, []),
        "dropped_seeds": dropped,
    }


#: The fields of a member's summary that every member of a study shares (:func:`study_setting`).
SETTING_FIELDS = ("engine", "workload", "requests_total", "instances", "arrival_process")


def study_setting(summaries: Mapping[str, RunSummary]) -> dict[str, Any]:
    """What the members share, from their summaries: engine, workload, requests per run,
    instances, arrival process (the first summary that has each)."""
    setting: dict[str, Any] = {}
    for summary in summaries.values():
        for key in SETTING_FIELDS:
            value = dotted_value(summary, key)
            if setting.get(key) is None and value is not None:
                setting[key] = value
    return setting


def planned_setting(record: StudyRecord) -> dict[str, Any]:
    """The setting the study was planned with (study.json's ``config``, schema 3+), in the keys of
    :func:`study_setting`: what the header shows before any member has a summary. Empty for a
    study without a config or one this version cannot read."""
    from runners.run.config import RunConfig  # the config model loads the engine kinds

    if not record.config:
        return {}
    try:
        config = RunConfig.model_validate(record.config)
    except ValueError:
        return {}
    return {
        "engine": config.engine.kind,
        "workload": config.workload.label(),
        "requests_total": config.workload.requests,
        "instances": config.engine.instances,
        "arrival_process": config.workload.arrival.process,
    }


def statistics_by_rate(record: StudyRecord) -> list[tuple[Number | None, dict[str, MetricStatistics]]]:
    """(rate in req/s or None, statistics) per arrival rate of the study, in its order."""
    by_rate = [entry for entry in record.statistics_by_rate if is_stored(entry, "statistics")]
    if by_rate:
        return [(entry.rate, entry.statistics) for entry in by_rate]
    return [(None, record.statistics)]


def same_as_baseline(record: StudyRecord) -> dict[str, list[Number | None]]:
    """Scheduler -> the arrival rates (None: the study's one rate) at which the paired difference
    against the baseline of every judged metric a user sees is exactly 0 at every seed (mean 0
    and interval [0, 0], or one pair with difference 0), read from study.json: its results there
    equal the baseline's. Queue time is left out of the check: a scheduler that holds requests at
    the gateway moves their wait from the engine's queue to its own without changing any
    outcome. A scheduler that differs somewhere is left out."""
    found: dict[str, list[Number | None]] = {}
    for rate, statistics in statistics_by_rate(record):
        pairs: dict[str, list[PairedComparison]] = {}
        for key, entry in statistics.items():
            if key.startswith(WHERE_REQUESTS_WAIT):
                continue
            for name, pair in entry.vs_baseline.items():
                if pair.n_pairs:
                    pairs.setdefault(name, []).append(pair)
        for name, entries in pairs.items():
            if all(pair.diff_mean == 0 and pair.ci_low in (0, None) and pair.ci_high in (0, None) for pair in entries):
                found.setdefault(name, []).append(rate)
    return {name: found[name] for name in ordered_schedulers(record, found) if name in found}


def same_as_baseline_lines(record: StudyRecord) -> list[str]:
    """A sentence for each scheduler of :func:`same_as_baseline`: its zeros are no finding, and
    what would let it differ."""
    baseline = record.baseline
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
def wins_text(pair: PairedComparison) -> str:
    """``3 of 5 seeds`` (seeds where the scheduler is better), with the dropped seeds."""
    dropped = f" ({pair.dropped} dropped)" if pair.dropped else ""
    return f"{pair.wins} of {pair.n_pairs} seeds{dropped}"


def mean_text(metric: Metric, stats: SeedSummary) -> str:
    """``92.1 [88.0, 96.2]``: the mean over seeds and its 95% interval, in display units."""
    return f"{metric.format(stats.mean)} {metric.format_interval(stats.ci_low, stats.ci_high)}"


def change_text(metric: Metric, pair: PairedComparison) -> str:
    """``+3.2 pts [-1.0, 7.4]``: the mean paired difference and its 95% interval."""
    return f"{metric.format_change(pair.diff_mean)} {metric.format_change_interval(pair.ci_low, pair.ci_high)}"


#: A comparison row where no seed has both the scheduler's and the baseline's value.
NOT_COMPARED = "not compared: no seed has finished runs of both it and the baseline"


def nothing_to_compare(record: StudyRecord) -> str | None:
    """What to say instead of tables and charts when no member run of the study has finished
    (no scheduler has a value at any seed); None once there is something to show."""
    tables = [statistics for _, statistics in statistics_by_rate(record)] + [record.statistics]
    if any(stats.n for table in tables for entry in table.values() for stats in entry.schedulers.values()):
        return None
    runs = member_records(record, status=None)
    done = sum(1 for run in runs if run.status == "done")
    return (
        f"Nothing to compare yet: no member run has finished with values ({done} of {len(runs)} runs done, "
        f"study {record.status or 'pending'}). The tables and charts appear once a seed has finished."
    )


def statistics_frame(
    record: StudyRecord, statistics: Mapping[str, MetricStatistics], metrics: Iterable[Metric] = RUN_METRICS
) -> pd.DataFrame:
    """One row per metric and scheduler: ``metric``, ``scheduler``, ``n`` (seeds with a value),
    ``mean [95% CI]``, ``change vs <baseline> [95% CI]``, ``relative change [95% CI]``,
    ``seeds better`` (k of n), ``verdict`` (better / worse / no difference; ``baseline`` on the
    baseline's rows; empty for metrics that describe the setting, which get no verdict) and
    ``note``; hidden helpers ``key`` and ``judged`` (whether the verdict may be coloured).
    Values formatted by the catalog, in display units."""
    baseline = record.baseline
    change_column = f"change vs {baseline} [95% CI]"
    rows = []
    for metric in metrics:
        entry = statistics.get(metric.key)
        per = entry.schedulers if entry is not None else {}
        if not per or (metric.real_engines_only and not any(stats.n for stats in per.values())):
            continue
        versus = entry.vs_baseline if entry is not None else {}
        for name in ordered_schedulers(record, per):
            stats = per.get(name) or SeedSummary()
            pair = versus.get(name)
            row = {
                "metric": metric.label,
                "scheduler": name,
                "n": stats.n,
                "mean [95% CI]": mean_text(metric, stats),
                change_column: "",
                "relative change [95% CI]": "",
                "seeds better": "",
                "verdict": "",
                "note": stats.note or "",
                "key": metric.key,
                "judged": False,
            }
            if metric.describes_setting:
                row["note"] = "describes the setting (how contended the runs were): no verdict"
            elif name == baseline:
                row["verdict"] = "baseline"
            elif pair is not None and pair.n_pairs == 0:  # no seed has both: nothing was compared
                row.update({"verdict": "-", "seeds better": "0 of 0", "note": NOT_COMPARED})
            elif pair is not None:
                row.update(
                    {
                        change_column: change_text(metric, pair),
                        "relative change [95% CI]": relative_text(pair.relative),
                        "seeds better": wins_text(pair),
                        "verdict": pair.verdict if pair.verdict in VERDICT_COLOURS else "-",
                        "note": pair.note or row["note"],
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


def study_frames(record: StudyRecord) -> list[tuple[Number | None, pd.DataFrame]]:
    """(rate or None, :func:`statistics_frame`) per arrival rate."""
    return [(rate, statistics_frame(record, statistics)) for rate, statistics in statistics_by_rate(record)]


# -- rate studies: sweeps and capacity -------------------------------------------------------------
def sweep_statistics(record: StudyRecord, key: str) -> pd.DataFrame:
    """Per scheduler and rate, metric ``key``'s ``{n, mean, ci_low, ci_high}`` over seeds (stored
    units), from study.json: the rows of a sweep chart with interval bands."""
    rows = []
    for rate, statistics in statistics_by_rate(record):
        entry = statistics.get(key)
        per = entry.schedulers if entry is not None else {}
        for name in ordered_schedulers(record, per):
            stats = per.get(name) or SeedSummary()
            rows.append(
                {
                    "scheduler": name,
                    "rate_rps": rate,
                    "n": stats.n,
                    "mean": stats.mean,
                    "ci_low": stats.ci_low,
                    "ci_high": stats.ci_high,
                }
            )
    return pd.DataFrame(rows, columns=["scheduler", "rate_rps", "n", "mean", "ci_low", "ci_high"])


def capacity_per_seed(record: StudyRecord, summaries: Mapping[str, RunSummary], target: float) -> pd.DataFrame:
    """Capacity (req/s) at SLO attainment >= ``target`` for each scheduler and seed of a study over
    rates: :func:`runners.views.compare.capacity_at` over that seed's rates. Columns ``scheduler``,
    ``seed``, ``capacity_rps`` (None: no capacity), ``at_least`` (every rate met the target: the
    capacity is at least the highest rate), ``reason`` (why there is none: below the lowest rate,
    or a run of that seed missing)."""
    rates = list(record.rates)
    cells: dict[tuple[str, int | None], dict[Number | None, float | None]] = {}
    for run in member_records(record, status=None):
        summary = summaries.get(str(run.run_id)) if run.status == "done" else None
        value = summary.slo_attainment if summary is not None else None
        cells.setdefault((str(run.scheduler), run.seed), {})[run.rate] = float(value) if value is not None else None
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


def capacity_table(record: StudyRecord, per_seed: pd.DataFrame) -> pd.DataFrame:
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


def capacity_statistics(record: StudyRecord, per_seed: pd.DataFrame) -> pd.DataFrame:
    """Capacity over seeds per scheduler (:func:`summarize`) and against the baseline, paired by
    seed (:func:`paired_comparison`; a seed with no capacity on either side is dropped and
    counted). Columns as :func:`statistics_frame` plus the numbers: ``mean``, ``ci_low``,
    ``ci_high``, ``diff_mean``, ``diff_low``, ``diff_high``, ``wins``, ``n_pairs`` (req/s)."""
    baseline = record.baseline
    change_column = f"change vs {baseline} [95% CI]"
    values = {
        name: dict(zip(group["seed"], group["capacity_rps"].astype(object).where(group["capacity_rps"].notna(), None)))
        for name, group in per_seed.groupby("scheduler", sort=False)
    }
    rows = []
    for name in ordered_schedulers(record, values):
        if name not in values:
            continue
        stats = SeedSummary.model_validate(summarize(list(values[name].values())).as_dict())
        without = sum(1 for value in values[name].values() if value is None)
        row = {
            "scheduler": name,
            "n": stats.n,
            "mean [95% CI]": mean_text(CAPACITY, stats),
            change_column: "",
            "seeds better": "",
            "verdict": "baseline" if name == baseline else "",
            "note": "; ".join(
                part for part in (stats.note or "", f"{without} seed(s) without a capacity" if without else "") if part
            ),
            "judged": False,
            "mean": stats.mean,
            "ci_low": stats.ci_low,
            "ci_high": stats.ci_high,
            "diff_mean": None,
            "diff_low": None,
            "diff_high": None,
            "wins": None,
            "n_pairs": None,
        }
        if name != baseline and baseline in values:
            pair = PairedComparison.model_validate(
                paired_comparison(values[baseline], values[name], CAPACITY.higher_is_better).as_dict()
            )
            row.update(
                {
                    change_column: change_text(CAPACITY, pair),
                    "seeds better": wins_text(pair),
                    "verdict": pair.verdict,
                    "judged": True,
                    "diff_mean": pair.diff_mean,
                    "diff_low": pair.ci_low,
                    "diff_high": pair.ci_high,
                    "wins": pair.wins,
                    "n_pairs": pair.n_pairs,
                    "note": pair.note or row["note"],
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
    "StudyEntry",
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
