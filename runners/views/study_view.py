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

import html
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
from runners.views.compare import PARTIAL_MARK, capacity_at

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


#: The study table's metric groups, headline first: (title, metric keys in the order shown). A
#: metric of the catalog that no group lists is shown last, under :data:`OTHER_GROUP`.
METRIC_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "SLO attainment, G and throughput",
        (
            "slo_attainment",
            "G",
            "goodput_rps",
            "request_throughput_rps",
            "output_throughput_tps",
            "slo_attainment_by_task.chat",
            "slo_attainment_by_task.code",
        ),
    ),
    ("Latency: means and p99", ("ttft_s.mean", "ttft_s.p99", "tpot_s.mean", "tpot_s.p99", "e2e_s.mean", "e2e_s.p99")),
    ("Latency: p90 and queue", ("ttft_s.p90", "tpot_s.p90", "e2e_s.p90", "queue_s.mean")),
    (
        "Requests and duration",
        (
            "completed",
            "failed",
            "preemptions",
            "output_length_mismatches",
            "resent_requests",
            "server_requests",
            "duration_s",
        ),
    ),
    (
        "Contention: how contended the runs were",
        ("contention.waiting_peak", "contention.waiting_mean", "contention.queued_share"),
    ),
)
OTHER_GROUP = "Other"
assert {key for _, keys in METRIC_GROUPS for key in keys} <= {entry.key for entry in RUN_METRICS}


def grouped_metrics(metrics: Iterable[Metric]) -> list[tuple[str, Metric]]:
    """(group title, metric) for ``metrics`` in the study table's order: :data:`METRIC_GROUPS`
    first (headline metrics first), then the metrics no group lists, in their given order."""
    given = list(metrics)
    by_key = {entry.key: entry for entry in given}
    ordered = [(title, by_key[key]) for title, keys in METRIC_GROUPS for key in keys if key in by_key]
    listed = {entry.key for _, entry in ordered}
    return ordered + [(OTHER_GROUP, entry) for entry in given if entry.key not in listed]


def partial_members(record: StudyRecord, summaries: Mapping[str, RunSummary]) -> dict[str, str]:
    """run id -> why the member is partial (:meth:`RunSummary.partial`) for every member that
    study.json counts as done (so its figures are in the statistics) while its summary says it
    covers only part of its plan, in the study's order. Members that ended cancelled or failed
    are not here: the statistics leave them out (their seeds are dropped pairwise)."""
    found = {}
    for run in member_records(record):
        summary = summaries.get(str(run.run_id))
        reason = summary.partial() if summary is not None else None
        if reason:
            found[str(run.run_id)] = reason
    return found


def partial_seeds(record: StudyRecord, partial: Mapping[str, str], rate: Any = None) -> dict[str, list[Any]]:
    """Scheduler -> the seeds (in order) at which its member at ``rate`` (None: any) is one of the
    ``partial`` members (:func:`partial_members`)."""
    found: dict[str, list[Any]] = {}
    for run in member_records(record):
        if str(run.run_id) in partial and (rate is None or run.rate == rate):
            found.setdefault(str(run.scheduler), []).append(run.seed)
    return {name: sorted(seeds, key=lambda seed: str(seed).zfill(12)) for name, seeds in found.items()}


def _seeds_text(seeds: Iterable[Any]) -> str:
    listed = sorted(set(seeds), key=lambda seed: str(seed).zfill(12))
    return ("seed " if len(listed) == 1 else "seeds ") + ", ".join(map(str, listed))


def _joined(*parts: object) -> str:
    """The non-empty ``parts`` as text, joined by ``; ``."""
    return "; ".join(str(part) for part in parts if part)


def partial_members_note(record: StudyRecord, partial: Mapping[str, str]) -> str | None:
    """What the page says beside the statistics when some members are partial: which (scheduler,
    seed, rate, run id, why), that they are included in the statistics, and that a verdict
    pairing one of them compares different sets of requests; None when no member is."""
    if not partial:
        return None
    several_rates = len(record.rates) > 1
    listed = []
    for run in member_records(record):
        if str(run.run_id) in partial:
            where = f", {run.rate:.4g} req/s" if several_rates and run.rate is not None else ""
            listed.append(f"{run.scheduler} seed {run.seed}{where} ({run.run_id}: {partial[str(run.run_id)]})")
    return (
        f"{len(listed)} member run(s) counted as done are partial: {'; '.join(listed)}. They stay in the "
        "statistics as study.json records them, but their figures cover only the requests that ran: a verdict "
        f"marked {PARTIAL_MARK} pairs one of them with a run of another set of requests, so no conclusion "
        "should rest on it. (Members that ended cancelled or failed are left out: their seeds are dropped.)"
    )


