"""Comparing saved runs: the summary table with % change against a baseline, and rate sweeps
with each scheduler's capacity at an SLO-attainment target.

Everything here works on run summaries (:class:`runners.store.models.RunSummary` records of
``summary.json``: cheap to load for many runs); the charts in :mod:`runners.views.charts` read the
request and time-series tables.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from runners.engines.fidelity import fidelity_sentence
from runners.json_values import as_dict
from runners.metrics.catalog import RUN_METRICS, TABLE_METRICS, Metric, metric_by_label, summary_value
from runners.run.knowledge import scheduler_display
from runners.store.models import RunEntry, RunSummary
from runners.workload.arrivals import RATE_PROCESSES
from runners.workload.slo import TASKS
from runners.workload.tokens import tokenization_label

__all__ = [
    "PARTIAL_MARK",
    "partial_runs_note",
    "Metric",
    "summary_value",
    "percent_change",
    "comparison_table",
    "change_is_good",
    "run_display_names",
    "run_job_label",
    "run_seed",
    "change_badge",
    "comparison_view",
    "comparison_html",
    "workload_differences",
    "export_provenance",
    "csv_with_provenance",
    "html_with_provenance",
    "sweep_frame",
    "capacity_at",
    "capacities",
    "imported_label",
    "definition_notes",
    "definition_details",
    "tokenization_note",
]


# -- display names --------------------------------------------------------------------------------
def _parts(run: Any) -> tuple[RunSummary, dict[str, Any]]:
    """(summary, config.json) of a loaded run (anything with ``summary`` and ``config``, e.g.
    :class:`runners.store.result_store.RunData`) or of a bare summary (config then empty); an empty
    summary for a run without one."""
    if isinstance(run, RunSummary):
        return run, {}
    summary = getattr(run, "summary", None)
    config = getattr(run, "config", None)
    return (summary if isinstance(summary, RunSummary) else RunEntry()), (config if isinstance(config, dict) else {})


def run_job_label(summary: RunSummary, config: dict[str, Any] | None = None) -> str | None:
    """The label of the job that made the run, or None when it has none: the run's ``notes``
    (summary.json, else config.json's run config), where the Launch page records its job's label
    (runners.app.launch_form: the label the user typed, or the default "fcfs vs slo-sa · 5 seeds")."""
    run_config = (config or {}).get("config")
    candidates = [summary.notes, run_config.get("notes") if isinstance(run_config, dict) else None]
    return next((value.strip() for value in candidates if isinstance(value, str) and value.strip()), None)


def run_seed(config: dict[str, Any]) -> int | None:
    """The run's workload seed (config.json ``config.workload.seed``), or None when not recorded."""
    workload = ((config or {}).get("config") or {}).get("workload") if isinstance(config, dict) else None
    seed = workload.get("seed") if isinstance(workload, dict) else None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def run_display_names(runs: Sequence[Any]) -> dict[str, str]:
    """run id -> the name a person reads for each of the compared ``runs`` (loaded runs with
    ``summary`` and ``config``, e.g. :class:`runners.store.result_store.RunData`, or bare summaries),
    in their order: the scheduler, then the engine, the job label, the seed and the
    arrival rate (req/s) each only where they differ among ``runs``, e.g. ``slo-sa · seed 3`` or
    ``fcfs · 2.5 req/s``; names still alike get ``#2``, ``#3`` in order; a partial run's name ends
    in :data:`PARTIAL_MARK`. The run id stays the key: show it on hover (help, tooltips)."""
    facts = []
    for run in runs:
        summary, config = _parts(run)
        rate = summary.arrival_rate_rps
        facts.append(
            {
                "run_id": str(summary.run_id or getattr(run, "run_id", "?")),
                "scheduler": str(scheduler_display(summary) or imported_label(summary) or summary.run_id or "?"),
                "engine": summary.engine,
                "label": run_job_label(summary, config),
                "seed": run_seed(config),
                "rate": float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None,
                "partial": summary.partial() is not None,
            }
        )
    varies = {field: len({fact[field] for fact in facts}) > 1 for field in ("engine", "label", "seed", "rate")}
    texts: dict[str, Callable[[Any], str]] = {
        "engine": str,
        "label": str,
        "seed": lambda value: f"seed {value}",
        "rate": lambda value: f"{value:.4g} req/s",
    }
    names: dict[str, str] = {}
    seen: dict[str, int] = {}
    for fact in facts:
        pieces = [str(fact["scheduler"])] + [
            texts[field](fact[field])
            for field in ("engine", "label", "seed", "rate")
            if varies[field] and fact[field] is not None
        ]
        name = " · ".join(pieces)
        seen[name] = seen.get(name, 0) + 1
        name = name if seen[name] == 1 else f"{name} #{seen[name]}"
        names[str(fact["run_id"])] = name + (f" {PARTIAL_MARK}" if fact["partial"] else "")
    return names


#: Appended to the name of a run that did not run all it planned, wherever the name is shown.
PARTIAL_MARK = "(partial)"


def partial_runs_note(summaries: Sequence[RunSummary]) -> str | None:
    """One sentence when some compared runs are partial (:meth:`RunSummary.partial`): which, why,
    and that a change against them compares different sets of requests; None when all are whole."""
    partial = [(summary.run_id, reason) for summary in summaries if (reason := summary.partial())]
    if not partial:
        return None
    listed = "; ".join(f"{run_id} ({reason})" for run_id, reason in partial)
    return (
        f"{len(partial)} of {len(summaries)} runs are partial: {listed}. Their figures cover only the requests "
        "that ran, so a change against them compares different sets of requests: no verdict should rest on it."
    )


def percent_change(new: float | None, base: float | None) -> float | None:
    """(new - base) / |base| x 100; None when either is missing or base is 0."""
    if new is None or base is None or base == 0:
        return None
    return (new - base) / abs(base) * 100.0


#: The comparison table's change columns: ``change <run id>``, in the unit of ``change unit``.
CHANGE_PREFIX = "change "
CHANGE_UNIT = "change unit"


def _change(metric: Metric, new: float | None, base: float | None) -> float | None:
    """A run's change against the baseline as :func:`comparison_table` gives it: percentage points
    for a share, percent of the baseline's value otherwise (None where undefined)."""
    if metric.unit == "%":
        return None if new is None or base is None else metric.display(new - base)
    return percent_change(new, base)


def comparison_table(summaries: Sequence[RunSummary], baseline: str) -> pd.DataFrame:
    """One row per metric of :data:`runners.metrics.catalog.TABLE_METRICS`: each run's value
    (display units, full precision: the CSV export) and, for every other run, its change against
    ``baseline`` (a run id among ``summaries``) in a ``change <run>`` column, in the unit the page
    reads it in (the ``change unit`` column): percentage points for a share (the difference of
    the two percentages), percent (of the baseline's value) for any other metric."""
    by_id = {str(s.run_id): s for s in summaries}
    if baseline not in by_id:
        raise ValueError(f"baseline {baseline!r} is not among the compared runs: {', '.join(by_id)}")
    order = [baseline] + [run_id for run_id in by_id if run_id != baseline]
    rows = []
    for metric in TABLE_METRICS:
        if metric.real_engines_only and all(summary_value(by_id[run_id], metric.key) is None for run_id in order):
            continue
        row: dict[str, Any] = {"metric": metric.label}
        base = summary_value(by_id[baseline], metric.key)
        for run_id in order:
            value = summary_value(by_id[run_id], metric.key)
            row[run_id] = metric.display(value)
        for run_id in order[1:]:
            row[f"{CHANGE_PREFIX}{run_id}"] = _change(metric, summary_value(by_id[run_id], metric.key), base)
        row[CHANGE_UNIT] = "pts" if metric.unit == "%" else "%"
        if any(imported_label(by_id[run_id]) for run_id in order):
            row["definition"] = "; ".join(definition_notes([by_id[run_id] for run_id in order], metric.key)) or None
        rows.append(row)
    return pd.DataFrame(rows)


def change_badge(metric: Metric, new: Any, base: Any) -> tuple[str, bool | None]:
    """(text, verdict) of a run's stored value ``new`` against the baseline's ``base`` as a
    person reads them: both rounded as the table shows them (:meth:`Metric.shown`), so values
    that read alike are ``=`` and neutral. A share (unit %) changes in percentage points
    (``-5.2 pts``); other metrics in percent (``+4.3%``, ``-12%``; ``+<0.1%`` for a change too
    small to show), or as a signed difference when the baseline reads 0. The verdict: True when
    the change is an improvement by the catalog's direction (``higher_is_better``), False when
    worse, None when equal, missing, or for a metric that describes the setting."""
    shown_new, shown_base = metric.shown(new), metric.shown(base)
    if shown_new is None or shown_base is None:
        return "", None
    if shown_new == shown_base:
        return "=", None
    verdict = None if metric.describes_setting else (shown_new > shown_base) == metric.higher_is_better
    if metric.unit == "%" or shown_base == 0:
        return metric.format_change((shown_new - shown_base) / metric.scale), verdict
    change = (shown_new - shown_base) / abs(shown_base) * 100.0
    text = f"{change:+.0f}%" if abs(change) >= 10 else f"{change:+.1f}%"
    if text in ("+0.0%", "-0.0%"):
        text = f"{text[0]}<0.1%"
    return text, verdict


def comparison_view(
    runs: Sequence[Any], baseline: str, names: dict[str, str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The comparison table as a person reads it, and its verdicts. ``runs``: loaded runs or
    summaries (as :func:`run_display_names`); ``baseline``: a run id among them; ``names``: run
    id -> column name (default :func:`run_display_names`). First frame: a ``metric`` column (the
    catalog's label with its unit), then one text column per run, baseline first (``<name>
    (baseline)``), each cell the value at the catalog's precision and, for the other runs, its
    :func:`change_badge` (``12.1 (+4.3%)``); ``-`` where a run lacks the metric; with an imported
    run among them, a last ``definition`` column (:func:`definition_notes`). Second frame, same
    shape: True (better), False (worse) or None per cell."""
    summaries = [_parts(run)[0] for run in runs]
    by_id = {str(summary.run_id): summary for summary in summaries}
    if baseline not in by_id:
        raise ValueError(f"baseline {baseline!r} is not among the compared runs: {', '.join(by_id)}")
    names = names or run_display_names(runs)
    order = [baseline] + [run_id for run_id in by_id if run_id != baseline]
    headers = {run_id: names.get(run_id, run_id) + (" (baseline)" if run_id == baseline else "") for run_id in order}
    texts, verdicts = [], []
    imported = any(imported_label(by_id[run_id]) for run_id in order)
    for metric in TABLE_METRICS:
        values = {run_id: summary_value(by_id[run_id], metric.key) for run_id in order}
        if metric.real_engines_only and all(value is None for value in values.values()):
            continue
        text_row: dict[str, Any] = {"metric": metric.label}
        verdict_row: dict[str, Any] = {"metric": None}
        for run_id in order:
            text, verdict = ("", None) if run_id == baseline else change_badge(metric, values[run_id], values[baseline])
            shown = metric.format(values[run_id])
            text_row[headers[run_id]] = (
                f"{shown} ({text})" if text and text != "=" else (f"{shown} (=)" if text == "=" else shown)
            )
            verdict_row[headers[run_id]] = verdict
        if imported:
            text_row["definition"] = "; ".join(definition_notes([by_id[run_id] for run_id in order], metric.key))
            verdict_row["definition"] = None
        texts.append(text_row)
        verdicts.append(verdict_row)
    columns = ["metric", *headers.values()] + (["definition"] if imported else [])
    return pd.DataFrame(texts, columns=columns), pd.DataFrame(verdicts, columns=columns)


VERDICT_CSS = {True: "color: #1a7f37", False: "color: #cf222e", None: ""}  # better green, worse red


def comparison_html(texts: pd.DataFrame, verdicts: pd.DataFrame, run_ids: Sequence[str]) -> str:
    """The :func:`comparison_view` frames as one HTML table for the page: every row shown (no
    inner scroll), cells that wrap between a value and its badge when the page is narrow, each
    run's column header carrying its run id as a tooltip (``title``; ``run_ids`` in column
    order), badges coloured by their verdict. Every text is escaped."""
    headers = list(texts.columns)
    runs = headers[1 : len(run_ids) + 1]
    head = (
        "<th style='text-align:left'>metric</th>"
        + "".join(
            f"<th title='run {html.escape(run_id, quote=True)}' style='text-align:right'>{html.escape(str(name))}</th>"
            for name, run_id in zip(runs, run_ids)
        )
        + "".join(f"<th style='text-align:left'>{html.escape(str(name))}</th>" for name in headers[len(run_ids) + 1 :])
    )
    body = []
    for index in range(len(texts)):
        cells = [f"<td style='text-align:left'>{html.escape(str(texts.iloc[index, 0]))}</td>"]
        for column in runs:
            text = str(texts.at[index, column])
            value, _, badge = text.partition(" (")
            style = VERDICT_CSS.get(verdicts.at[index, column], "")
            badge_html = f" <span style='white-space:nowrap;{style}'>({html.escape(badge)}</span>" if badge else ""
            cells.append(f"<td style='text-align:right'>{html.escape(value)}{badge_html}</td>")
        cells += [
            f"<td style='text-align:left;font-size:0.8rem'>{html.escape(str(texts.at[index, column] or ''))}</td>"
            for column in headers[len(run_ids) + 1 :]
        ]  # definition notes (imported runs)
        body.append("<tr>" + "".join(cells) + "</tr>")
    # fixed layout: the columns share the page's width (values wrap before their badges), never wider
    return (
        "<table class='schedlab-comparison' style='width:100%;table-layout:fixed;overflow-wrap:anywhere;"
        "font-size:0.85rem'><colgroup><col style='width:22%'></colgroup><thead><tr>"
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
    )


# -- workloads that differ ------------------------------------------------------------------------
def _source_text(source: Any) -> str | None:
    if not isinstance(source, dict):
        return None
    where = source.get("path") or source.get("hub_id")
    return f"{source.get('kind')}" + (f" {where}" if where else "")


def _workload_facts(run: Any) -> dict[str, str | None]:
    """What a run's result depends on besides its scheduler, as text (None when not recorded)."""
    summary, config = _parts(run)
    run_config = as_dict(config.get("config"))
    workload = as_dict(run_config.get("workload"))
    engine = as_dict(run_config.get("engine"))
    arrival = as_dict(workload.get("arrival"))
    requests = workload.get("requests", summary.requests_total)
    process = arrival.get("process") or summary.arrival_process
    rate = arrival.get("rate", summary.arrival_rate_rps)
    rate_text = (
        f"{process or 'poisson'} {rate:.4g} req/s"
        if isinstance(rate, (int, float)) and not isinstance(rate, bool)
        else process
    )
    ratio = as_dict(workload.get("ratio")) or None
    datasets = [f"{task} {_source_text(workload.get(task))}" for task in TASKS if _source_text(workload.get(task))]
    engine_text = summary.engine or engine.get("kind")
    details = [str(engine[field]) for field in ("preset", "model", "profile") if engine.get(field)]
    if engine_text and details:
        engine_text = f"{engine_text} ({', '.join(details)})"
    if engine_text and isinstance(engine.get("instances"), int) and engine["instances"] > 1:
        engine_text += f" x{engine['instances']}"
    slos = summary.slos
    return {
        "requests": str(requests) if isinstance(requests, int) and not isinstance(requests, bool) else None,
        "arrival": rate_text,
        "ratio": " : ".join(f"{task} {share:g}" for task, share in ratio.items() if isinstance(share, (int, float)))
        if ratio
        else None,
        "dataset": ", ".join(datasets) or None,
        "engine": engine_text,
        "SLOs": "; ".join(f"{task}: {text}" for task, text in slos.items())
        if isinstance(slos, dict) and slos
        else None,
    }


def workload_differences(runs: Sequence[Any], names: dict[str, str] | None = None) -> list[str]:
    """One sentence per workload fact that differs among the compared ``runs`` (loaded runs or
    summaries): requests, arrival (process and rate), task ratio, dataset, engine and SLOs, each
    naming the runs per value, e.g. ``requests differ: 200 (fcfs), 500 (slo-sa)``. Facts a run
    does not record are left out of the comparison. Empty when the runs share one workload."""
    names = names or run_display_names(runs)
    facts = [(str(_parts(run)[0].run_id), _workload_facts(run)) for run in runs]
    lines = []
    for field in ("requests", "arrival", "ratio", "dataset", "engine", "SLOs"):
        groups: dict[str, list[str]] = {}
        for run_id, fact in facts:
            value = fact[field]
            if value is not None:
                groups.setdefault(value, []).append(names.get(run_id, run_id))
        if len(groups) > 1:
            lines.append(
                f"{field} differ: " + "; ".join(f"{value} ({', '.join(who)})" for value, who in groups.items())
            )
    return lines


# -- exports ---------------------------------------------------------------------------------------
def export_provenance(runs: Sequence[Any], names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Per compared run: its id, display name, scheduler, seed, job label, versions (config.json
    ``versions``: schedlab, engine, python) and its full run config (config.json ``config``, or an
    imported run's ``imported`` record): what an exported table or chart was made from."""
    names = names or run_display_names(runs)
    records = []
    for run in runs:
        summary, config = _parts(run)
        run_id = str(summary.run_id)
        records.append(
            {
                "run_id": run_id,
                "name": names.get(run_id, run_id),
                "scheduler": summary.scheduler,
                "seed": run_seed(config),
                "label": run_job_label(summary, config),
                "schema_version": summary.schema_version,
                "versions": config.get("versions"),
                "config": config.get("config") if "config" in config else config.get("imported"),
            }
        )
    return records


def csv_with_provenance(table: pd.DataFrame, runs: Sequence[Any], names: dict[str, str] | None = None) -> str:
    """``table`` as CSV preceded by ``# `` comment lines naming each run (id, name, scheduler,
    seed, label, versions) and its config as one line of JSON (``pandas.read_csv(...,
    comment="#")`` reads the table back). Its columns are headed by the runs' names, as on the
    page (the comment lines map each name to its run id)."""
    lines = ["# schedlab comparison export: one line per run, then its config as JSON"]
    shown: dict[str, str] = {}
    for record in export_provenance(runs, names):
        config = record.pop("config")
        shown[str(record["run_id"])] = str(record["name"])
        lines.append("# run " + json.dumps(record, sort_keys=True, default=str, ensure_ascii=False))
        lines.append("# config " + json.dumps(config, sort_keys=True, default=str, ensure_ascii=False))
    headers = {**shown, **{f"{CHANGE_PREFIX}{run_id}": f"{CHANGE_PREFIX}{name}" for run_id, name in shown.items()}}
    if len(set(headers.values())) < len(headers):  # names that clash: keep the unique run ids
        headers = {}
    return "\n".join(lines) + "\n" + table.rename(columns=headers).to_csv(index=False)


def html_with_provenance(page: str, runs: Sequence[Any], names: dict[str, str] | None = None) -> str:
    """An exported HTML ``page`` with a footer before ``</body>``: each run's id, name, seed,
    label and versions, and its config (in a collapsed ``<details>``)."""
    items = []
    for record in export_provenance(runs, names):
        config = record.pop("config")
        items.append(
            f"<li><b>{html.escape(str(record['name']))}</b> ({html.escape(record['run_id'])}): "
            f"scheduler {html.escape(str(record['scheduler']))}, seed {record['seed']}, "
            f"label {html.escape(str(record['label'] or '-'))}, versions "
            f"{html.escape(json.dumps(record['versions'], sort_keys=True))}"
            f"<details><summary>config</summary><pre>"
            f"{html.escape(json.dumps(config, indent=1, sort_keys=True, default=str))}</pre></details></li>"
        )
    footer = "<footer><h2>Runs</h2><ul>" + "".join(items) + "</ul></footer>"
    return page.replace("</body>", footer + "</body>", 1) if "</body>" in page else page + footer


# -- imported runs (runners.imports) ------------------------------------------------------------
def imported_label(summary: RunSummary) -> str | None:
    """ "imported from <tool> <version>" for a run imported from another tool's file, else None
    (the optional ``imported`` record of summary.json)."""
    record = summary.imported
    return record.get("label") if isinstance(record, dict) and isinstance(record.get("label"), str) else None


def definition_notes(summaries: Sequence[RunSummary], key: str, detailed: bool = False) -> list[str]:
    """For the run metric ``key`` (a dotted summary path), one note per imported run among
    ``summaries`` whose value is not schedlab's own recomputation from request times: the tool
    defines that quantity differently (its name and its own mean, in the metric's display
    unit; with ``detailed``, how the definitions differ), the value was mapped from the tool's
    run-level figure, or the tool did not measure it."""
    head = key.split(".")[0]
    entry = next((m for m in RUN_METRICS if m.key == key), None)
    notes: list[str] = []
    for summary in summaries:
        record = summary.imported
        if not isinstance(record, dict):
            continue
        run_id = summary.run_id
        provenance = as_dict(record.get("metrics"))
        state = provenance.get(key, provenance.get(head))
        if state == "not measured":
            notes.append(f"{run_id}: not measured by {record.get('tool_name') or record.get('tool')}")
        elif state == "mapped":
            notes.append(f"{run_id}: the tool's own figure")
        for definition in record.get("definitions") or []:
            if not isinstance(definition, dict) or definition.get("metric") != head:
                continue
            theirs = definition.get("tool_value")
            shown = ""
            if entry is not None and entry.display(theirs) is not None:
                shown = f", theirs {entry.format(theirs)} {entry.unit}".rstrip() + " mean"
            text = f"{run_id}: definition differs ({definition.get('tool_metric')}{shown})"
            notes.append(text + (f": {definition.get('note')}" if detailed else ""))
    return notes


def definition_details(summaries: Sequence[RunSummary]) -> list[str]:
    """Every imported run's label, how each of its differing definitions differs, and its
    notes: the lines shown under a comparison that holds an imported run."""
    lines: list[str] = []
    for summary in summaries:
        record = summary.imported
        if not isinstance(record, dict):
            continue
        run_id = summary.run_id
        lines.append(f"{run_id}: {record.get('label')}")
        for definition in record.get("definitions") or []:
            if isinstance(definition, dict):
                lines.append(
                    f"{run_id}: {definition.get('metric')} vs the tool's {definition.get('tool_metric')}: "
                    f"{definition.get('note')}"
                )
        lines += [f"{run_id}: {note}" for note in record.get("notes") or [] if isinstance(note, str)]
    return lines


def tokenization_note(config: dict[str, Any]) -> str | None:
    """The note a run's page shows when its token counts were approximated (config.json
    ``resolved.tokenization.approximate``): :func:`runners.workload.tokens.tokenization_label`."""
    resolved = config.get("resolved") if isinstance(config, dict) else None
    tokenization = resolved.get("tokenization") if isinstance(resolved, dict) else None
    if not isinstance(tokenization, dict) or tokenization.get("approximate") is not True:
        return None
    return tokenization_label(tokenization)


def fidelity_note(config: dict[str, Any]) -> str | None:
    """For a simulated run, how close the simulator with its profile came to the real engine at
    about the run's arrival rate (config.json ``resolved.engine_profile.fidelity``, written by
    bench/sim_fidelity.py): :func:`runners.engines.fidelity.fidelity_sentence`. None for a run on a
    real engine."""
    resolved = config.get("resolved") if isinstance(config, dict) else None
    profile = resolved.get("engine_profile") if isinstance(resolved, dict) else None
    saved = config.get("config") if isinstance(config, dict) else None
    engine = saved.get("engine") if isinstance(saved, dict) else None
    kind = engine.get("kind", "sim") if isinstance(engine, dict) else "sim"
    if not isinstance(profile, dict) or kind != "sim":  # a real run's profile: its planning model
        return None
    workload = saved.get("workload") if isinstance(saved, dict) else None
    arrival = workload.get("arrival") if isinstance(workload, dict) else None
    arrival = arrival if isinstance(arrival, dict) else {}
    rate = arrival.get("rate") if (arrival.get("process") or "poisson") in RATE_PROCESSES else None
    report = profile.get("fidelity")
    return fidelity_sentence(
        str(profile.get("name", "?")),
        report if isinstance(report, dict) else None,
        float(rate) if isinstance(rate, (int, float)) else None,
        str(profile.get("source") or ""),
    )


def profile_note(config: dict[str, Any] | None) -> str | None:
    """How far the engine profile behind a run can be trusted (issue 48), from config.json
    ``resolved.engine_profile`` (a simulated run's engine, or the profile a real run's policy
    planned with): "profile NAME: fit error (out of fold) prefill 15%, decode 5%, mixed 13%; passed
    the quality gate" (:func:`runners.engines.profile.quality_note`; "NOISY profile" where it was
    written with --accept-noisy). None without a profile, or for a preset (it carries no fit)."""
    from runners.engines.profile import quality_note

    resolved = config.get("resolved") if isinstance(config, dict) else None
    profile = resolved.get("engine_profile") if isinstance(resolved, dict) else None
    if not isinstance(profile, dict) or not isinstance(profile.get("fit"), dict):
        return None
    quality = profile.get("quality")
    return f"profile {profile.get('name', '?')}: " + quality_note(
        profile["fit"], quality if isinstance(quality, dict) else None
    )


def change_is_good(metric_label: str, change: float | None) -> bool | None:
    """Whether a % change of the metric labelled ``metric_label`` is an improvement."""
    if change is None or change == 0:
        return None
    metric = metric_by_label(metric_label)
    if metric is None or metric.describes_setting:
        return None
    return (change > 0) == metric.higher_is_better


# -- rate sweeps -----------------------------------------------------------------------------------
def sweep_frame(summaries: Sequence[RunSummary]) -> pd.DataFrame:
    """One row per run of a sweep: scheduler, rate (req/s), attainment, G, goodput, p90 E2E."""
    rows = [
        {
            "run_id": s.run_id,
            "sweep_id": s.sweep_id,
            "scheduler": s.scheduler,
            "rate_rps": s.arrival_rate_rps,
            "slo_attainment": summary_value(s, "slo_attainment"),
            "G": summary_value(s, "G"),
            "goodput_rps": summary_value(s, "goodput_rps"),
            "e2e_p90_s": summary_value(s, "e2e_s.p90"),
            "status": s.status,
        }
        for s in summaries
        if s.arrival_rate_rps is not None
    ]
    frame = pd.DataFrame(
        rows,
        columns=[
            "run_id",
            "sweep_id",
            "scheduler",
            "rate_rps",
            "slo_attainment",
            "G",
            "goodput_rps",
            "e2e_p90_s",
            "status",
        ],
    )
    return frame.sort_values(["scheduler", "rate_rps"]).reset_index(drop=True)


def capacity_at(rates: Sequence[float], attainments: Sequence[float | None], target: float) -> float | None:
    """The highest arrival rate (req/s) at which SLO attainment stays >= ``target``.

    Rates are sorted; from the lowest rate up, attainment must hold at every rate. Between the
    last rate that meets the target and the first that misses it, the crossing is interpolated
    linearly. None when even the lowest rate misses; the highest swept rate when none misses
    (capacity is then at least that)."""
    points = sorted((float(r), a) for r, a in zip(rates, attainments) if a is not None)
    if not points or points[0][1] < target:
        return None
    for (rate_low, att_low), (rate_high, att_high) in zip(points, points[1:]):
        if att_high < target:
            if att_low == att_high:
                return rate_low
            return float(rate_low + (att_low - target) * (rate_high - rate_low) / (att_low - att_high))
    return points[-1][0]


def capacities(frame: pd.DataFrame, target: float) -> pd.DataFrame:
    """Capacity per scheduler of a :func:`sweep_frame` at ``target`` attainment, and whether it
    is a lower bound (every swept rate met the target)."""
    rows = []
    for scheduler, group in frame.groupby("scheduler", sort=True):
        value = capacity_at(group["rate_rps"], group["slo_attainment"], target)
        met = group["slo_attainment"].dropna()
        rows.append(
            {
                "scheduler": scheduler,
                "capacity_rps": value,
                "at_least": bool(len(met) and (met >= target).all()),
                "rates_swept": len(group),
            }
        )
    return pd.DataFrame(rows, columns=["scheduler", "capacity_rps", "at_least", "rates_swept"])
