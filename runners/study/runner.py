"""Studies: every scheduler of a list at every seed of a list, paired by seed, with statistics.

At one seed every scheduler gets the identical workload and arrival times: both depend only on
``workload.*`` (the seed is ``workload.seed``), and the SLOs on the engine, which is the same for
all. Each (scheduler, seed) is an ordinary run ``results/<study_id>-<scheduler>-s<seed>/``; the
study adds ``results/<study_id>/study.json`` (a contract, see docs/result-files.md):

- ``schema_version`` (4), ``study_id``, ``baseline``, ``schedulers``, ``seeds``, ``rates`` (req/s;
  empty when the study has its config's one rate), ``created_at``,
  ``finished_at`` (None while running), ``status`` (running | done | failed | cancelled; read as
  ``interrupted`` when the process that writes it is gone); version 2 added ``config`` (the
  study's config as config.json holds a run's: secrets as ``***``), from which ``run --resume``
  rebuilds the same plan, ``writer`` (the writing process, as a run summary's) and ``resumed_at``
  (the times the study was resumed); version 3 added ``oracles`` (scheduler -> the oracles its
  runs used, one sentence each: runners.run.knowledge; absent: none); version 4 added each run's
  ``node, hardware, cache_reset, started_at, requests_done, requests_total`` and the execution's
  ``resources, servers_per_member``; version 5 each run's ``finished_at`` and ``dedicated`` (its
  launched servers had GPUs of their own) and ``side_by_side`` (a sentence when real members ran
  at the same time on one machine without accelerators of their own: :func:`side_by_side_note`);
  versions 1 to 4 still read;
- ``runs``: ``{run_id, scheduler, seed, rate, status, error}`` for every planned run (status
  ``pending`` before it ran, ``skipped`` when the study was cancelled first, or stopped when a
  member failed for a reason of this machine: then its ``error`` says which and why, and the
  study is ``failed``), and where it ran: ``node`` (the hostname of its launched servers, from
  its engine.json ``host``; the URLs of its attached servers), ``hardware`` (GPU models and
  driver, or the CPU), ``cache_reset`` (on a pool of attached servers, why their prefix cache
  could not be emptied before it; None when it was), ``started_at`` and, while it runs,
  ``requests_done`` of ``requests_total``;
- ``statistics``: for each metric key of :data:`runners.metrics.catalog.RUN_METRICS`,
  ``{"schedulers": {name: {n, mean, median, ci_low, ci_high, note}}, "vs_baseline": {name:
  {n_pairs, dropped, diff_mean, ci_low, ci_high, wins, verdict, note}}}`` (definitions in
  :mod:`runners.metrics.seed_statistics`), values in the summary's stored units (seconds,
  fractions, 1/s). Only runs that ended ``done`` count; a failed run's seed is dropped pairwise.
  Metrics that describe the setting (contention) have an empty ``vs_baseline``: no verdict.
  ``statistics_by_rate``: ``[{rate, statistics}]``, the same per arrival rate; with several
  rates ``statistics`` is empty (means across rates mean nothing).

A study folder holds only study.json, so :func:`runners.store.result_store.list_runs` never takes it
for a run; it appears at once, complete (written in a hidden folder, then renamed). It also records
``execution`` (``{executor, workers, note, resources, servers_per_member}``: how the runs
executed; the results do not depend on it).

Runs are independent tasks (:func:`execute_member`): simulator runs execute in parallel in worker
processes (default: all cores) or on Ray; real-engine runs one at a time, as Ray tasks that each
launch their own servers, or dealt out over a pool of attached servers
(:mod:`runners.study.executors`, :mod:`runners.study.cluster`). ``run --resume`` keeps the members
that ended done and runs the others again (failed ones too); a replaced member's folder is moved
to ``results/.replaced/``, never deleted.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from runners.errors import ConfigError, EnvironmentProblem, SchedlabError, shortened
from runners.input_model import MAX_SEED
from runners.metrics.catalog import RUN_METRICS, STUDY_HEADLINE_KEYS, Metric, summary_value
from runners.registry import check_engine_for, make_policy, scheduler_params
from runners.run.config import MAX_STUDY_SEEDS, RunConfig, TrialsConfig, config_record
from runners.run.knowledge import ORACLE_TAG, summary_oracles
from runners.store.models import (
    STUDY_SCHEMA_VERSION,
    MetricStatistics,
    PairedComparison,
    RateStatistics,
    RelativeChange,
    RunSummary,
    SeedSummary,
    StudyRecord,
    StudyRun,
)
from runners.store.result_store import (
    INTERRUPTED,
    inspect_run,
    read_json_file,
    results_folder,
    write_record,
    writer_gone,
    writer_identity,
)
from runners.store.run_ids import RUN_ID_PATTERN, validate_run_id
from runners.study.executors import Execution, MemberTask, Outcome, Placement, choose_execution, run_members
from runners.study.files import STUDY_FILE
from runners.study.plan import StudyMember, StudyPlan
from runners.timestamps import id_stamp, parse_utc_stamp, utc_stamp

if TYPE_CHECKING:
    import pandas as pd

#: study.json versions this schedlab reads (1 lacks ``config``, ``writer``, ``resumed_at``; 2
#: lacks ``oracles``: scheduler -> the oracles its runs used, runners.run.knowledge; its members'
#: runs were written before result schema 5, so their G left failed requests out).
STUDY_SCHEMA_VERSIONS_READ = (1, 2, 3, 4, 5)
#: A study of more runs than this needs confirmation (CLI ``--yes``).
MAX_RUNS_UNCONFIRMED = 1_000
#: Runs that did not end done listed by name under a study's table (the rest are counted).
LISTED_PROBLEMS = 20
#: Seconds between two writes of study.json while a study runs (runs may end many times a second).
WRITE_INTERVAL_S = 1.0


def parse_seeds(text: str, flag: str = "--seeds") -> list[int]:
    """``"10"`` -> seeds 0..9; ``"3,7,11"`` -> that list. ConfigError naming ``flag`` otherwise."""
    expected = "expected a count N (seeds 0..N-1, e.g. 10) or a comma-separated list of distinct seeds (e.g. 3,7,11)"
    parts = [part.strip() for part in str(text).split(",")]
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        raise ConfigError(flag, f"{text!r} is not a number or a list of numbers; {expected}") from None
    if len(numbers) == 1:
        count = numbers[0]
        if not 1 <= count <= MAX_STUDY_SEEDS:
            raise ConfigError(flag, f"{text!r}: a count must be 1 to {MAX_STUDY_SEEDS:,}; {expected}")
        return list(range(count))
    if len(numbers) > MAX_STUDY_SEEDS:
        raise ConfigError(flag, f"{len(numbers):,} seeds; at most {MAX_STUDY_SEEDS:,}")
    bad = [n for n in numbers if not 0 <= n <= MAX_SEED]
    if bad:
        raise ConfigError(flag, f"seed {bad[0]} is out of range; seeds are 0 to {MAX_SEED}")
    repeated = sorted({n for n in numbers if numbers.count(n) > 1})
    if repeated:
        raise ConfigError(flag, f"seed {repeated[0]} is listed twice; {expected}")
    return numbers


def is_study(config: RunConfig) -> bool:
    """Whether ``config`` asks for a study (seeds listed, or schedulers other than ``scheduler.name``)."""
    schedulers = config.trials.schedulers
    return (
        bool(config.trials.seeds or config.trials.rates)
        or len(schedulers) > 1
        or (bool(schedulers) and schedulers[0] != config.scheduler.name)
    )


def new_study_id() -> str:
    """``YYYYmmdd-HHMMSS-study-<4 hex>`` (UTC)."""
    return f"{id_stamp()}-study-{os.urandom(2).hex()}"


def plan_study(config: RunConfig, study_id: str | None = None) -> StudyPlan:
    """Every (scheduler, seed) run of the study ``config.trials`` describes. Schedulers default to
    ``scheduler.name``, seeds to ``workload.seed``; the baseline to the first scheduler. Scheduler
    parameters (``scheduler.params``) apply to every scheduler and are checked for each."""
    trials = config.trials
    schedulers = list(trials.schedulers) or [config.scheduler.name]
    seeds = list(trials.seeds) or [config.workload.seed]
    baseline = trials.baseline or schedulers[0]
    if baseline not in schedulers:
        raise ConfigError(
            "--baseline", f"{baseline!r} is not a scheduler of the study; expected one of: {', '.join(schedulers)}"
        )
    params = {name: scheduler_params(name, config.scheduler.params, schedulers) for name in schedulers}
    for name in schedulers:
        make_policy(name, params[name])
        try:  # a scheduler this engine cannot run is refused before the study starts, as a single run's is
            check_engine_for(name, config.engine.kind)
        except ConfigError as exc:
            raise ConfigError("trials.schedulers", exc.message) from None  # the message names the scheduler
    study_id = validate_run_id(study_id or config.run_id or new_study_id())
    members = []
    rates: list[float | None] = list(trials.rates) or [config.workload.arrival.rate]
    for name, rate, seed in ((n, r, s) for n in schedulers for r in rates for s in seeds):
        if trials.rates:
            run_id = f"{study_id}-{name}-r{format(rate, '.10g').replace('+', '')}-s{seed}"
        else:
            run_id = f"{study_id}-{name}-s{seed}"
        if not RUN_ID_PATTERN.match(run_id):
            raise ConfigError(
                "--run-id", f"study id {study_id!r} is too long for its run ids ({run_id!r}); expected a shorter name"
            )
        member_config = config.model_copy(
            update={
                "run_id": run_id,
                "scheduler": config.scheduler.model_copy(update={"name": name, "params": params[name]}),
                "workload": config.workload.model_copy(
                    update={"seed": seed, "arrival": config.workload.arrival.model_copy(update={"rate": rate})}
                ),
                "trials": TrialsConfig(),
            }
        )
        members.append(StudyMember(run_id, name, seed, rate, member_config))
    if len({member.run_id for member in members}) < len(members):
        raise ConfigError(
            "--rates", "two rates give the same run id; expected rates that differ in their first 10 significant digits"
        )
    ordered = [baseline] + [name for name in schedulers if name != baseline]
    return StudyPlan(
        study_id, baseline, ordered, seeds, members, list(trials.rates), trials.workers, trials.executor, config
    )


def check_size(plan: StudyPlan, confirmed: bool) -> None:
    """ConfigError when the study has more than :data:`MAX_RUNS_UNCONFIRMED` runs, unconfirmed."""
    if len(plan.members) > MAX_RUNS_UNCONFIRMED and not confirmed:
        raise ConfigError(
            "--seeds",
            f"the study has {len(plan.members):,} runs ({len(plan.schedulers)} schedulers x "
            f"{len(plan.seeds)} seeds x {max(len(plan.rates), 1)} rates), more than "
            f"{MAX_RUNS_UNCONFIRMED:,}; add --yes to run it anyway",
        )


# -- statistics ------------------------------------------------------------------------------------
def metric_statistics(
    metric: Metric,
    plan_runs: Sequence[StudyRun],
    summaries: Mapping[str, RunSummary],
    baseline: str,
    schedulers: Sequence[str],
    relative: bool = True,
) -> MetricStatistics:
    """One metric's per-scheduler summary and paired comparison with the baseline. ``plan_runs``:
    the study's run records; ``summaries``: run_id -> summary of the runs that ended done.
    ``relative``: add each comparison's relative change with its interval (Fieller below 10 pairs, BCa from 10)
    (``vs_baseline[name].relative``; a few ms each, so left out while a study runs)."""
    # scipy.stats (0.5-0.9 s of imports) loads where statistics are computed, not with every run
    from runners.metrics.seed_statistics import paired_comparison, relative_change, summarize

    by_scheduler: dict[str, dict[int | None, float | None]] = {name: {} for name in schedulers}
    for run in plan_runs:
        summary = summaries.get(str(run.run_id))
        value = summary_value(summary, metric.key) if summary is not None else None
        by_scheduler.setdefault(str(run.scheduler), {})[run.seed] = value
    per = {
        name: SeedSummary.model_validate(summarize(list(values.values())).as_dict())
        for name, values in by_scheduler.items()
    }
    if metric.describes_setting:  # how contended the runs were: described, never judged
        return MetricStatistics(schedulers=per, vs_baseline={})
    versus = {
        name: PairedComparison.model_validate(
            paired_comparison(by_scheduler[baseline], values, metric.higher_is_better).as_dict()
        )
        for name, values in by_scheduler.items()
        if name != baseline
    }
    if relative:
        for name, pair in versus.items():
            pair.relative = RelativeChange.model_validate(
                relative_change(by_scheduler[baseline], by_scheduler[name]).as_dict()
            )
    return MetricStatistics(schedulers=per, vs_baseline=versus)


def study_statistics(
    runs: Sequence[StudyRun],
    summaries: Mapping[str, RunSummary],
    baseline: str,
    schedulers: Sequence[str],
    relative: bool = True,
) -> dict[str, MetricStatistics]:
    """:func:`metric_statistics` for every metric of the catalog, keyed by metric key."""
    return {
        metric.key: metric_statistics(metric, runs, summaries, baseline, schedulers, relative) for metric in RUN_METRICS
    }


# -- running ---------------------------------------------------------------------------------------
@dataclass
class StudyResult:
    """A finished (or cancelled) study: its folder and the record written to study.json."""

    study_id: str
    folder: Path
    record: StudyRecord


def _now() -> str:
    return utc_stamp()


def execute_member(
    member: StudyMember,
    results_root: str | Path,
    progress: Callable[[int, int], None] | None,
    should_stop: Callable[[], bool] | None,
) -> Outcome:
    """Run one member: (status, summary or None, error). An exception is a failed run, never the
    end of the study; what the run measured stays in its folder."""
    from runners.run.benchmark import execute_run

    try:
        outcome = execute_run(member.config, results_root, progress=progress, should_stop=should_stop)
    except EnvironmentProblem as exc:  # named by its type, as a failed run's errors are: environment_failure reads it
        return "failed", None, f"{type(exc).__name__}: {exc}"
    except SchedlabError as exc:
        return "failed", None, str(exc)
    except Exception as exc:
        return "failed", None, f"{type(exc).__name__}: {exc}"
    return outcome.status, outcome.summary, outcome.error


#: How the error of a run that failed for a reason of this machine begins (the run's error is
#: ``<exception type>: <message>``): its engine's server did not start (the engine not installed
#: in its Python, the model not found, the port busy: runners.engines.launcher.EngineStartError),
#: or a check of the machine refused it (runners.errors.EnvironmentProblem).
ENVIRONMENT_ERRORS = ("EngineStartError: ", f"{EnvironmentProblem.__name__}: ")
#: What an attached server that does not answer at all makes a run's error say.
UNREACHABLE_SERVER = "did not answer GET /v1/models"


def environment_failure(outcome: Outcome) -> str | None:
    """The error of a member that failed for a reason of this machine, which every later member
    of its study would meet too (:data:`ENVIRONMENT_ERRORS`, an attached server that does not
    answer); None for any other outcome (a failure of the run's own: its scheduler, its requests)."""
    status, _, error = outcome
    if status != "failed" or not error:
        return None
    if error.startswith(ENVIRONMENT_ERRORS) or UNREACHABLE_SERVER in error.split("\n", 1)[0]:
        return error
    return None


def environment_skip_reason(run_id: str, error: str) -> str:
    """What a member skipped after ``run_id`` failed for a reason of this machine records."""
    first = shortened(error.strip().splitlines()[0] if error.strip() else error, 300)
    return (
        f"not run: {run_id} failed for a reason of this machine, which every run of the study would meet "
        f"({first}); fix it, then launch the study again"
    )


def _record(
    plan: StudyPlan,
    runs: list[StudyRun],
    summaries: Mapping[str, RunSummary],
    status: str,
    created_at: str,
    finished_at: str | None,
    execution: dict[str, Any] | None = None,
    resumed_at: Sequence[str] = (),
) -> StudyRecord:
    rates: list[float | None] = list(plan.rates) or [plan.members[0].rate if plan.members else None]
    by_rate = [
        RateStatistics(
            rate=rate,
            statistics=study_statistics(
                [run for run in runs if run.rate == rate or not plan.rates],
                summaries,
                plan.baseline,
                plan.schedulers,
                relative=status != "running",
            ),
        )
        for rate in rates
    ]
    return StudyRecord.model_validate(
        {
            "schema_version": STUDY_SCHEMA_VERSION,
            "study_id": plan.study_id,
            "baseline": plan.baseline,
            "schedulers": plan.schedulers,
            "seeds": plan.seeds,
            "status": status,
            "created_at": created_at,
            "finished_at": finished_at,
            "rates": plan.rates,
            "runs": runs,
            "statistics": by_rate[0].statistics if len(by_rate) == 1 else {},
            "statistics_by_rate": by_rate,
            "execution": execution,
            "oracles": study_oracles(runs, summaries),
            "config": config_record(plan.config.model_copy(update={"run_id": plan.study_id}))
            if plan.config is not None
            else None,
            "writer": writer_identity(),
            "resumed_at": list(resumed_at),
            "side_by_side": side_by_side_note(runs, {m.run_id for m in plan.members if m.config.engine.kind != "sim"}),
        }
    )


def side_by_side_note(runs: Sequence[StudyRun], real: Iterable[str]) -> str | None:
    """A sentence when members of ``real`` (the run ids of real-engine members; simulated runs
    are in virtual time, the machine's load does not reach their figures) ran at overlapping
    times on the same machine (their ``node``: launched servers' host, or the attached servers'
    URLs) and not both on accelerators of their own: each one's figures then include the other's
    load (bench/cluster_study found such side-by-side intervals about 10x wider than serial
    ones). None when none did."""
    real_ids = set(real)
    spans = [
        (run, start, end)
        for run in runs
        if run.node
        and run.run_id in real_ids
        and run.status == "done"
        and (start := parse_utc_stamp(run.started_at)) is not None
        and (end := parse_utc_stamp(run.finished_at)) is not None
    ]
    shared: set[str] = set()
    nodes: set[str] = set()
    for index, (run, start, end) in enumerate(spans):
        for other, other_start, other_end in spans[index + 1 :]:
            machine = _machine(str(run.node))
            if machine != _machine(str(other.node)) or not (start < other_end and other_start < end):
                continue
            if run.dedicated and other.dedicated:
                continue
            shared.update({str(run.run_id), str(other.run_id)})
            nodes.add(machine)
    if not shared:
        return None
    return (
        f"{len(shared)} of {len(spans)} real-engine members ran at the same time as another on the same machine "
        f"({', '.join(sorted(nodes)[:3])}) without accelerators of their own: each one's figures include the "
        "other's load, so paired differences are noisier (run the members one at a time to compare schedulers alone)"
    )


def study_oracles(runs: Sequence[StudyRun], summaries: Mapping[str, RunSummary]) -> dict[str, list[str]]:
    """scheduler -> the oracles its finished runs used (runners.run.knowledge), for the schedulers that used any."""
    found: dict[str, list[str]] = {}
    for run in runs:
        for sentence in summary_oracles(summaries.get(str(run.run_id))):
            said = found.setdefault(str(run.scheduler), [])
            if sentence not in said:
                said.append(sentence)
    return found


def oracle_name(record: StudyRecord, name: str) -> str:
    """A study's scheduler as its tables name it: `` (oracle)`` added when its runs used one."""
    return f"{name} ({ORACLE_TAG})" if (record.oracles or {}).get(name) else name


def _engine_host(folder: Path) -> dict[str, Any] | None:
    """A member's engine.json ``host`` (version 2: where launched servers ran); None for the
    simulator, attached servers or an unreadable file."""
    try:
        data = read_json_file(folder / "engine.json")
    except (SchedlabError, OSError):
        return None
    host = data.get("host") if isinstance(data, dict) else None
    return host if isinstance(host, dict) else None


def member_host(folder: Path) -> tuple[str | None, str | None]:
    """(node, hardware) of a member from its engine.json ``host``; (None, None) without one."""
    return host_place(_engine_host(folder))


def host_place(host: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    """(node, hardware) of an engine.json ``host`` record (None: no host)."""
    if host is None:
        return None, None
    node, hardware = host.get("hostname"), host.get("hardware")
    return (node if isinstance(node, str) else None), (hardware if isinstance(hardware, str) else None)


def _machine(node: str) -> str:
    """The machine of a member's ``node``: a hostname as it is; for attached servers (their URLs,
    comma-separated) the first URL's host, so two servers on one machine are one machine."""
    from urllib.parse import urlsplit

    if "://" not in node:
        return node
    return urlsplit(node.split(",")[0].strip()).hostname or node


def host_dedicated(host: Mapping[str, Any] | None) -> bool | None:
    """True when an engine.json ``host`` says its launched servers were given GPUs (``gpus``),
    False when they ran without, None without a host (attached servers, the simulator)."""
    if host is None or not isinstance(host.get("gpus"), list):
        return None
    return bool(host["gpus"])


def hardware_note(record: StudyRecord) -> str | None:
    """A sentence when the members of some seed (and rate) ran on different hardware (engine.json
    ``host.hardware``), so their pairing compares machines as well as schedulers; None when every
    seed's members ran on identical hardware or nothing says."""
    groups: dict[tuple[int | None, float | None], set[str]] = {}
    for run in record.runs:
        if run.status == "done" and run.hardware:
            groups.setdefault((run.seed, run.rate), set()).add(run.hardware)
    mixed = sorted((key for key, kinds in groups.items() if len(kinds) > 1), key=lambda key: (key[0] or 0, key[1] or 0))
    if not mixed:
        return None
    seeds = ", ".join(str(seed) for seed, _ in mixed[:10]) + (" ..." if len(mixed) > 10 else "")
    kinds = sorted({kind for key in mixed for kind in groups[key]})
    return (
        f"not on identical hardware: at {len(mixed)} of {len(groups)} seeds the paired members ran on "
        f"different machines ({'; '.join(kinds)}), seeds {seeds}; their differences include the hardware's"
    )


def seed_by_seed(members: list[StudyMember]) -> list[StudyMember]:
    """``members`` in the order real members run side by side (on Ray or a pool): seed by seed
    (rate by rate first), the schedulers of a seed in the plan's order, so the members compared
    with each other start together and meet the same conditions of the cluster (on a machine
    whose servers share the CPU, the same contention) rather than one alone and one beside
    another member."""
    return sorted(members, key=lambda member: (member.rate is None, member.rate or 0.0, member.seed))


def placement_notes(record: StudyRecord) -> list[str]:
    """What the study's table needs said about where its members ran: paired members on different
    hardware (:func:`hardware_note`), and attached servers whose prefix cache could not be emptied
    between members (the first reason)."""
    notes = []
    hardware = hardware_note(record)
    if hardware is not None:
        notes.append(hardware)
    if record.side_by_side:
        notes.append(record.side_by_side)
    resets = sorted({run.cache_reset for run in record.runs if run.cache_reset})
    if resets:
        notes.append(f"prefix caches not emptied between members: {resets[0]}")
    return notes


def write_study(path: Path, record: StudyRecord) -> None:
    """study.json at ``path``, written through :class:`StudyRecord` (the fields set, as they were
    always written)."""
    write_record(path, StudyRecord, record.model_dump(mode="python", exclude_unset=True))


def _resume_hint(base: Path, study_id: str) -> str:
    """How to finish study ``study_id`` when its study.json is there; "" otherwise."""
    if (base / study_id / STUDY_FILE).is_file():
        return f" (to finish an interrupted study: python -m runners run --resume {study_id})"
    return ""


def _create_folder(base: Path, study_id: str, record: StudyRecord) -> Path:
    """The study folder with its first study.json, appearing complete (written hidden, renamed)."""
    folder = base / study_id
    if os.path.lexists(folder):
        raise ConfigError("--run-id", f"{folder} already exists; expected a new study id{_resume_hint(base, study_id)}")
    base.mkdir(parents=True, exist_ok=True)
    hidden = base / f".{study_id}.creating"
    hidden.mkdir()
    try:
        write_study(hidden / STUDY_FILE, record)
        os.rename(hidden, folder)
    except BaseException:
        for leftover in hidden.glob("*"):
            leftover.unlink(missing_ok=True)
        hidden.rmdir()
        raise
    return folder


def run_study(
    plan: StudyPlan,
    results_root: str | Path,
    progress: Callable[[int, int, StudyMember], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    execution: Execution | None = None,
    task: MemberTask = execute_member,
    resume: "Resume | None" = None,
) -> StudyResult:
    """Run every member as ``execution`` says (default :func:`runners.study.executors.choose_execution`
    of the plan: simulator runs in parallel on all cores) and keep study.json current as they end
    (written by this process only, at most every :data:`WRITE_INTERVAL_S` while running, and at
    the end). A failed member keeps the rest going, unless it failed for a reason of this machine
    (:func:`environment_failure`: the engine not installed, its server not started, the model not
    found, a busy port): then the study stops there, the rest ``skipped`` with that reason
    (:func:`environment_skip_reason`) and the study ``failed``, instead of every member failing
    the same way. A stop request cancels the running runs (they keep what they measured) and skips
    the rest. ``progress(done, total, member)`` reports each
    member's completed requests (several members may be running). ``task``: the function that
    runs one member (module-level, so that a worker process can import it). ``resume``: the state
    of an interrupted study (:func:`prepare_resume`): its finished members are kept, only the
    others run, and its study.json is rewritten in place."""
    base = results_folder(results_root)
    kept = resume.kept if resume is not None else {}
    for member in plan.members:
        if member.run_id not in kept and os.path.lexists(base / member.run_id):
            raise ConfigError(
                "--run-id",
                f"run {member.run_id!r} already exists in {base}; expected a new study id{_resume_hint(base, plan.study_id)}",
            )
    execution = execution or choose_execution(plan)
    runs = [
        StudyRun(run_id=m.run_id, scheduler=m.scheduler, seed=m.seed, rate=m.rate, status="pending", error=None)
        for m in plan.members
    ]
    by_id = {str(run.run_id): run for run in runs}
    summaries: dict[str, RunSummary] = {}
    for run_id, (status, error, summary) in kept.items():
        by_id[run_id].status, by_id[run_id].error = status, error
        by_id[run_id].node, by_id[run_id].hardware = member_host(base / run_id)
        if status == "done" and summary is not None:
            summaries[run_id] = summary
    created_at = resume.created_at if resume is not None else _now()
    resumed_at = [*resume.resumed_at, _now()] if resume is not None else []

    def record(status: str, finished_at: str | None = None) -> StudyRecord:
        return _record(plan, runs, summaries, status, created_at, finished_at, execution.record(), resumed_at)

    folder = base / plan.study_id
    created: list[Path] = []
    written = 0.0
    real = any(member.config.engine.kind != "sim" for member in plan.members)
    halted: list[str] = []  # the skip reason, once a member failed for a reason of this machine

    def stop_requested() -> bool:
        return bool(halted) or bool(should_stop and should_stop())

    def on_start() -> None:  # once the executor is ready (Ray reached): nothing written before
        if resume is not None:
            write_study(folder / STUDY_FILE, record("running"))
            created.append(folder)
        else:
            created.append(_create_folder(base, plan.study_id, record("running")))

    def write_now(force: bool = False) -> None:
        nonlocal written
        if created and (force or time.monotonic() - written >= WRITE_INTERVAL_S):
            write_study(folder / STUDY_FILE, record("running"))
            written = time.monotonic()

    def on_place(member: StudyMember, placement: Placement) -> None:
        run = by_id[member.run_id]
        if run.status not in ("pending", "running"):  # a start message read after the member's end
            return
        run.status, run.started_at = "running", _now()
        run.node, run.cache_reset = placement.where, placement.cache_note
        write_now(force=real)  # the live view shows where each real member runs as soon as it starts

    def on_finish(member: StudyMember, outcome: Outcome) -> None:
        status, summary, error = outcome
        if status == "skipped" and halted and error is None:
            error = halted[0]
        run = by_id[member.run_id]
        run.status, run.error = status, error
        if status == "done" and summary is not None:
            summaries[member.run_id] = summary
        if status != "skipped":
            host = _engine_host(base / member.run_id)  # read once for where it ran and on what
            node, hardware = host_place(host)
            run.node, run.hardware = node or run.node, hardware
            run.finished_at, run.dedicated = _now(), host_dedicated(host)
        problem = environment_failure(outcome)
        if problem is not None and not halted:
            halted.append(environment_skip_reason(member.run_id, problem))
        write_now()

    def on_progress(member: StudyMember, done: int, total: int) -> None:
        run = by_id[member.run_id]
        run.requests_done, run.requests_total = done, total
        if progress is not None:
            progress(done, total, member)
        write_now()

    try:
        to_run = [member for member in plan.members if member.run_id not in kept]
        if execution.kind == "pool" or execution.resources is not None:  # real members side by side
            to_run = seed_by_seed(to_run)
        run_members(
            execution,
            to_run,
            base,
            task,
            on_progress,
            on_finish,
            stop_requested,
            on_start,
            on_place,
            folder / STUDY_FILE,
        )
    finally:  # also when leaving on an exception: study.json says what ended how
        for run in runs:
            if run.status in ("pending", "running"):
                run.status = "skipped"
                run.error = run.error or (halted[0] if halted else None)
        statuses = {run.status for run in runs}
        final = (
            "failed"
            if halted
            else "cancelled"
            if statuses & {"cancelled", "skipped"}
            else "failed"
            if statuses - {"done"}
            else "done"
        )
        result = record(final, _now())
        if created:
            write_study(folder / STUDY_FILE, result)
    return StudyResult(plan.study_id, folder, result)


# -- reading and showing ---------------------------------------------------------------------------
def read_study(folder: Path) -> StudyRecord:
    """study.json of ``folder`` as its :class:`StudyRecord`, checked for the fields the CLI and
    pages read (SchedlabError, one line, naming the file and the field otherwise), with the live
    status of a running study (:func:`_with_live_status`)."""
    path = folder / STUDY_FILE
    data = read_json_file(path)
    if not isinstance(data, dict):
        raise SchedlabError(f"{path}: expected a JSON object (a study record)")
    field_kinds: tuple[tuple[str, type], ...] = (
        ("study_id", str),
        ("baseline", str),
        ("runs", list),
        ("statistics", dict),
    )
    for key, kind in field_kinds:
        if not isinstance(data.get(key), kind):
            raise SchedlabError(f"{path}: '{key}' is missing or not a {kind.__name__}; expected a study record")
    item_kinds: tuple[tuple[str, type], ...] = (("schedulers", str), ("seeds", int), ("runs", dict))
    for key, kind in item_kinds:
        items = data.get(key, [])
        if not isinstance(items, list) or not all(
            isinstance(item, kind) and not isinstance(item, bool) for item in items
        ):
            raise SchedlabError(f"{path}: '{key}' is not a list of {kind.__name__}; expected a study record")
    rates = data.get("rates", [])
    if not isinstance(rates, list) or not all(
        isinstance(rate, (int, float)) and not isinstance(rate, bool) for rate in rates
    ):
        raise SchedlabError(f"{path}: 'rates' is not a list of numbers; expected a study record")
    if data.get("schema_version") not in STUDY_SCHEMA_VERSIONS_READ:
        raise SchedlabError(
            f"{path}: schema_version {data.get('schema_version')!r}; this schedlab reads "
            + " and ".join(map(str, STUDY_SCHEMA_VERSIONS_READ))
        )
    try:  # strict: a value of another type is refused, never converted ("3" is no seed)
        record = StudyRecord.model_validate(data, strict=True)
    except ValidationError as exc:
        raise SchedlabError(f"{path}: {_validation_problem(exc)}; expected a study record") from None
    return _with_live_status(record, folder.parent)


#: The members of a union that pydantic names last in an error's location (a number is int | float).
NUMBER_UNION_TAGS = ("int", "float")


def _validation_problem(exc: ValidationError) -> str:
    """The first field of a study.json that does not fit :class:`StudyRecord`, in one line:
    ``'runs[0].seed' is '3': input should be a valid integer``."""
    error = exc.errors()[0]
    loc, message = list(error["loc"]), error["msg"]
    if loc and loc[-1] in NUMBER_UNION_TAGS:  # int | float: the value is no number at all
        loc, message = loc[:-1], "Input should be a number"
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".") or "the record"
    return f"'{where}' is {shortened(repr(error.get('input')), 80)}: {message[:1].lower()}{message[1:]}"


def study_error(record: StudyRecord) -> str | None:
    """Why a study read by :func:`read_study` did not finish as recorded (an ``interrupted``
    study: its process is gone, and how to resume it); None otherwise. Never written to
    study.json."""
    error = (record.model_extra or {}).get("error")
    return error if isinstance(error, str) else None


def _with_live_status(record: StudyRecord, base: Path) -> StudyRecord:
    """``record`` with the status its members and writer give it now (nothing is written): a
    ``running`` study whose writing process is gone is ``interrupted`` (with ``error`` saying
    so, :func:`study_error`), and each member still listed ``pending`` or ``running`` whose
    folder exists takes its folder's status (``done``, ``running``, ``interrupted`` ...), since
    study.json is rewritten at most once a second and not at all after a crash. Members without
    a folder stay pending."""
    if record.status != "running":
        return record
    writer = record.writer.model_dump(mode="python", exclude_unset=True) if record.writer is not None else None
    gone = writer_gone({"status": "running", "writer": writer})
    if gone is not None:
        record = record.model_copy(
            update={
                "status": INTERRUPTED,
                "error": f"{gone}; resume it with 'python -m runners run --resume {record.study_id}'",
            }
        )
    for run in record.runs:
        run_id = run.run_id
        if run.status not in ("pending", "running") or not isinstance(run_id, str):
            continue
        if not RUN_ID_PATTERN.match(run_id) or not os.path.lexists(base / run_id):
            continue
        member = inspect_run(base / run_id)
        run.status = member.status
        run.error = member.error or member.problem
    return record


def study_table(record: StudyRecord, keys: Iterable[str] = STUDY_HEADLINE_KEYS) -> list[list[str]]:
    """Rows (header first) of the study's headline: per metric and scheduler, the mean with its
    95% interval over seeds; for each non-baseline scheduler the paired difference with the
    baseline, its interval, seeds won and the verdict."""
    catalog = {metric.key: metric for metric in RUN_METRICS}
    rows = [
        [
            "metric",
            "scheduler",
            "n",
            "mean [95% CI]",
            f"diff vs {record.baseline} [95% CI]",
            "rel. change [95% CI]",
            "wins",
            "verdict",
        ]
    ]
    for key in keys:
        metric = catalog.get(key)
        entry = record.statistics.get(key)
        if metric is None or entry is None:
            continue
        for name in record.schedulers or list(entry.schedulers):
            stats = entry.schedulers.get(name) or SeedSummary()
            interval = metric.format_interval(stats.ci_low, stats.ci_high)
            cells = [
                metric.label,
                oracle_name(record, name),
                str(stats.n),
                f"{metric.format(stats.mean)} {interval}",
            ]
            pair = entry.vs_baseline.get(name)
            if pair is not None:
                dropped = f" ({pair.dropped} dropped)" if pair.dropped else ""
                cells += [
                    f"{metric.format_change(pair.diff_mean)} {metric.format_change_interval(pair.ci_low, pair.ci_high)}",
                    relative_text(pair.relative, metric),
                    f"{pair.wins}/{pair.n_pairs}{dropped}",
                    str(pair.verdict),
                ]
            else:
                cells += ["(baseline)" if name == record.baseline else "(describes the setting)", "", "", ""]
            rows.append(cells)
    return rows


def relative_text(relative: RelativeChange | None, metric: Metric | None = None) -> str:
    """``+12.3% [4.1, 20.5]`` from a comparison's ``relative`` entry; ``-`` when it has none. With
    the ``metric`` it changes, the interval is cut to what the change can be (``[-100.0,
    -20.5]*``: :meth:`runners.metrics.catalog.Metric.relative_interval`, marked as CUT_NOTE says)."""
    if relative is None or relative.change is None:
        return "-"
    low, high, cut = (
        metric.relative_interval(relative.ci_low, relative.ci_high)
        if metric is not None
        else (relative.ci_low, relative.ci_high, False)
    )
    interval = (
        f"[{low * 100:+.1f}, {high * 100:+.1f}]" + ("*" if cut else "")
        if low is not None and high is not None
        else "[no interval]"
    )
    return f"{relative.change * 100:+.1f}% {interval}"


def study_tables(record: StudyRecord) -> list[tuple[str | None, list[list[str]]]]:
    """(title, rows) per arrival rate of a study with several (``statistics_by_rate``), else one
    table of ``statistics`` with no title."""
    by_rate = record.statistics_by_rate
    if len(by_rate) < 2:
        return [(None, study_table(record))]
    rate = Metric("rate", "rate (req/s)", True)
    return [
        (
            f"rate {rate.format(entry.rate)} req/s",
            study_table(record.model_copy(update={"statistics": entry.statistics})),
        )
        for entry in by_rate
    ]


def study_lines(record: StudyRecord) -> list[str]:
    """The text the CLI prints under a study's table: run counts and notes."""
    runs = record.runs
    counts: dict[str, int] = {}
    for run in runs:
        counts[str(run.status)] = counts.get(str(run.status), 0) + 1
    error = study_error(record)
    from runners.metrics.seed_statistics import RELATIVE_INTERVAL_NOTE

    lines = [f"study {record.status}: {error}"] if error is not None else []
    lines += [
        f"{len(runs)} runs: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
        "intervals: Student t 95% over seeds; diff = scheduler - baseline per seed (paired); "
        "wins = seeds where the scheduler is better; a difference of percentages is in percentage points; "
        f"rel. change = mean / baseline mean - 1, {RELATIVE_INTERVAL_NOTE}",
    ]
    for name, sentences in (record.oracles or {}).items():
        lines += [f"{name} used an {sentence}" for sentence in sentences]
    lines += placement_notes(record)
    troubled = [run for run in runs if run.status not in ("done", "pending") and run.error]
    for run in troubled[:LISTED_PROBLEMS]:
        error = shortened(str(run.error).removeprefix(f"{run.status}: "), 300)
        lines.append(f"  {run.run_id}: {run.status}: {error}")
    if len(troubled) > LISTED_PROBLEMS:
        lines.append(
            f"  ... and {len(troubled) - LISTED_PROBLEMS:,} more runs that did not finish done (see study.json)"
        )
    if len(record.seeds) == 1:
        from runners.metrics.seed_statistics import SINGLE_SEED_NOTE

        lines.append(SINGLE_SEED_NOTE)
    return lines


def _decision_table(folder: Path) -> pd.DataFrame | None:
    """The columns of a member's requests.parquet that record its decisions; None when unreadable."""
    import pandas as pd
    import pyarrow as pa

    from runners.metrics.contention import DECISION_COLUMNS

    try:
        return pd.read_parquet(folder / "requests.parquet", columns=["request_id", *DECISION_COLUMNS])
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None


def identical_decisions_note(root: str | Path, record: StudyRecord) -> str | None:
    """A sentence when the schedulers of the study made identical decisions (identical per-request
    dispatch, first-token and finish times) at every seed and rate where several finished; at
    some of them only, how many. None when they differed everywhere or nothing can be compared.
    Member runs are found by the exact ids study.json lists, inside ``root`` only."""
    from runners.metrics.contention import identical_decisions, identical_decisions_message

    base = results_folder(root)
    groups: dict[tuple[int | None, float | None], list[str]] = {}
    for run in record.runs:
        if run.status == "done" and isinstance(run.run_id, str) and RUN_ID_PATTERN.match(run.run_id):
            groups.setdefault((run.seed, run.rate), []).append(run.run_id)
    compared = identical = 0
    summaries: list[dict[str, Any]] = []  # the files as they are (runners.metrics.contention reads mappings)
    for run_ids in groups.values():
        folders = [base / run_id for run_id in run_ids if (base / run_id).is_dir() and not (base / run_id).is_symlink()]
        tables = [table for folder in folders if (table := _decision_table(folder)) is not None]
        if len(tables) < 2:
            continue
        compared += 1
        if identical_decisions(tables):
            identical += 1
            for folder in folders:
                try:
                    summaries.append(read_json_file(folder / "summary.json"))
                except SchedlabError:
                    continue
    if not identical:
        return None
    message = identical_decisions_message([s for s in summaries if isinstance(s, dict)], True)
    if identical == compared:
        return message
    return f"at {identical} of {compared} seeds the schedulers made identical decisions; " + (
        message or ""
    ).removeprefix("these runs made identical decisions: ")


def delete_study(root: str | Path, study_id: str) -> list[Path]:
    """Delete study ``study_id`` (its exact id, a folder directly inside the results folder holding
    study.json only): first each member run study.json lists (ids that start with
    ``<study_id>-``, each checked as ``delete`` checks a run id; members already gone are
    skipped), then the study folder. Returns the deleted folders. SchedlabError, before anything
    is deleted, when a member is still running or the folder is not a study's."""
    from runners.store.result_store import deletable_run_folder, delete_run, inspect_run

    if not isinstance(study_id, str) or not RUN_ID_PATTERN.match(study_id):
        raise SchedlabError(
            f"delete: {study_id!r} is not a study id; expected the exact id of a study in the results "
            "folder, never a path or pattern"
        )
    base = results_folder(root)
    folder = base / study_id
    if folder.is_symlink() or not folder.is_dir() or folder.resolve().parent != base:
        raise SchedlabError(f"delete: {folder} is not a study folder inside {base}")
    extra = sorted(entry.name for entry in folder.iterdir() if entry.name != STUDY_FILE)
    if extra:
        raise SchedlabError(
            f"delete: {folder} holds {extra[0]!r} besides {STUDY_FILE}; not a study folder schedlab "
            "wrote, so it is left alone"
        )
    record = read_study(folder)
    members = []
    for run in record.runs:
        run_id = run.run_id
        if not isinstance(run_id, str) or not run_id.startswith(f"{study_id}-") or not RUN_ID_PATTERN.match(run_id):
            raise SchedlabError(
                f"delete: {folder / STUDY_FILE} lists {run_id!r}, not a member id of this study "
                f"(expected '{study_id}-...'); nothing deleted"
            )
        if os.path.lexists(base / run_id):
            members.append(run_id)
    for run_id in members:  # every member checked before any is deleted: all or nothing
        try:
            deletable_run_folder(base, run_id)
        except SchedlabError as exc:
            raise SchedlabError(f"{exc}; study {study_id!r}: nothing deleted") from None
        if inspect_run(base / run_id).status == "running":
            raise SchedlabError(
                f"delete: member run {run_id!r} is still running; stop the study first (nothing deleted)"
            )
    deleted = [delete_run(base, run_id) for run_id in members]
    (folder / STUDY_FILE).unlink()
    folder.rmdir()
    return deleted + [folder]


# -- resuming --------------------------------------------------------------------------------------
def _written_here(member: RunSummary) -> bool:
    """Whether a running member's writer is a process of this machine (else a Ray node's)."""
    import socket

    writer = member.writer
    return writer is None or writer.hostname in (None, socket.gethostname())


#: Member statuses a resumed study keeps: the member finished. A failed member (its worker or
#: node lost, its server crashed) runs again, as do interrupted, cancelled and partial ones.
KEPT_ON_RESUME = ("done",)
#: Where a resumed study puts the folders of the members it runs again (inside the results folder,
#: hidden from listings): ``.replaced/<run_id>.<UTC stamp>``. Nothing measured is deleted.
REPLACED_FOLDER = ".replaced"


@dataclass(frozen=True)
class Resume:
    """What an interrupted (or cancelled) study keeps when it is resumed: ``kept`` maps the id of
    each member that ran to its end (done or failed) to (status, error, summary or None);
    ``replaced`` lists the members whose partial folders (interrupted, cancelled, damaged,
    incomplete) were removed to run them again."""

    kept: dict[str, tuple[str, str | None, RunSummary | None]]
    created_at: str
    resumed_at: list[str]
    replaced: list[str]


def prepare_resume(root: str | Path, study_id: str) -> tuple[StudyPlan, Resume]:
    """The plan of study ``study_id`` rebuilt from its study.json (``config``: the same members,
    seeds and rates) and what it keeps (the members that finished done). ConfigError naming
    ``--resume``, before anything is moved, when the study is still running, done, recorded without
    its config (schema 1), saved without secrets it needs, or its rebuilt plan differs from the
    runs it lists, or a member's writer still runs on this machine; then the folders of the
    members to run again (failed, interrupted, cancelled, partial) are moved aside, all checked
    first, to ``.replaced/`` (:data:`REPLACED_FOLDER`). A member whose writer ran on another
    machine (a Ray node) and never finished counts as lost: the study that ran it has ended."""
    from runners.run.config import parse_config
    from runners.store.result_store import deletable_run_folder

    if not isinstance(study_id, str) or not RUN_ID_PATTERN.match(study_id):
        raise ConfigError("--resume", f"{study_id!r} is not a study id; expected the id 'python -m runners list' shows")
    base = results_folder(root)
    folder = base / study_id
    if folder.is_symlink() or not (folder / STUDY_FILE).is_file():
        raise ConfigError("--resume", f"no study {study_id!r} in {base} (a folder holding {STUDY_FILE})")
    record = read_study(folder)
    path = folder / STUDY_FILE
    if record.status == "running":
        raise ConfigError("--resume", f"study {study_id!r} is still running; resume it once its process has ended")
    if record.status == "done":
        raise ConfigError("--resume", f"study {study_id!r} is done; nothing to resume")
    stored = record.config
    if stored is None:
        raise ConfigError(
            "--resume",
            f"{path} records no config (schema_version {record.schema_version}, written before studies "
            "could be resumed); its plan cannot be rebuilt",
        )
    if "***" in json.dumps(stored.get("engine"), default=str):
        raise ConfigError(
            "--resume",
            f"{path}: the study's engine settings held secrets, which are never saved (***); run a new study instead",
        )
    try:
        plan = plan_study(parse_config(stored), study_id)
    except ConfigError as exc:
        raise ConfigError("--resume", f"{path}: its config no longer plans a study here ({exc})") from None
    planned = [member.run_id for member in plan.members]
    listed = [run.run_id for run in record.runs]
    if planned != listed:
        raise ConfigError(
            "--resume", f"{path}: the rebuilt plan ({len(planned)} runs) differs from the runs it lists ({len(listed)})"
        )
    kept: dict[str, tuple[str, str | None, RunSummary | None]] = {}
    replaced = []
    for run_id in planned:
        if not os.path.lexists(base / run_id):
            continue
        member = inspect_run(base / run_id)
        if member.status in KEPT_ON_RESUME:
            kept[run_id] = (str(member.status), member.error, member)
        elif member.status == "running" and _written_here(member):
            raise ConfigError("--resume", f"member run {run_id!r} is still running; resume once it has ended")
        else:
            replaced.append(run_id)
    if len(kept) == len(planned):
        raise ConfigError("--resume", f"every run of study {study_id!r} finished done; nothing to resume")
    for run_id in replaced:  # every folder checked before any is moved
        deletable_run_folder(base, run_id)
    stamp = id_stamp()
    for run_id in replaced:
        aside = base / REPLACED_FOLDER / f"{run_id}.{stamp}"
        aside.parent.mkdir(exist_ok=True)
        os.rename(base / run_id, aside)
    resumed = list(record.resumed_at or [])
    return plan, Resume(kept, record.created_at or _now(), resumed, replaced)