def statistics_frame(
    record: StudyRecord,
    statistics: Mapping[str, MetricStatistics],
    metrics: Iterable[Metric] = RUN_METRICS,
    partial: Mapping[str, Iterable[Any]] | None = None,
) -> pd.DataFrame:
    """One row per metric and scheduler, the metrics grouped headline first
    (:func:`grouped_metrics`): ``metric``, ``scheduler``, ``verdict`` (better / worse / no
    difference; ``baseline`` on the baseline's rows; empty for metrics that describe the setting,
    which get no verdict), ``seeds better`` (k of n), ``n`` (seeds with a value), ``mean [95%
    CI]``, ``change vs <baseline> [95% CI]``, ``relative change [95% CI]`` and ``note``: the short
    columns a reader needs first, before the wide ones. Hidden helpers: ``group`` (the metric's
    group title), ``key``, ``judged`` (whether the verdict may be coloured) and ``pairs_partial``
    (the verdict pairs a partial run). ``partial``: scheduler -> seeds whose member is partial at
    this rate (:func:`partial_seeds`), named in the notes. Values formatted by the catalog, in
    display units."""
    baseline = record.baseline
    change_column = f"change vs {baseline} [95% CI]"
    partial = {name: list(seeds) for name, seeds in (partial or {}).items()}
    rows = []
    for group, metric in grouped_metrics(metrics):
        entry = statistics.get(metric.key)
        per = entry.schedulers if entry is not None else {}
        if not per or (metric.real_engines_only and not any(stats.n for stats in per.values())):
            continue
        versus = entry.vs_baseline if entry is not None else {}
        for name in ordered_schedulers(record, per):
            stats = per.get(name) or SeedSummary()
            pair = versus.get(name)
            own = partial.get(name, [])
            row = {
                "metric": metric.label,
                "scheduler": name,
                "verdict": "",
                "seeds better": "",
                "n": stats.n,
                "mean [95% CI]": mean_text(metric, stats),
                change_column: "",
                "relative change [95% CI]": "",
                "note": stats.note or "",
                "group": group,
                "key": metric.key,
                "judged": False,
                "pairs_partial": False,
            }
            if metric.describes_setting:
                row["note"] = "describes the setting (how contended the runs were): no verdict"
            elif name == baseline:
                row["verdict"] = "baseline"
            elif pair is not None and pair.n_pairs == 0:  # no seed has both: nothing was compared
                row.update({"verdict": "-", "seeds better": "0 of 0", "note": NOT_COMPARED})
            elif pair is not None:
                paired = set(own) | set(partial.get(baseline, []))
                row.update(
                    {
                        change_column: change_text(metric, pair),
                        "relative change [95% CI]": relative_text(pair.relative, metric),
                        "seeds better": wins_text(pair),
                        "verdict": pair.verdict if pair.verdict in VERDICT_COLOURS else "-",
                        "note": pair.note or row["note"],
                        "judged": True,
                        "pairs_partial": bool(paired),
                    }
                )
                if paired:
                    row["note"] = _joined(f"pairs a partial run at {_seeds_text(paired)}: other requests", row["note"])
            if own and not row["pairs_partial"]:
                row["note"] = _joined(f"partial run at {_seeds_text(own)} included", row["note"])
            rows.append(row)
    columns = [
        "metric",
        "scheduler",
        "verdict",
        "seeds better",
        "n",
        "mean [95% CI]",
        change_column,
        "relative change [95% CI]",
        "note",
        "group",
        "key",
        "judged",
        "pairs_partial",
    ]
    return pd.DataFrame(rows, columns=columns)


#: The study table's columns under each metric's name, in order (``change`` stands for ``change
#: vs <baseline> [95% CI]``), with their share of the table's width (%): verdict and k of n first,
#: so that they stay in view on a narrow page, the wide interval columns after them.
STUDY_TABLE_WIDTHS: tuple[tuple[str, int], ...] = (
    ("scheduler", 15),
    ("verdict", 15),
    ("seeds better", 10),
    ("mean [95% CI]", 19),
    ("change", 22),
    ("relative change [95% CI]", 19),
)
#: A study table cell: small padding, so that six columns fit a 1,024 px page with the sidebar.
_CELL = "padding:0.15rem 0.35rem;"


def _cell(name: str, text: str, style: str = "", extra: str = "") -> str:
    return f"<td class='{name}' style='{_CELL}{style}'{extra}>{text}</td>"


def _class(column: str) -> str:
    """A column's CSS class: ``scheduler``, ``verdict``, ``seeds-better``, ``mean``, ``change``,
    ``relative-change``."""
    return "change" if column.startswith("change vs ") else column.split(" [")[0].replace(" ", "-")


def _short_wins(text: str) -> str:
    """``3 of 5 seeds (1 dropped)`` as the table's narrow column reads it: ``3 of 5 (1 dropped)``."""
    return text.replace(" seeds", "", 1)


