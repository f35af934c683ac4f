"""Command line: ``python -m runners run|list|show|compare|delete|schedulers``.

User errors print one line (``error: <field or file>: <what was expected>``) and exit 2; a run
that fails or is cancelled still saves its partial results and exits 1 or 130.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners.engines.kind_names import ENGINE_KINDS
from runners.errors import ConfigError, SchedlabError, UnknownNameError

if TYPE_CHECKING:  # imported where used: --help loads no more than argparse (issue 28)
    from runners.store.models import RunSummary, StudyRecord


def _metric_rows(summaries: Sequence[RunSummary]) -> list[list[str]]:
    """One row per catalog run metric: its label and each summary's value in display units (rows
    of metrics only real engines report are left out when no summary has them)."""
    from runners.metrics.catalog import RUN_METRICS, summary_value

    rows = []
    for metric in RUN_METRICS:
        values = [summary_value(summary, metric.key) for summary in summaries]
        if metric.real_engines_only and all(value is None for value in values):
            continue
        rows.append([metric.label] + [metric.format(value) for value in values])
    return rows


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for number, row in enumerate(rows):
        cells = [cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


# -- run -------------------------------------------------------------------------------------------
def _parse_value(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    except RecursionError:
        raise ConfigError("--set", f"{text[:40]!r}... is nested too deeply to be a config value") from None


def build_run_config(args: argparse.Namespace) -> Any:
    engine = getattr(args, "engine", None)
    if engine is not None and engine not in ENGINE_KINDS:  # refused before the config models load
        raise UnknownNameError("engine.kind", engine, list(ENGINE_KINDS))
    from runners.run.config import parse_config, read_config_file, set_dotted

    data = read_config_file(args.config) if args.config else {}
    get = lambda name: getattr(args, name, None)  # noqa: E731 - the profile command has fewer flags
    overrides = {
        "engine.kind": get("engine"),
        "engine.instances": get("instances"),
        "engine.kv_capacity_tokens": get("kv_capacity"),
        "engine.model": get("model"),
        "engine.urls": get("url"),
        "engine.python": get("python"),
        "workload.tokenizer": get("tokenizer"),
        "scheduler.name": get("scheduler"),
        "trials.baseline": get("baseline"),
        "workload.requests": get("requests"),
        "workload.seed": get("seed"),
        "workload.arrival.process": get("arrival"),
        "workload.arrival.rate": get("rate"),
        "workload.arrival.burstiness": get("burstiness"),
        "workload.trace.path": get("trace"),
        "workload.trace.format": get("trace_format"),
        "workload.trace.speedup": get("trace_speedup"),
        "workload.multi_turn.max_turns": get("max_turns"),
        "workload.multi_turn.think_time.mean_s": get("think_time"),
        "slo.preset": get("slo"),
        "run_id": get("run_id"),
        "max_error_rate": get("max_error_rate"),
    }
    for dotted, value in overrides.items():
        if value is not None:
            set_dotted(data, dotted, value)
    if get("multi_turn") and not isinstance(data.get("workload", {}).get("multi_turn"), dict):
        set_dotted(data, "workload.multi_turn", {})
    if get("ratio") is not None:
        try:
            chat, code = (float(part) for part in args.ratio.split(":"))
        except ValueError:
            raise ConfigError("--ratio", f"{args.ratio!r} is not CHAT:CODE (for example 1:1)") from None
        set_dotted(data, "workload.ratio", {"chat": chat, "code": code})
    if get("batch_size") is not None:
        set_dotted(data, "scheduler.params.batch_size", args.batch_size)
    scheduler = get("scheduler")
    if isinstance(scheduler, str) and "," in scheduler:  # a study of several schedulers
        names = [part.strip() for part in scheduler.split(",")]
        if not all(names):
            raise ConfigError(
                "--scheduler", f"{scheduler!r} has an empty name; expected names separated by commas, e.g. fcfs,slo-sa"
            )
        set_dotted(data, "scheduler.name", names[0])
        set_dotted(data, "trials.schedulers", names)
    if get("seeds") is not None:
        from runners.study.runner import parse_seeds

        if get("seed") is not None:
            raise ConfigError("--seeds", "cannot be combined with --seed; expected one of them")
        set_dotted(data, "trials.seeds", parse_seeds(args.seeds))
    if get("rates") is not None:
        if get("rate") is not None:
            raise ConfigError("--rates", "cannot be combined with --rate; expected one of them")
        try:
            rates = [float(part) for part in args.rates.split(",")]
        except ValueError:
            raise ConfigError(
                "--rates", f"{args.rates!r} is not a comma-separated list of rates in requests per second, e.g. 2,4,6"
            ) from None
        set_dotted(data, "trials.rates", rates)
    for item in get("set") or []:
        if "=" not in item:
            raise ConfigError("--set", f"{item!r} is not KEY=VALUE (for example engine.max_num_seqs=64)")
        key, _, value = item.partition("=")
        parsed = _parse_value(value)
        if key.strip() in STUDY_LISTS and parsed == []:
            raise ConfigError(
                key.strip(),
                "an empty list asks for no study at all; give at least one value, or leave it out for one run",
            )
        set_dotted(data, key.strip(), parsed)
    _cluster_flags(data, get("member_resources"), get("servers_per_member"))
    for flag, value in (("--baseline", get("baseline")), ("--executor", get("executor"))):
        if isinstance(value, str) and not value.strip():
            raise ConfigError(flag, "is empty; expected a name (or leave the flag out)")
    return parse_config(data)


def _cluster_flags(data: dict[str, Any], resources: Any, servers_per_member: Any) -> None:
    """``--member-resources`` and ``--servers-per-member`` into the config's ``trials``."""
    from runners.run.config import set_dotted

    if resources is not None:
        set_dotted(data, "trials.member_resources", parse_resources(resources))
    if servers_per_member is not None:
        set_dotted(data, "trials.servers_per_member", servers_per_member)