def statistics_html(table: pd.DataFrame) -> str:
    """A :func:`statistics_frame` as the page shows it: one HTML table per metric group (headline
    first), each under its group's title; in each, a row with the metric's name, then one row per
    scheduler with its verdict and seeds better (k of n, without the word seeds) first
    (:data:`STUDY_TABLE_WIDTHS`). Every row is
    in the page's flow (no inner scroll), columns take fixed shares of the page's width (cells
    wrap, never wider than the page). Verdicts coloured (:func:`verdict_colour`) and marked
    :data:`PARTIAL_MARK` where they pair a partial run; ``n`` shown beside the mean only where it
    is below the table's largest; a note shared by a metric's rows once beside its name, others on
    a line under their row. Scheduler rows carry ``data-key`` and ``data-scheduler``; every text is
    escaped."""
    change_column = next((column for column in table.columns if str(column).startswith("change vs ")), "change")
    shown = [(change_column if column == "change" else column, width) for column, width in STUDY_TABLE_WIDTHS]
    head = "".join(
        f"<th class='{_class(column)}' style='{_CELL}text-align:left'>{html.escape(column)}</th>" for column, _ in shown
    )
    colgroup = "".join(f"<col style='width:{width}%'>" for _, width in shown)
    most = int(table["n"].max()) if len(table) else 0
    parts = []
    for group in dict.fromkeys(table["group"]):
        body = []
        for key, rows in table[table["group"] == group].groupby("key", sort=False):
            notes = set(rows["note"])
            shared = next(iter(notes)) if len(notes) == 1 else ""
            body.append(
                f"<tr class='metric'><th colspan='{len(shown)}' style='{_CELL}text-align:left'>"
                f"{html.escape(str(rows['metric'].iloc[0]))}"
                + (
                    f" <span style='font-weight:normal;font-size:0.75rem'>({html.escape(shared)})</span>"
                    if shared
                    else ""
                )
                + "</th></tr>"
            )
            for _, row in rows.iterrows():
                verdict = str(row["verdict"])
                verdict_text = html.escape(verdict) + (
                    f" <span style='white-space:nowrap'>{html.escape(PARTIAL_MARK)}</span>"
                    if row["pairs_partial"]
                    else ""
                )
                mean = html.escape(str(row["mean [95% CI]"])) + (f" (n {row['n']})" if row["n"] < most else "")
                cells = [
                    _cell("scheduler", html.escape(str(row["scheduler"])), "padding-left:0.7rem"),
                    _cell("verdict", verdict_text, verdict_colour(verdict, bool(row["judged"]))),
                    _cell("seeds-better", html.escape(_short_wins(str(row["seeds better"])))),
                    _cell("mean", mean),
                    _cell("change", html.escape(str(row[change_column]) if change_column in row else "")),
                    _cell("relative-change", html.escape(str(row["relative change [95% CI]"]))),
                ]
                body.append(
                    f"<tr data-key='{html.escape(str(key), quote=True)}' data-scheduler='"
                    f"{html.escape(str(row['scheduler']), quote=True)}'>" + "".join(cells) + "</tr>"
                )
                if row["note"] and not shared:
                    body.append(
                        f"<tr class='note'><td colspan='{len(shown)}' style='{_CELL}padding-left:0.7rem;"
                        f"font-size:0.75rem'>{html.escape(str(row['scheduler']))}: {html.escape(str(row['note']))}"
                        "</td></tr>"
                    )
        parts.append(
            "<p class='schedlab-study-group' style='margin:0.8rem 0 0.2rem 0'><strong>"
            + html.escape(str(group))
            + "</strong></p><table class='schedlab-study' style='width:100%;table-layout:fixed;"
            f"overflow-wrap:anywhere;font-size:0.8rem'><colgroup>{colgroup}</colgroup><thead><tr>{head}</tr>"
            "</thead><tbody>" + "".join(body) + "</tbody></table>"
        )
    return "<div class='schedlab-study-tables'>" + "".join(parts) + "</div>"


def verdict_colour(verdict: str, judged: bool = True) -> str:
    """CSS for a verdict cell: green better, red worse, grey no difference; none for the baseline
    and for metrics that describe the setting."""
    colour = VERDICT_COLOURS.get(verdict) if judged else None
    return f"color: {colour}; font-weight: 600" if colour else ""


def study_frames(
    record: StudyRecord, partial: Mapping[str, str] | None = None
) -> list[tuple[Number | None, pd.DataFrame]]:
    """(rate or None, :func:`statistics_frame`) per arrival rate; ``partial`` (run id -> why, from
    :func:`partial_members`) names the partial members in each rate's notes and verdicts."""
    return [
        (rate, statistics_frame(record, statistics, partial=partial_seeds(record, partial or {}, rate)))
        for rate, statistics in statistics_by_rate(record)
    ]


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
#: The tables' columns that a page does not show as columns: ``group`` (the study table's metric
#: group: its tables' titles), ``key`` (the metric's summary key), ``judged`` (whether the verdict
#: may be coloured), ``pairs_partial`` (the verdict pairs a partial run) and the capacity table's
#: numbers.
HIDDEN_COLUMNS = ("group", "key", "judged", "pairs_partial", *CAPACITY_NUMBER_COLUMNS)


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
    "METRIC_GROUPS",
    "grouped_metrics",
    "partial_members",
    "partial_seeds",
    "partial_members_note",
    "statistics_frame",
    "statistics_html",
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