def parse_resources(text: str) -> dict[str, float]:
    """``--member-resources``: ``gpu=1`` or ``GPU=1,CPU=2`` as {name: amount}; ConfigError naming
    the flag for anything else."""
    expected = "expected NAME=AMOUNT pairs separated by commas, e.g. gpu=1 or GPU=1,CPU=2"
    resources: dict[str, float] = {}
    for part in str(text).split(","):
        name, equals, amount = part.strip().partition("=")
        try:
            value = float(amount)
        except ValueError:
            value = float("nan")
        if not equals or not name.strip() or not 0 <= value <= 1e6:
            raise ConfigError("--member-resources", f"{part.strip()!r} in {text!r}; {expected}")
        if name.strip() in resources:
            raise ConfigError("--member-resources", f"{name.strip()!r} is named twice; {expected}")
        resources[name.strip()] = value
    return resources


#: The config lists that make a run a study; ``--set`` may not give them empty.
STUDY_LISTS = ("trials.seeds", "trials.schedulers", "trials.rates")


@contextmanager
def _stoppable_progress(total: int, quiet: bool) -> Iterator[tuple[Any, Callable[[], bool]]]:
    """A progress bar over ``total`` requests, and ``should_stop`` that turns true on SIGINT or
    SIGTERM (the handlers are restored afterwards): a run stops cleanly and keeps its rows."""
    from tqdm import tqdm

    stop = {"requested": False}

    def request_stop(signum: int, frame: Any) -> None:
        stop["requested"] = True

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    bar = tqdm(total=total, unit="req", disable=None if not quiet else True, file=sys.stderr)
    try:
        yield bar, lambda: stop["requested"]
    finally:
        bar.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


#: Flags ``run --resume`` takes besides the study id: how and where it runs, never what it runs.
RESUME_FLAGS = ("resume", "out", "workers", "executor", "quiet", "yes", "handler", "command")


def _resume_study(args: argparse.Namespace) -> int:
    """``run --resume STUDY``: finish an interrupted or cancelled study's missing members with
    the plan and seeds its study.json records, keeping the members that ran to their end."""
    from runners.study.executors import choose_execution
    from runners.study.runner import REPLACED_FOLDER, prepare_resume

    given = sorted(
        name for name, value in vars(args).items() if name not in RESUME_FLAGS and value not in (None, [], False)
    )
    if given:
        raise ConfigError(
            f"--{given[0].replace('_', '-')}",
            "cannot be combined with --resume; a study resumes with the settings it was started with",
        )
    plan, resume = prepare_resume(args.out, args.resume)
    execution = choose_execution(plan, args.workers, args.executor)
    missing = len(plan.members) - len(resume.kept)
    print(
        f"study {plan.study_id}: resuming {missing} of {len(plan.members)} runs ({len(resume.kept)} kept"
        + (
            f"; runs to run again, their folders moved to {REPLACED_FOLDER}/: {', '.join(resume.replaced)}"
            if resume.replaced
            else ""
        )
        + f"); {execution.note}",
        flush=True,
    )
    requests = plan.config.workload.requests if plan.config is not None else 0
    return _study_to_its_end(args, plan, execution, requests, resume)


def command_run(args: argparse.Namespace) -> int:
    if getattr(args, "resume", None) is not None:
        return _resume_study(args)
    config = build_run_config(args)
    from runners.app.preflight import check
    from runners.study.runner import is_study

    check(config)  # a launch that cannot succeed here (engine missing, no model, busy port) starts nothing
    from runners.run.benchmark import execute_run

    if is_study(config):
        return _run_study(args, config)
    if config.trials.baseline not in (None, config.scheduler.name):
        raise ConfigError(
            "--baseline",
            f"{config.trials.baseline!r} is not a scheduler of this run; expected "
            f"{config.scheduler.name!r} (a study names several with --scheduler a,b)",
        )
    with _stoppable_progress(config.workload.requests, args.quiet) as (bar, should_stop):

        def progress(done: int, total: int) -> None:
            bar.total = total  # a trace may send fewer than workload.requests
            bar.n = done
            if done == total or done % 50 == 0:
                bar.refresh()

        outcome = execute_run(config, args.out, progress=progress, should_stop=should_stop)
    summary = outcome.summary
    print(f"run {outcome.run_id}: {outcome.status}  ->  {outcome.folder}")
    if outcome.error:
        print(f"reason: {outcome.error}")
    if summary.warmup is not None and summary.warmup.stopped:
        print(summary.warmup.stopped)
    try:
        saved = json.loads((Path(outcome.folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = None
    for line in _tokenization_lines(saved):
        print(line)
    for line in _belief_lines(outcome.folder):
        print(line)
    _print_profile_note(saved)
    print(_table([["metric", outcome.run_id]] + _metric_rows([summary])))
    return {"done": 0, "cancelled": 130}.get(outcome.status, 1)


def _run_study(args: argparse.Namespace, config: Any) -> int:
    """Run a study (schedulers x seeds), then print its headline table with intervals."""
    from runners.study.executors import choose_execution
    from runners.study.runner import check_size, plan_study

    plan = plan_study(config)
    check_size(plan, bool(getattr(args, "yes", False)))
    execution = choose_execution(plan, getattr(args, "workers", None), getattr(args, "executor", None))
    print(f"study {plan.study_id}: {len(plan.members)} runs; {execution.note}", flush=True)
    return _study_to_its_end(args, plan, execution, config.workload.requests)


def _study_to_its_end(args: argparse.Namespace, plan: Any, execution: Any, requests: int, resume: Any = None) -> int:
    """Run ``plan`` (the members ``resume`` does not keep) under one progress bar, then report it."""
    from runners.study.runner import run_study

    result = _with_study_progress(
        plan,
        requests,
        args.quiet,
        lambda progress, should_stop: run_study(
            plan, args.out, progress=progress, should_stop=should_stop, execution=execution, resume=resume
        ),
    )
    return _report_study(result, args.out)


def _report_study(result: Any, root: str | Path) -> int:
    """Print where a finished (or stopped) study's record is and its table; its exit code."""
    record = result.record
    print(f"study {result.study_id}: {record.status}  ->  {result.folder / 'study.json'}")
    _print_study(record, root)
    return {"done": 0, "cancelled": 130}.get(str(record.status), 1)


def _with_study_progress(plan: Any, requests: int, quiet: bool, run: Callable[..., Any]) -> Any:
    """``run(progress, should_stop)`` under one progress bar over the study's requests: the sum
    of every member's completed requests (several run at once), with the count of runs done."""
    import time

    completed: dict[str, int] = {}
    shown = {"at": 0.0}
    with _stoppable_progress(requests * len(plan.members), quiet) as (bar, should_stop):

        def progress(done: int, count: int, member: Any) -> None:
            completed[member.run_id] = done
            if done == count or time.monotonic() - shown["at"] >= 0.1:
                shown["at"] = time.monotonic()
                bar.n = sum(completed.values())
                bar.set_description(
                    f"{sum(n == count for n in completed.values())}/{len(plan.members)} runs", refresh=False
                )
                bar.refresh()

        return run(progress, should_stop)


def _print_study(record: StudyRecord, root: str | Path) -> None:
    from runners.study.runner import identical_decisions_note, study_lines, study_tables

    print(
        f"schedulers: {', '.join(record.schedulers)}; baseline {record.baseline}; "
        f"seeds: {', '.join(str(seed) for seed in record.seeds)}"
    )
    for title, rows in study_tables(record):
        if title:
            print(title)
        print(_table(rows))
    for line in study_lines(record):
        print(line)
    note = identical_decisions_note(root, record)
    if note:
        print(note)


# -- list / show / compare / delete ----------------------------------------------------------------
def command_list(args: argparse.Namespace) -> int:
    from runners.json_values import is_stored
    from runners.metrics.catalog import metric
    from runners.run.knowledge import scheduler_display
    from runners.store.result_store import DAMAGED, INCOMPLETE, INTERRUPTED, list_runs

    runs = list_runs(args.out)
    if not runs:
        print(f"no runs in {args.out}")
        return 0
    rows = [["run_id", "status", "engine", "scheduler", "requests", "SLO att.", "G (1/s)", "workload"]]
    problems = []
    for summary in runs:
        status = summary.status
        if status in (DAMAGED, INCOMPLETE):
            problems.append(f"{summary.run_id}: {status}: {summary.problem}")
        if status in ("running", INTERRUPTED):  # rows so far, of the planned count
            planned, saved = summary.requests_total, summary.rows or 0
            requests = f"{saved}/{planned}" if planned is not None else str(saved)
        else:
            requests = str(summary.requests) if is_stored(summary, "requests") else "-"
        rows.append(
            [
                str(summary.run_id),
                str(status),
                str(summary.engine or "-"),
                str(scheduler_display(summary) or "-"),
                requests,
                metric("slo_attainment").format(summary.slo_attainment),
                metric("G").format(summary.G),
                str(summary.workload or "-"),
            ]
        )
    print(_table(rows))
    for line in problems:
        print(line)
    return 0


def _print_profile_note(config: Any, indent: str = "") -> None:
    """How far the run's engine profile can be trusted: a simulated run's fidelity sentence (a
    preset: "paper coefficients, not validated here", issue 43) and the profile's fit error and
    quality gate (issue 48), when the run has them."""
    from runners.views.compare import fidelity_note, profile_note

    record = config if isinstance(config, dict) else None
    for note in (fidelity_note(record) if record else None, profile_note(record)):
        if note:
            print(f"{indent}{note}")


def _belief_lines(folder: str | Path) -> list[str]:
    """What the policy believed about instance 0 (engine.json beliefs), one line each with its
    source ("policy believed: slots 256: vLLM default, not discovered: ..."); none when unrecorded."""
    from runners.engines.beliefs import describe, run_beliefs

    beliefs = run_beliefs(folder)
    return [f"policy believed: {line}" for line in describe(beliefs)] if beliefs else []


def _tokenization_lines(config: Any) -> list[str]:
    """How a real-engine run counted tokens and what context it sized requests for (config.json's
    ``resolved.tokenization``): the counter's label, and the limit or why none was known."""
    from runners.workload.tokens import tokenization_label

    resolved = config.get("resolved") if isinstance(config, dict) else None
    record = resolved.get("tokenization") if isinstance(resolved, dict) else None
    label = tokenization_label(record)
    if label is None or not isinstance(record, dict):
        return []
    context = record.get("context")
    if isinstance(context, dict):
        limit = f"context limit: {context.get('max_tokens')} tokens ({context.get('source')})"
    else:
        limit = "context limit: unknown, requests not sized to it; tried: " + "; ".join(
            map(str, record.get("tried", []))
        )
    return [label, limit]


def command_show(args: argparse.Namespace) -> int:
    from runners.json_values import is_stored
    from runners.store.result_store import load_run
    from runners.study.files import find_study

    study = find_study(args.out, args.run)
    if study is not None:
        from runners.study.runner import read_study

        record = read_study(study)
        print(f"study {record.study_id} ({record.status}) in {study}")
        _print_study(record, args.out)
        return 0
    run = load_run(args.out, args.run, allow_path=True)
    summary = run.summary
    print(f"run {run.run_id} ({summary.status}) in {run.folder}")
    for key in ("engine", "scheduler", "workload", "synthetic", "slos", "started_at", "finished_at", "error"):
        if is_stored(summary, key):
            print(f"  {key}: {getattr(summary, key)}")
    for line in _tokenization_lines(run.config):
        print(f"  {line}")
    for line in _belief_lines(run.folder):
        print(f"  {line}")
    _print_profile_note(run.config, "  ")
    if summary.imported is not None and summary.imported.get("label"):
        print(f"  {summary.imported['label']}")
    print(_table([["metric", "value"]] + _metric_rows([summary])))
    print(f"  {len(run.requests)} request rows, {len(run.timeseries)} time-series rows")
    return 0


def command_compare(args: argparse.Namespace) -> int:
    from runners.metrics.seed_statistics import SINGLE_SEED_NOTE
    from runners.run.knowledge import scheduler_display
    from runners.store.result_store import load_run
    from runners.study.files import find_study
    from runners.study.runner import read_study

    studies = [find_study(args.out, name) for name in args.runs]
    if any(studies):
        if len(args.runs) > 1:
            raise ConfigError(
                "compare",
                "a study is compared on its own (its schedulers against its baseline); "
                "expected one study id, or run ids only",
            )
        study_folder = studies[0]
        assert study_folder is not None  # any(studies) and a single argument
        record = read_study(study_folder)
        print(f"study {record.study_id} ({record.status})")
        _print_study(record, args.out)
        return 0
    runs = [load_run(args.out, name, allow_path=True) for name in args.runs]
    from runners.metrics.catalog import RUN_METRICS, summary_value
    from runners.views.compare import definition_details, definition_notes

    summaries = [run.summary for run in runs]
    rows = [
        ["metric"] + [run.run_id for run in runs] + [f"change {run.run_id}" for run in runs[1:]],
        ["scheduler"] + [str(scheduler_display(summary)) for summary in summaries] + [""] * (len(runs) - 1),
    ]
    for metric in RUN_METRICS:
        values = [summary_value(summary, metric.key) for summary in summaries]
        if metric.real_engines_only and all(value is None for value in values):
            continue
        changes = [
            metric.format_change(None if value is None or values[0] is None else value - values[0])
            for value in values[1:]
        ]
        differs = " *" if definition_notes(summaries, metric.key) else ""
        rows.append([metric.label + differs] + [metric.format(value) for value in values] + changes)
    print(_table(rows))
    print(f"change = run - {runs[0].run_id}, in the metric's unit (pts: percentage points)")
    from runners.engines.beliefs import beliefs_note
    from runners.views.compare import profile_note

    believed = beliefs_note([(run.run_id, run.folder) for run in runs])
    if believed:
        print(believed)
    for note in dict.fromkeys(filter(None, (profile_note(run.config) for run in runs))):
        print(note)
    details = definition_details(summaries)
    if details:  # imported runs: where each came from and how the tool's definitions differ
        print(
            "* an imported run's figure is not schedlab's own recomputation, or its tool defines it "
            "differently (-: not measured by the tool); the imported runs:"
        )
        for line in details:
            print(f"  {line}")
    print(SINGLE_SEED_NOTE)
    from runners.views.compare import partial_runs_note

    partial = partial_runs_note(summaries)
    if partial:
        print(partial)
    from runners.metrics.contention import identical_decisions, identical_decisions_message

    message = identical_decisions_message(summaries, identical_decisions([run.requests for run in runs]))
    if message:
        print(message)
    return 0


def command_profile(args: argparse.Namespace) -> int:
    import asyncio

    from tqdm import tqdm

    from runners.app.profile_gate import GatedProfile, profile_with_gate
    from runners.app.profiler import (
        ProfileGrid,
        ProfileSample,
        StepGrid,
        fit_profile,
        fit_table,
        measure,
        write_samples,
        write_step_samples,
    )
    from runners.engines.beliefs import LIMIT_NAMES, describe
    from runners.engines.profile import quality_note
    from runners.engines.real_engine import RealEngine
    from runners.engines.sim_config import SimulatorConfig

    config = build_run_config(args)
    engine_config = config.engine
    if isinstance(engine_config, SimulatorConfig):
        from runners.registry import ENGINES

        real = ", ".join(name for name in ENGINES if name != "sim")
        raise ConfigError("--engine", f"profile needs a real engine: {real} (openai with --url)")
    if not 1 <= args.repeats <= MAX_PROFILE_REPEATS:
        raise ConfigError("--repeats", f"{args.repeats}: expected a whole number from 1 to {MAX_PROFILE_REPEATS}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.latency_model == "phase":  # the request grid and eq. 14-15 (SLO-aware paper)
        grid = ProfileGrid(
            batch_sizes=_int_list(args.batch_sizes or "1,2,4,8,16", "--batch-sizes"),
            input_tokens=_int_list(args.input_tokens or "32,128,512", "--input-tokens"),
            output_tokens=_int_list(args.output_tokens or "16,64", "--output-tokens"),
            repeats=args.repeats,
        )
    else:  # measured engine steps and the linear step model
        phases = _phase_list(args.phases)
        step_grid = StepGrid(
            prefill_repeats=args.repeats,
            mixed_repeats=args.repeats,
            interference_repeats=args.repeats,
            **({"decode_batches": _int_list(args.batch_sizes, "--batch-sizes")} if args.batch_sizes else {}),
            **({"prefill_prompt_tokens": _int_list(args.input_tokens, "--input-tokens")} if args.input_tokens else {}),
        )
    engine = RealEngine(config=engine_config, log_folder=out.parent / f"{out.stem}-logs")
    bar = tqdm(unit="point", disable=None, file=sys.stderr)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    phase_samples: list[ProfileSample] = []
    gated: GatedProfile | None = None
    samples_path = out.with_name(out.stem + "-samples.csv")
    try:
        instance = engine.start()[0]
        beliefs = instance.beliefs
        assert beliefs is not None  # RealEngine.start sets it
        for line in describe(beliefs.record()):
            print(f"engine: {line}", flush=True)
        limits: dict[str, Any] = dict(
            name=args.name or out.stem,
            source=f"python -m runners profile against {instance.endpoint.kind} {instance.version or ''} "
            f"model {instance.endpoint.model}".strip(),
            kv_capacity_tokens=beliefs.value("kv_capacity_tokens"),
            block_size=beliefs.value("block_size"),
            max_num_seqs=beliefs.value("max_num_seqs"),
            max_num_batched_tokens=beliefs.value("max_num_batched_tokens"),
        )
        if args.latency_model == "phase":
            phase_samples = asyncio.run(
                measure(instance.endpoint, grid, engine_config.request_timeout_s, progress=progress)
            )
        else:
            gated = profile_with_gate(
                instance.endpoint,
                step_grid,
                int(beliefs.value("max_num_batched_tokens")),
                limits,
                engine_config.profile_gate,
                accept_noisy=args.accept_noisy,
                timeout_s=engine_config.request_timeout_s,
                say=bar.set_description_str,
                phases=phases,
            )
    finally:
        bar.close()
        engine.stop()
    # where each limit came from, so a simulated run from this profile shows the same sources
    sources = {name: getattr(beliefs, name).source for name in LIMIT_NAMES if beliefs.value(name) is not None}
    if gated is None:
        profile = fit_profile(phase_samples, **limits)
        write_samples(phase_samples, samples_path)
        measurements = len(phase_samples)
    else:  # the measured samples are kept whatever the gate says
        profile = gated.profile
        write_step_samples(gated.samples, samples_path)
        if gated.replaced:
            write_step_samples(gated.replaced, out.with_name(out.stem + "-samples-first-pass.csv"))
        measurements = len(gated.samples)
        if not gated.passed:
            for verdict in gated.failed:
                print(f"profile: {verdict.line()}", file=sys.stderr)
            if not args.accept_noisy:  # what the gate measured is kept beside the samples
                judged = out.with_name(out.stem + "-quality.json")
                judged.write_text(
                    json.dumps({"fit": profile.fit, "quality": profile.quality}, indent=2, default=str) + "\n",
                    encoding="utf-8",
                )
                raise SchedlabError(
                    f"profile: not written: {', '.join(v.phase for v in gated.failed)} failed the quality gate "
                    f"again after measuring again (engine.profile_gate); the samples are in {samples_path}, the "
                    f"gate's measurements in {judged}; --accept-noisy writes the profile marked noisy"
                )
    profile = profile.model_copy(update={"limit_sources": {k: v for k, v in sources.items() if k != "prefix_caching"}})
    profile.to_file(out)
    print(
        f"profile written to {out} ({measurements} measurements, {profile.latency_kind} model; samples in "
        f"{samples_path})"
    )
    print(_table(fit_table(profile)))
    if profile.quality is not None:
        print(f"quality: {quality_note(profile.fit, profile.quality)}")
    print(f"KV capacity: {profile.kv_capacity_tokens} tokens")
    return 0


def _phase_list(text: str | None) -> list[str]:
    """``profile --phases``: the named phases in the profiler's order (default all)."""
    from runners.app.profiler import PHASES

    if text is None:
        return list(PHASES)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in PHASES]
    if unknown or not {"prefill", "decode"} <= set(names):
        raise ConfigError(
            "--phases", f"{text!r}: expected a comma-separated subset of {', '.join(PHASES)} with prefill and decode"
        )
    return [name for name in PHASES if name in names]


#: Most repeats of each profile point (``profile --repeats``).
MAX_PROFILE_REPEATS = 1_000


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(flag, f"{text!r} is not a comma-separated list of integers") from None
    if not values or min(values) <= 0:
        raise ConfigError(flag, f"{text!r}: expected positive integers, e.g. 1,2,4,8")
    return values


def command_delete(args: argparse.Namespace) -> int:
    from runners.store.result_store import delete_run
    from runners.store.run_ids import RUN_ID_PATTERN
    from runners.study.runner import STUDY_FILE, delete_study

    if RUN_ID_PATTERN.match(args.run) and (Path(args.out) / args.run / STUDY_FILE).is_file():
        deleted = delete_study(args.out, args.run)
        print(f"deleted study {args.run}: {len(deleted) - 1} member runs and {deleted[-1]}")
        return 0
    folder = delete_run(args.out, args.run)
    print(f"deleted {folder}")
    return 0


def command_schemas(args: argparse.Namespace) -> int:
    """The JSON Schemas of the result records (runners.store.models), printed or written."""
    from runners.store.models import json_schemas

    schemas = json_schemas()
    if not args.write:
        print(json.dumps({name: json.loads(text) for name, text in schemas.items()}, indent=2))
        return 0
    folder = Path(args.write)
    if not folder.is_dir():
        raise ConfigError("--write", f"{folder}: not a folder; expected an existing folder for the schema files")
    for name, text in schemas.items():
        (folder / name).write_text(text)
        print(folder / name)
    return 0


def command_schedulers(args: argparse.Namespace) -> int:
    from runners.registry import ENGINES, SCHEDULER_PROBLEMS, SCHEDULERS, scheduler_parameters, usable_schedulers

    print("schedulers:")
    for name in usable_schedulers():  # one that does not load is a line under "not added"
        cls = SCHEDULERS[name]
        print(f"  {name:10s} {cls.summary}  [{cls.paper}]")
        for parameter, info in scheduler_parameters(name).items():
            print(f"      {parameter} (default {info['default']!r}): {info['description']}")
    for problem in SCHEDULER_PROBLEMS:
        print(f"  not added: {problem}")
    print("engines:")
    for name, entry in ENGINES.items():
        print(f"  {name:10s} {entry.summary}")
    return 0


def command_worker(args: argparse.Namespace) -> int:
    from runners.app.worker import run_job

    state = run_job(args.job, args.results, sys.stdin.read() if args.spec_stdin else None)
    return 0 if state in ("done", "cancelled") else 1


def command_demo(args: argparse.Namespace) -> int:
    """Rerun the Demo's studies (one per load regime: six schedulers x seeds 0..9 each) and print
    each one's table."""
    from runners.store.result_store import results_folder
    from runners.views.demo import DEMO_REQUESTS, demo_plan, make_demo_studies

    results_folder(args.out)  # a file or device as --out: one line, before minutes of runs
    parent = Path(args.out).parent
    if not Path(args.out).is_dir() and not parent.is_dir():
        raise ConfigError("--out", f"{args.out}: its folder {str(parent)!r} does not exist; expected a results folder")
    plan = demo_plan()  # every regime's runs, for the progress bar
    results = _with_study_progress(
        plan,
        DEMO_REQUESTS,
        False,
        lambda progress, should_stop: make_demo_studies(args.out, progress=progress, should_stop=should_stop),
    )
    codes = [_report_study(result, args.out) for result in results]
    return next((code for code in codes if code != 0), 0)


#: How every results-folder flag's default reads; the folder itself is resolved when a command runs
#: (:func:`_results_defaults`), so ``--help`` imports nothing of the result store.
RESULTS_DEFAULT_TEXT = "results/, or $SCHEDLAB_RESULTS_DIR"


def _add_out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, help=f"results folder (default: {RESULTS_DEFAULT_TEXT})")


def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    from runners.engines.kind_names import LAUNCHED_KINDS

    p.add_argument("--config", help="YAML or JSON run config; flags override it")
    p.add_argument("--engine", help=f"engine kind: {' | '.join(ENGINE_KINDS)} (openai: attach by --url)")
    p.add_argument(
        "--model", help=f"model folder to launch ({', '.join(LAUNCHED_KINDS)}) or served model name (openai)"
    )
    p.add_argument("--url", help="openai: base URL(s) of running servers, comma-separated")
    p.add_argument("--python", help="vllm: the Python of the environment vLLM is installed in")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="any config field, e.g. engine.max_num_seqs=64")


def add_scheduler_path(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scheduler-path",
        action="append",
        metavar="FILE_OR_MODULE",
        help="a Python file or module of your own scheduler classes (repeatable; also "
        "SCHEDLAB_SCHEDULER_PATH); each SchedulerPolicy subclass with a name can then be run by it",
    )


def _use_scheduler_paths(args: argparse.Namespace) -> None:
    """Add ``--scheduler-path`` to ``SCHEDLAB_SCHEDULER_PATH`` before the registry is first asked
    (study workers, spawned, inherit the environment and find the same files)."""
    paths = getattr(args, "scheduler_path", None)
    if paths:
        from runners.schedulers.discovery import PATH_ENV

        resolved = [str(Path(p).resolve()) if p.endswith(".py") else p for p in paths]
        os.environ[PATH_ENV] = os.pathsep.join([*filter(None, [os.environ.get(PATH_ENV, "")]), *resolved])


def _build_run(run: argparse.ArgumentParser) -> None:
    _add_engine_flags(run)
    add_scheduler_path(run)
    run.add_argument("--tokenizer", help="local tokenizer folder for exact token counts (usually the model folder)")
    run.add_argument("--scheduler", help="scheduler name (see 'schedulers'); several, comma-separated, make a study")
    run.add_argument(
        "--seeds",
        help="a study over seeds: N (seeds 0..N-1) or a list such as 3,7,11; every scheduler "
        "gets the same workload and arrivals at each seed",
    )
    run.add_argument("--rates", help="a study over arrival rates, req/s, e.g. 2,4,6 (statistics per rate)")
    run.add_argument("--baseline", help="the study's baseline scheduler (default: the first of --scheduler)")
    run.add_argument("--yes", action="store_true", help="run a study of more than 1,000 runs without asking")
    run.add_argument(
        "--resume",
        metavar="STUDY",
        help="finish an interrupted, cancelled or failed study: run its missing and failed members with the "
        "plan and seeds its study.json records, keeping those that finished done (only --out, --workers, "
        "--executor, --quiet go with it)",
    )
    run.add_argument(
        "--workers",
        type=int,
        help="a study's simulator runs at once, in worker processes (default: "
        "all cores); real-engine studies run one at a time",
    )
    run.add_argument(
        "--executor",
        help="where a study's runs execute: process (default), serial, or ray (a Ray "
        "cluster: RAY_ADDRESS, else a local Ray; pip install ray)",
    )
    run.add_argument(
        "--member-resources",
        metavar="NAME=N,...",
        help="a real-engine study on Ray: what each member holds while its server runs, e.g. gpu=1 (a "
        "custom resource) or GPU=2,CPU=4 (default GPU = instances, CPU = 1)",
    )
    run.add_argument(
        "--servers-per-member",
        type=int,
        help="a study on attached servers (--url) as a pool: each member gets this many of them, "
        "members run at once on separate groups, prefix caches emptied between members",
    )
    run.add_argument("--requests", type=int, help="number of requests")
    run.add_argument("--rate", type=float, help="arrival rate, requests per second")
    run.add_argument("--arrival", help="all-at-once | poisson | gamma | constant | replay")
    run.add_argument("--burstiness", type=float, help="gamma shape (1 = Poisson)")
    run.add_argument("--seed", type=int, help="workload and arrival seed")
    run.add_argument(
        "--trace",
        metavar="FILE",
        help="replay a production trace with its own timing, lengths and tasks: Mooncake .jsonl, Azure LLM "
        "inference .csv or BurstGPT .csv (samples in datasets/traces/); the first --requests records are sent",
    )
    run.add_argument("--trace-format", help="auto (default: by extension and header) | mooncake | azure | burstgpt")
    run.add_argument(
        "--trace-speedup", type=float, help="divide the trace's arrival offsets by this (default 1; 2 = twice as fast)"
    )
    run.add_argument(
        "--multi-turn",
        action="store_true",
        help="send whole conversations turn by turn: --requests counts sessions; each turn's prompt is the "
        "conversation so far, sent when the previous reply arrived plus a think time",
    )
    run.add_argument("--max-turns", type=int, help="most turns per session (default 8; implies --multi-turn)")
    run.add_argument(
        "--think-time",
        type=float,
        metavar="SECONDS",
        help="mean think time between a reply and the next turn, exponential (default 5; 0 = back to back; "
        "implies --multi-turn)",
    )
    run.add_argument("--batch-size", type=int, help="batch size B for batching schedulers")
    run.add_argument("--instances", type=int, help="engine instances")
    run.add_argument("--kv-capacity", type=int, help="KV-cache capacity per instance, tokens")
    run.add_argument("--ratio", help="chat:code mix, for example 1:1")
    run.add_argument("--slo", help="SLO preset: paper | auto | custom")
    run.add_argument("--run-id", help="name of the run folder (of a study: the study id)")
    run.add_argument(
        "--max-error-rate",
        type=float,
        metavar="FRACTION",
        help="failure gate: the run fails (exit code 1) when more than this fraction of its requests "
        "failed (default 0.5; 1 = off)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_out(run)
    run.set_defaults(handler=command_run)


def _build_profile(profile: argparse.ArgumentParser) -> None:
    _add_engine_flags(profile)
    profile.add_argument("--out", required=True, help="profile file to write (.yaml or .json)")
    profile.add_argument("--name", help="profile name (default: the file's stem)")
    profile.add_argument(
        "--latency-model",
        choices=["linear-step", "phase"],
        default="linear-step",
        help="linear-step (default): measure pure prefill, pure decode and mixed engine steps and "
        "fit the linear step model; phase: the request grid and the SLO-aware paper's "
        "eq. 14-15",
    )
    profile.add_argument("--batch-sizes", help="decode batch sizes (default 1,2,4,8,16,32,64; phase: 1,2,4,8,16)")
    profile.add_argument(
        "--input-tokens", help="prompt lengths of the prefill steps (default 16,64,...,1200 words; phase: 32,128,512)"
    )
    profile.add_argument("--output-tokens", help="phase model only: output lengths (default 16,64)")
    profile.add_argument("--repeats", type=int, default=2)
    profile.add_argument(
        "--phases",
        help="linear-step only: the step profiler's phases to run, comma-separated, of prefill, decode, mixed, "
        "interference, prefix (default all; prefill and decode are needed to fit)",
    )
    profile.add_argument(
        "--accept-noisy",
        action="store_true",
        help="write the profile even when a phase fails the quality gate (engine.profile_gate: a step kind's "
        "out-of-fold error over 45%%, other processes over 0.25 cores) after "
        "measuring it again; the profile is then marked noisy wherever it is used (linear-step only)",
    )
    profile.set_defaults(handler=command_profile)


def _build_list(listing: argparse.ArgumentParser) -> None:
    _add_out(listing)
    listing.set_defaults(handler=command_list)


def _build_show(show: argparse.ArgumentParser) -> None:
    show.add_argument("run", help="run id, unique prefix, or folder; or a study id")
    _add_out(show)
    show.set_defaults(handler=command_show)


def _build_compare(compare: argparse.ArgumentParser) -> None:
    compare.add_argument("runs", nargs="+", help="run ids, unique prefixes, or folders; or one study id")
    _add_out(compare)
    compare.set_defaults(handler=command_compare)


def _build_delete(delete: argparse.ArgumentParser) -> None:
    delete.add_argument("run", help="the exact run id (as 'list' shows it), never a path or pattern")
    _add_out(delete)
    delete.set_defaults(handler=command_delete)


def _build_schedulers(schedulers: argparse.ArgumentParser) -> None:
    add_scheduler_path(schedulers)
    schedulers.set_defaults(handler=command_schedulers)


def _build_schemas(schemas: argparse.ArgumentParser) -> None:
    schemas.add_argument("--write", metavar="FOLDER", help="write <name>.schema.json files into FOLDER")
    schemas.set_defaults(handler=command_schemas)


def _build_demo(demo: argparse.ArgumentParser) -> None:
    _add_out(demo)
    demo.set_defaults(handler=command_demo)


def _build_worker(worker: argparse.ArgumentParser) -> None:
    worker.add_argument("job", help="results/.jobs/<job_id> folder")
    worker.add_argument("--results", default=None, help=f"results folder (default: {RESULTS_DEFAULT_TEXT})")
    worker.add_argument(
        "--spec-stdin",
        action="store_true",
        help="read the job spec with its secrets from stdin (job.json holds them as ***)",
    )
    worker.set_defaults(handler=command_worker)


def _build_import(importer: argparse.ArgumentParser) -> None:
    from runners.imports.cli import build_import

    build_import(importer)


def _build_export(exporter: argparse.ArgumentParser) -> None:
    from runners.imports.cli import build_export

    build_export(exporter)


#: The commands of ``python -m runners``: name -> (one line for the command list, the function that
#: adds its arguments). Only the command being run gets its arguments (and imports what they
#: name), so ``--help`` and a command's own ``--help`` load no more than they show.
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "run": ("run one benchmark and save it under results/", _build_run),
    "profile": ("fit the latency model to a real engine and save a profile", _build_profile),
    "list": ("list saved runs", _build_list),
    "show": ("show one run's summary, or a study's statistics", _build_show),
    "compare": ("headline metrics side by side, %% change against the first", _build_compare),
    "delete": ("delete a saved run", _build_delete),
    "schedulers": ("list schedulers, their parameters, and engines", _build_schedulers),
    "schemas": ("print or write the result files' JSON Schemas (docs/schemas/)", _build_schemas),
    "demo": (
        "rerun the Demo page's studies and rewrite results/demo-below/, results/demo-overload/ and their runs "
        "<study>-<scheduler>-s<seed>",
        _build_demo,
    ),
    "worker": ("execute a dashboard job folder (started by the dashboard)", _build_worker),
    "import": ("import a vLLM bench serve, GuideLLM or AIPerf result file as run(s)", _build_import),
    "export": ("write a saved run as a vLLM bench serve-compatible JSON", _build_export),
    "check-scheduler": (
        "check a scheduler policy (file, module or name) against the policy contracts on the simulator",
        lambda parser: __import__("runners.app.check_cli", fromlist=["build"]).build(parser),
    ),
}


def make_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command-line parser. With ``argv``, only the command it names gets its arguments
    (none for ``--help`` alone); without, every command does."""
    parser = argparse.ArgumentParser(prog="python -m runners", description="schedlab: benchmark LLM-serving schedulers")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = next((word for word in argv if not word.startswith("-")), None) if argv is not None else None
    for name, (help_text, build) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text)
        if argv is None or name == chosen:
            build(command)
    return parser


def _results_defaults(args: argparse.Namespace) -> None:
    """Fill the results-folder flags left out with the result store's folder (read now, not when
    the parser is built)."""
    store = sys.modules.get("runners.store.result_store")  # loaded (a test may have set its folder): its value
    for flag in ("out", "results"):
        if flag in vars(args) and getattr(args, flag) is None:
            from runners.paths import default_results_dir

            setattr(args, flag, str(store.DEFAULT_RESULTS_DIR if store else default_results_dir()))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; exit code 2 with one ``error:`` line for bad input, 130 when interrupted
    before a run's own stop handling began (a run or study stops cleanly and keeps its rows)."""
    from runners.errors import ERROR_LINE_CHARS, STOPPED_LINE, shortened

    try:
        words = list(sys.argv[1:] if argv is None else argv)
        args = make_parser(words).parse_args(words)
        _results_defaults(args)
        _use_scheduler_paths(args)
        return int(args.handler(args))
    except SchedlabError as exc:
        print(f"error: {shortened(str(exc), ERROR_LINE_CHARS)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print(STOPPED_LINE, file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
