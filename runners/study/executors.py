"""Where a study's runs execute: one at a time here, in a pool of worker processes, or on Ray.

The executors (``--executor``, config ``trials.executor``):

- ``serial``: one run after the other in this process (the default for real engines: a study
  against attached servers shares them, so one runs at a time against them);
- ``pool`` (real engines, ``--servers-per-member N`` with several ``--url``): the servers are
  dealt out in groups of N, one member per group at a time, each group's prefix caches emptied
  before a member starts where the engine offers it (vLLM ``/reset_prefix_cache`` with
  ``VLLM_SERVER_DEV_MODE=1``, SGLang ``/flush_cache``), else the member's study.json entry says
  why not (``cache_reset``);
- ``process`` (the default for a study big enough): simulator runs in a pool of worker processes
  (:class:`concurrent.futures.ProcessPoolExecutor`), ``--workers`` of them, default
  ``os.cpu_count()``. When the study names no executor, a small study runs serially instead:
  :func:`estimate_seconds` says when starting the workers would cost more than it saves. Workers are *spawned* (a fresh interpreter each, never a fork of this
  process: pyarrow's thread pools, tqdm's monitor thread and numba's runtime make a fork unsafe)
  and import only what a run needs (never streamlit). A pool of one is the serial executor;
- ``ray``: each run is a Ray task (``num_cpus=1``, never retried). ``ray.init(address=RAY_ADDRESS)``
  when the environment sets ``RAY_ADDRESS`` (a cluster), otherwise a local Ray with this
  machine's cores; a Ray already initialised by the caller is used as it is. ``ray`` is an
  optional dependency (``pip install ray``), imported only when this executor is chosen. Setting
  ``RAY_ADDRESS`` chooses it unless ``--executor`` says otherwise.

  A real-engine study on Ray (launched servers) makes each member a task holding the resources
  its servers need (``--member-resources``, default ``GPU`` = its instances; a custom resource
  such as ``gpu=1`` on a cluster that declares one): it launches its own servers on the node it
  lands on (the GPUs Ray gave it), runs, stops them (a reaper process stops them too if the task's
  worker dies), and sends its run folder back when that node does not see study.json (it lands
  whole: runners.study.cluster.land_folder). As many run at once as the cluster's resources allow.

  Limitation (simulator runs): Ray tasks write their run folders themselves, at the results folder's path as this
  process sees it. On a cluster of several machines that folder must be shared (the same path on
  every node, e.g. an NFS mount), or the runs land on the nodes that ran them and this machine's
  study.json lists runs it cannot read. schedlab must be importable on every node. Only the
  summaries come back to this process. A user's scheduler files (``SCHEDLAB_SCHEDULER_PATH``,
  ``--scheduler-path``) travel with the tasks: their text is put in Ray's object store once and
  each task registers them on its node (runners.schedulers.discovery.use_shipped_sources); a
  scheduler module or package must be installed on the nodes.

Whatever the executor, a run's results depend only on its config (the simulator is deterministic
given the seed), so a study's numbers are identical at any parallelism. This process alone
writes study.json (through ``on_finish``); the runs report their completed requests
(``on_progress``), and a stop request (``should_stop``) skips the runs not yet started and cancels
the running ones, which keep what they measured. A run that raises, or whose worker process dies,
is a failed run with the reason; the others go on (a broken process pool is replaced).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import multiprocessing.context
import os
import queue
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runners.errors import ConfigError, SchedlabError

if TYPE_CHECKING:
    from runners.store.models import RunSummary
    from runners.study.plan import StudyMember, StudyPlan

#: The executors a study can name.
EXECUTORS = ("serial", "process", "ray")
#: Most worker processes or Ray tasks at once.
MAX_WORKERS = 1024
#: Seconds between a running member's progress messages to this process (and, on Ray, between its
#: checks for a stop request): a live bar without a message per request.
REPORT_INTERVAL_S = 0.25
#: Seconds this process waits for a finished run before it looks at progress and stop requests.
POLL_S = 0.1

#: The cost model that picks serial or a process pool when the study names no executor
#: (:func:`estimate_seconds`): a spawned worker's start (a fresh interpreter importing a run's
#: modules and loading the numba kernels from their disk cache), seconds; a simulator run's fixed
#: cost (config, folder, summary), seconds; and its cost per request, seconds. Measured on the
#: project's 2-core machine by ``python -m bench.study_speed --calibrate`` (bench/results/study_speed.json).
WORKER_START_S = 1.5
RUN_FIXED_S = 0.15
PER_REQUEST_S = 2.0e-4

#: (status, summary or None, error or None) of one run, as :func:`runners.study.runner.execute_member` returns it.
Outcome = tuple[str, "RunSummary | None", "str | None"]
#: Runs one member: ``task(member, results_root, progress(done, total), should_stop) -> Outcome``;
#: a module-level function, so that a worker process can import it.
MemberTask = Callable[..., Outcome]


@dataclass(frozen=True)
class Execution:
    """How a study's runs execute: ``kind`` (serial | process | ray), ``workers`` (runs at once;
    None on Ray until it has started: the cluster's CPUs) and ``note``, one line saying so."""

    kind: str
    workers: int | None
    note: str
    resources: dict[str, float] | None = None  # Ray: what each member holds (runners.study.cluster)
    groups: list[list[str]] | None = None  # pool: the attached servers, one group per member at a time

    def record(self) -> dict[str, Any]:
        """The ``execution`` entry of study.json."""
        entry: dict[str, Any] = {"executor": self.kind, "workers": self.workers}
        if self.resources is not None:
            entry["resources"] = self.resources
        if self.groups:
            entry["servers_per_member"] = len(self.groups[0])
        return entry


def ray_installed() -> bool:
    """Whether the optional ``ray`` package can be imported (it is not imported here)."""
    return importlib.util.find_spec("ray") is not None


def choose_execution(
    plan: "StudyPlan", workers: int | None = None, executor: str | None = None, environ: Mapping[str, str] | None = None
) -> Execution:
    """The execution of ``plan``: ``workers`` and ``executor`` (CLI flags) before the plan's
    (config ``trials.workers`` / ``trials.executor``), then ``RAY_ADDRESS`` (Ray), then a process
    pool of ``os.cpu_count()`` workers, unless no executor was named and :func:`estimate_seconds`
    says the study ends sooner serially. Real engines run serially, whatever was asked. ConfigError
    for a worker count below 1, an unknown executor, or Ray asked for but not installed."""
    environ = os.environ if environ is None else environ
    workers = workers if workers is not None else plan.workers
    executor = executor if executor is not None else plan.executor  # '' is refused below, never read as unset
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS
    ):
        raise ConfigError("--workers", f"{workers!r}; expected a whole number of runs at once, 1 to {MAX_WORKERS}")
    if executor is not None and executor not in EXECUTORS:
        raise ConfigError("--executor", f"{executor!r}; expected one of: {', '.join(EXECUTORS)}")
    kinds = sorted({member.config.engine.kind for member in plan.members} - {"sim"})
    address = environ.get("RAY_ADDRESS") or None
    if kinds:
        return _real_execution(plan, workers, executor, address, kinds)
    kind = executor or ("ray" if address else "process")
    if kind == "ray":
        if not ray_installed():
            why = "RAY_ADDRESS is set" if executor is None else "--executor ray"
            raise ConfigError(
                "--executor",
                f"{why} but ray is not installed; pip install ray (the optional Ray "
                "executor), or run with --executor process",
            )
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        at_once = f"up to {workers} at once" if workers else "as many at once as it has CPUs"
        return Execution("ray", workers, f"runs as Ray tasks on {where}, {at_once}")
    count = min(workers or os.cpu_count() or 1, max(len(plan.members), 1))
    if kind == "serial" or count == 1:
        return Execution("serial", 1, "runs one at a time in this process")
    if executor is None:  # no executor named: a pool only where it beats one run after another
        serial_s, pool_s = estimate_seconds(plan, 1), estimate_seconds(plan, count)
        if pool_s >= serial_s:
            return Execution(
                "serial",
                1,
                f"runs one at a time in this process: a small study (about {serial_s:.1f} s of runs) ends "
                f"sooner than on {count} worker processes (about {pool_s:.1f} s with their start; "
                "--executor process to use them anyway)",
            )
    return Execution("process", count, f"runs on {count} worker processes")


def _real_execution(
    plan: "StudyPlan", workers: int | None, executor: str | None, address: str | None, kinds: Sequence[str]
) -> Execution:
    """A real-engine study's execution: a pool of attached servers (``trials.servers_per_member``),
    members as Ray tasks owning their servers (``--executor ray`` or ``RAY_ADDRESS``), or one
    member at a time (runners.study.cluster)."""
    from runners.study.cluster import check_placeable, member_resources, pool_groups

    groups = pool_groups(plan)
    if groups:
        if executor == "ray":
            raise ConfigError(
                "--executor", "ray and a pool of attached servers (--servers-per-member): expected one of them"
            )
        at_once = min(len(groups), workers or len(groups))
        return Execution(
            "pool",
            at_once,
            f"runs on a pool of {len(groups)} attached server groups of {len(groups[0])}, {at_once} members at once",
            groups=groups[:at_once] if at_once < len(groups) else groups,
        )
    if (executor == "ray" or (executor is None and address)) and "openai" not in kinds:
        if not ray_installed():
            raise ConfigError("--executor", "ray is not installed; pip install ray (the optional Ray executor)")
        check_placeable(plan)
        resources = member_resources(plan)
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        held = ", ".join(f"{name}={amount:g}" for name, amount in resources.items())
        how_many = f"up to {workers} at once" if workers else "as many at once as its resources allow"
        return Execution(
            "ray",
            workers,
            f"real engine ({', '.join(kinds)}): each member a Ray task on {where} launching its own servers, "
            f"holding {held}, {how_many}",
            resources=resources,
        )
    asked = " (--workers and --executor do not apply)" if (workers or 1) > 1 or executor not in (None, "serial") else ""
    if asked and "openai" in kinds:
        asked = " (--workers and --executor do not apply; --servers-per-member N deals its servers out as a pool)"
    return Execution("serial", 1, f"real engine ({', '.join(kinds)}): runs one at a time against its servers{asked}")


def _member_seconds(member: "StudyMember") -> float:
    """Estimated wall seconds of one simulator run: :data:`RUN_FIXED_S` + :data:`PER_REQUEST_S`
    a request, and at least its arrivals' span over the pace when the simulator is paced (a paced
    run waits, so it gains from a pool even when it costs little CPU)."""
    from runners.workload.arrivals import RATE_PROCESSES

    workload = member.config.workload
    seconds = RUN_FIXED_S + PER_REQUEST_S * workload.requests
    pace = getattr(member.config.engine, "pace", None)
    arrival = workload.arrival
    if pace and arrival.process in RATE_PROCESSES and arrival.rate:
        seconds = max(seconds, workload.requests / arrival.rate / pace)
    return seconds


def estimate_seconds(plan: "StudyPlan", workers: int) -> float:
    """Estimated wall seconds of ``plan``'s simulator runs on ``workers`` (1: one after the other
    in this process; more: a pool of spawned workers, each paying :data:`WORKER_START_S` once,
    the runs spread evenly but never shorter than the longest run), from :data:`RUN_FIXED_S` and
    :data:`PER_REQUEST_S`, or a paced run's arrival span over its pace (:func:`_member_seconds`)."""
    costs = [_member_seconds(member) for member in plan.members]
    if not costs:
        return 0.0
    if workers <= 1:
        return sum(costs)
    return WORKER_START_S + max(sum(costs) / min(workers, len(costs)), max(costs))


def run_members(
    execution: Execution,
    members: Iterable["StudyMember"],
    results_root: Path,
    task: MemberTask,
    on_progress: Callable[["StudyMember", int, int], None],
    on_finish: Callable[["StudyMember", Outcome], None],
    should_stop: Callable[[], bool] | None = None,
    on_start: Callable[[], None] | None = None,
    on_place: Callable[["StudyMember", Placement], None] | None = None,
    study_file: Path | None = None,
) -> None:
    """Run ``members`` as ``execution`` says, calling (in this process, in its thread)
    ``on_place(member, placement)`` when a member starts somewhere, ``on_progress(member, done,
    total)`` as their requests complete and ``on_finish(member, outcome)`` once per member, in the
    order they end: ``("skipped", None, None)`` for one a stop request kept from starting.
    ``on_start()`` runs once the executor is ready (Ray reached), before any member starts.
    ``study_file``: the study's study.json, which a Ray member looks for to know whether its node
    shares the results folder (runners.study.cluster). SchedlabError when Ray cannot be started
    or reached, or cannot hold a real-engine member."""
    stopped = lambda: bool(should_stop and should_stop())  # noqa: E731
    placed = on_place or (lambda member, placement: None)
    members = list(members)
    if execution.kind == "serial":
        if on_start is not None:
            on_start()
        for member in members:
            if stopped():
                on_finish(member, ("skipped", None, None))
                continue
            placed(member, Placement(member.run_id, _here(), os.getpid()))
            on_finish(
                member,
                task(member, results_root, lambda done, total, m=member: on_progress(m, done, total), should_stop),
            )
        return
    backend: _Backend
    if execution.kind == "process":
        backend = _ProcessBackend(execution.workers or 1, results_root, task)
    elif execution.kind == "pool":
        backend = _PoolBackend(execution.groups or [], results_root, task)
    else:
        backend = _RayBackend(execution.workers, results_root, task, execution.resources, study_file)
    try:
        if on_start is not None:
            on_start()
        _drive(backend, members, on_progress, on_finish, stopped, placed)
    finally:
        backend.close()


@dataclass(frozen=True)
class Placement:
    """Where a member started: ``where`` (the machine's hostname, or an attached pool's server
    URLs), the ``pid`` that runs it (None when unknown) and, on a pool, ``cache_note``: why its
    servers' prefix caches could not be emptied first (None when they were)."""

    run_id: str
    where: str
    pid: int | None = None
    cache_note: str | None = None


def _here() -> str:
    import socket

    return socket.gethostname()


# -- the loop all pools share ----------------------------------------------------------------------
class _Backend:
    """Runs members somewhere else. ``workers``: runs at once; ``submit`` starts one;
    ``collect`` waits up to ``timeout`` s and returns the (member, outcome) of those that ended
    (and puts back in ``retry`` any that never started because the pool broke); ``progress``
    drains (run_id, done, total) reports; ``stop`` asks every running member to stop."""

    workers: int

    def submit(self, member: "StudyMember") -> None:
        raise NotImplementedError

    def collect(self, timeout: float, retry: deque) -> list[tuple["StudyMember", Outcome]]:
        raise NotImplementedError

    def progress(self) -> list[tuple[str, int, int]]:
        raise NotImplementedError

    def running(self) -> int:
        raise NotImplementedError

    def placements(self) -> list[Placement]:
        """The members that started since the last call, and where."""
        return []

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _drive(
    backend: _Backend,
    members: list["StudyMember"],
    on_progress: Callable[["StudyMember", int, int], None],
    on_finish: Callable[["StudyMember", Outcome], None],
    stopped: Callable[[], bool],
    on_place: Callable[["StudyMember", Placement], None],
) -> None:
    """Keep at most ``backend.workers`` members in flight (so each submitted one runs at once, and
    a stop request leaves none queued), pass placements, progress and outcomes on, honour a stop
    request."""
    pending = deque(members)
    by_id = {member.run_id: member for member in members}
    halted = False
    while pending or backend.running():
        if not halted and stopped():
            halted = True
            backend.stop()
        if halted:
            while pending:
                on_finish(pending.popleft(), ("skipped", None, None))
        while pending and backend.running() < backend.workers:
            backend.submit(pending.popleft())
        finished = backend.collect(POLL_S, pending)
        for placement in backend.placements():
            if placement.run_id in by_id:
                on_place(by_id[placement.run_id], placement)
        for run_id, done, total in backend.progress():
            if run_id in by_id:
                on_progress(by_id[run_id], done, total)
        for member, outcome in finished:
            on_finish(member, outcome)


class _Reporter:
    """A running member's ``progress(done, total)``: sends ``(run_id, done, total)`` through
    ``send`` at most every :data:`REPORT_INTERVAL_S`, and always the last."""

    def __init__(self, run_id: str, send: Callable[[tuple[str, int, int]], None]) -> None:
        self.run_id, self.send, self.last = run_id, send, 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - self.last >= REPORT_INTERVAL_S:
            self.last = now
            self.send((self.run_id, done, total))


# -- process pool ----------------------------------------------------------------------------------
class _SpawnContext(multiprocessing.context.SpawnContext):
    """The spawn start method, keeping the worker processes it starts so that their exit codes
    can be read after the pool broke (which worker died on its own, which were stopped with it)."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[multiprocessing.context.SpawnProcess] = []

    # typeshed declares Process as the SpawnProcess class itself; the pool only calls it, so a
    # factory method of the same call signature stands in for it
    def Process(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> multiprocessing.context.SpawnProcess:
        process = multiprocessing.context.SpawnProcess(*args, **kwargs)
        self.started.append(process)
        return process


_worker_channel: dict[str, Any] = {}


def _init_worker(messages: Any, stop: Any) -> None:
    """A pool worker's start: Ctrl-C reaches the whole terminal's process group, and only the
    parent decides what it means (it sets ``stop``), so the worker ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_channel.update(messages=messages, stop=stop)


def _process_task(member: "StudyMember", results_root: Path, task: MemberTask) -> Outcome:
    """Runs in a pool worker: say which process runs ``member``, then run it, reporting progress
    and stopping when the parent's stop event is set."""
    messages, stop = _worker_channel["messages"], _worker_channel["stop"]
    if stop.is_set():
        return "skipped", None, None
    messages.put(("start", member.run_id, os.getpid(), _here()))
    return task(
        member, results_root, _Reporter(member.run_id, lambda report: messages.put(("progress", *report))), stop.is_set
    )


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _ProcessBackend(_Backend):
    """A :class:`ProcessPoolExecutor` of spawned workers, replaced when it breaks."""

    def __init__(self, workers: int, results_root: Path, task: MemberTask) -> None:
        self.workers, self.results_root, self.task = workers, results_root, task
        self.context = _SpawnContext()
        self.messages = self.context.Queue()
        self.stop_event = self.context.Event()
        self.pool: ProcessPoolExecutor | None = None
        self.futures: dict[Future, "StudyMember"] = {}
        self.pids: dict[str, int] = {}  # run_id -> pid of the worker running it
        self.reports: list[tuple[str, int, int]] = []
        self.requeued: set[str] = set()
        self.pool_pids: set[int] = set()  # workers of the current pool that started a run
        self.silent_breaks = 0  # pools in a row that broke before any of their workers started a run
        self.unstartable: str | None = None  # why no worker process can start a run: later members fail at once
        self.refused: list[tuple["StudyMember", Outcome]] = []
        self.stranded: list["StudyMember"] = []  # submitted to a pool that had just broken: never started
        self.placed: list[Placement] = []

    def submit(self, member: "StudyMember") -> None:
        if self.unstartable:
            self.refused.append((member, ("failed", None, self.unstartable)))
            return
        if self.pool is None:
            self.context.started.clear()
            self.pool_pids = set()
            self.pool = ProcessPoolExecutor(
                self.workers,
                mp_context=self.context,
                initializer=_init_worker,
                initargs=(self.messages, self.stop_event),
            )
        try:
            self.futures[self.pool.submit(_process_task, member, self.results_root, self.task)] = member
        except BrokenProcessPool:  # it broke since the last look: settled in collect, this one retried
            self.stranded.append(member)

    def running(self) -> int:
        return len(self.futures) + len(self.refused) + len(self.stranded)

    def _drain(self) -> None:
        while True:
            try:
                message = self.messages.get_nowait()
            except queue.Empty:
                return
            if message[0] == "start":
                self.pids[message[1]] = message[2]
                self.pool_pids.add(message[2])
                self.placed.append(Placement(message[1], message[3], message[2]))
            else:
                self.reports.append(tuple(message[1:]))

    def progress(self) -> list[tuple[str, int, int]]:
        self._drain()
        reports, self.reports = self.reports, []
        return reports

    def placements(self) -> list[Placement]:
        self._drain()
        placed, self.placed = self.placed, []
        return placed

    def collect(self, timeout: float, retry: deque) -> list[tuple["StudyMember", Outcome]]:
        if self.refused:
            refused, self.refused = self.refused, []
            return refused
        done = wait(list(self.futures), timeout=timeout, return_when=FIRST_COMPLETED)[0] if self.futures else set()
        finished: list[tuple["StudyMember", Outcome]] = []
        broken = bool(self.stranded)
        for future in done:
            member = self.futures.pop(future)
            error = future.exception()
            if isinstance(error, BrokenProcessPool):
                broken = True
                self.futures[future] = member  # settled below with every member of the broken pool
            elif error is not None:
                finished.append((member, ("failed", None, f"{type(error).__name__}: {error}")))
            else:
                finished.append((member, future.result()))
        if broken:
            finished += self._broken(retry)
        return finished

    def _broken(self, retry: deque) -> list[tuple["StudyMember", Outcome]]:
        """The pool broke (a worker process died): shut it down, read which worker died on its own
        (the pool stops the others with SIGTERM), and settle every member it held: the one whose
        worker died failed; the ones stopped with it failed too (their folders keep what they
        measured, marked interrupted); one that never started goes back to ``retry`` (once)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._drain()
        retry.extendleft(reversed(self.stranded))
        self.stranded.clear()
        codes = {process.pid: process.exitcode for process in self.context.started}
        futures, self.futures = self.futures, {}
        finished: list[tuple["StudyMember", Outcome]] = []
        members = []
        for future, member in futures.items():  # one may have ended well just before the break
            if future.done() and not future.cancelled() and future.exception() is None:
                finished.append((member, future.result()))
            else:
                members.append(member)
        self.silent_breaks = 0 if self.pool_pids else self.silent_breaks + 1
        if self.silent_breaks >= 2:  # twice no worker started a run: they cannot start at all
            code = next((code for code in codes.values() if code != -signal.SIGTERM), None)
            self.unstartable = (
                f"no worker process could start a run (the first ended with {_exit_text(code)}); a "
                "script that runs a study must keep its main code under "
                "if __name__ == '__main__': (workers are spawned and import it)"
            )
        died = {m.run_id: codes.get(self.pids.get(m.run_id)) for m in members if m.run_id in self.pids}
        culprits = [run_id for run_id, code in died.items() if code != -signal.SIGTERM]
        for member in members:
            run_id = member.run_id
            if self.unstartable:
                finished.append((member, ("failed", None, self.unstartable)))
                continue
            if run_id not in died and not os.path.lexists(Path(self.results_root) / run_id):
                if run_id not in self.requeued:  # it never started: once more, in the next pool
                    self.requeued.add(run_id)
                    retry.appendleft(member)
                    continue
                error = "the worker process pool broke before this run started"
            elif run_id in culprits:
                error = (
                    f"its worker process (pid {self.pids[run_id]}) died ({_exit_text(died[run_id])}: crashed, "
                    "killed or out of memory); what it measured is in its folder"
                )
            elif culprits:
                error = (
                    f"stopped when the worker process of {', '.join(culprits)} died (the process pool "
                    "stops all its workers then); what it measured is in its folder"
                )
            else:
                error = (
                    "a worker process of the pool died (crashed, killed or out of memory) while this run was in "
                    "flight; what it measured is in its folder"
                )
            finished.append((member, ("failed", None, error)))
        return finished

    def stop(self) -> None:
        self.stop_event.set()

    def close(self) -> None:
        if self.pool is not None:
            self.stop_event.set()  # only when leaving early (an exception): the runs left end cancelled
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.messages.close()


# -- a pool of attached servers --------------------------------------------------------------------
class _PoolBackend(_Backend):
    """Members of a study on attached servers, each given one free group of servers
    (runners.study.cluster.pooled) with its prefix caches emptied first, run in a process pool of
    one worker per group; a group is free again when its member ends."""

    def __init__(self, groups: list[list[str]], results_root: Path, task: MemberTask) -> None:
        self.groups = groups
        self.workers = len(groups)
        self.free = list(range(len(groups)))
        self.held: dict[str, int] = {}  # run_id -> index of its group
        self.placed: list[Placement] = []
        self.inner = _ProcessBackend(len(groups), results_root, task)

    def submit(self, member: "StudyMember") -> None:
        from runners.engines.real_config import redact_url
        from runners.study.cluster import pooled, reset_group

        index = self.free.pop(0)
        self.held[member.run_id] = index
        member = pooled(member, self.groups[index])
        note = reset_group(member)
        where = ",".join(redact_url(url) for url in self.groups[index])
        self.placed.append(Placement(member.run_id, where, None, note))
        self.inner.submit(member)

    def _release(self, run_id: str) -> None:
        if run_id in self.held:
            self.free.append(self.held.pop(run_id))

    def collect(self, timeout: float, retry: deque) -> list[tuple["StudyMember", Outcome]]:
        finished = self.inner.collect(timeout, retry)
        for member, _ in finished:
            self._release(member.run_id)
        for member in retry:  # never started (the process pool broke): its group is free again
            self._release(member.run_id)
        return finished

    def progress(self) -> list[tuple[str, int, int]]:
        return self.inner.progress()

    def placements(self) -> list[Placement]:
        self.inner.placements()  # the workers' own (their host) say less than the servers used
        placed, self.placed = self.placed, []
        return placed

    def running(self) -> int:
        return self.inner.running()

    def stop(self) -> None:
        self.inner.stop()

    def close(self) -> None:
        self.inner.close()


# -- Ray -------------------------------------------------------------------------------------------
class _RayChannel:
    """A Ray actor between this process and the tasks: progress reports in, a stop flag out."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, int, int]] = []
        self.placed: list[tuple[str, str, int]] = []
        self.stopped = False

    def report(self, report: tuple[str, int, int]) -> None:
        self.reports.append(report)

    def place(self, run_id: str, where: str, pid: int) -> None:
        self.placed.append((run_id, where, pid))

    def drain_placed(self) -> list[tuple[str, str, int]]:
        placed, self.placed = self.placed, []
        return placed

    def drain(self) -> list[tuple[str, int, int]]:
        reports, self.reports = self.reports, []
        return reports

    def stop(self) -> None:
        self.stopped = True

    def is_stopped(self) -> bool:
        return self.stopped


def _ray_task(
    member: "StudyMember",
    results_root: Path,
    task: MemberTask,
    channel: Any,
    shipped: dict[str, str],
    study_file: Path | None = None,
) -> tuple[Any, ...]:
    """Runs in a Ray worker: skip when stopped before starting; report where it runs, its progress,
    and poll the stop flag at most every :data:`REPORT_INTERVAL_S`. ``shipped``: the user's
    scheduler files ({path: text}) the study's process found, registered here first (the node may
    not have them). ``study_file`` (a real-engine member): its servers get the GPUs Ray assigned
    the task, and unless this node sees that study.json (a shared results folder) the run is
    written to a scratch folder here and sent back as a fourth element, its folder's archive
    (runners.study.cluster)."""
    import ray

    if shipped:
        from runners.registry import SCHEDULERS
        from runners.schedulers.discovery import use_shipped_sources

        use_shipped_sources(shipped, SCHEDULERS)

    if ray.get(channel.is_stopped.remote()):
        return "skipped", None, None
    checked, stopped = 0.0, False

    def should_stop() -> bool:
        nonlocal checked, stopped
        now = time.monotonic()
        if not stopped and now - checked >= REPORT_INTERVAL_S:
            checked = now
            stopped = bool(ray.get(channel.is_stopped.remote()))
        return stopped

    reporter = _Reporter(member.run_id, lambda report: channel.report.remote(report))
    channel.place.remote(member.run_id, _here(), os.getpid())
    if study_file is None:
        return task(member, results_root, reporter, should_stop)
    import shutil
    import tempfile

    from runners.study.cluster import pack_folder, placed

    member = placed(member, [str(gpu) for gpu in ray.get_gpu_ids()])
    if Path(study_file).is_file():  # this node shares the head's results folder
        return task(member, results_root, reporter, should_stop)
    scratch = Path(tempfile.mkdtemp(prefix="schedlab-member-"))
    try:
        outcome = task(member, scratch, reporter, should_stop)
        folder = scratch / member.run_id
        return (*outcome, pack_folder(folder) if folder.is_dir() else None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _ray_error(error: BaseException) -> str:
    """One line for a Ray task that ended in an exception."""
    import ray.exceptions

    if isinstance(error, ray.exceptions.WorkerCrashedError):
        return "its Ray worker process died (crashed, killed or out of memory); what it measured is in its folder"
    if isinstance(error, (ray.exceptions.NodeDiedError, ray.exceptions.LocalRayletDiedError)):
        return "the Ray node it ran on was lost; what it measured is in its folder when the folder is shared"
    cause = getattr(error, "cause", None) or error
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"


class _RayBackend(_Backend):
    """Members as Ray tasks (``num_cpus=1``, ``max_retries=0``: a rerun would meet its own folder)."""

    def __init__(
        self,
        workers: int | None,
        results_root: Path,
        task: MemberTask,
        resources: dict[str, float] | None = None,
        study_file: Path | None = None,
    ) -> None:
        import ray

        self.ray = ray
        self.started_ray = not ray.is_initialized()
        if self.started_ray:
            address = os.environ.get("RAY_ADDRESS") or None
            try:
                ray.init(
                    address=address,
                    include_dashboard=False,
                    log_to_driver=False,
                    num_cpus=None if address else os.cpu_count() or 1,  # None: the cluster's own
                )
            except Exception as exc:
                lines = str(exc).strip().splitlines()
                where = f"the Ray cluster at RAY_ADDRESS={address}" if address else "a local Ray"
                raise SchedlabError(
                    f"--executor ray: could not start or reach {where}: {type(exc).__name__}: "
                    f"{lines[0] if lines else ''}"
                ) from exc
        self.results_root, self.task = results_root, task
        self.study_file = study_file if resources is not None else None
        if resources is not None:  # a real-engine member: as many at once as the resources allow
            from runners.study.cluster import ray_options, slots

            try:
                fit = slots(ray.cluster_resources(), resources)
            except SchedlabError:
                self.close_ray()
                raise
            self.workers = min(workers or fit, fit)
            options = ray_options(resources)
        else:
            self.workers = workers or max(int(ray.cluster_resources().get("CPU", 1)), 1)
            options = {"num_cpus": 1}
        # Any: Ray types an actor handle's methods as the plain functions, without their .remote
        self.channel: Any = ray.remote(num_cpus=0)(_RayChannel).remote()
        self.remote_task = ray.remote(max_retries=0, **options)(_ray_task)
        self.refs: dict[Any, "StudyMember"] = {}
        from runners.schedulers.discovery import source_files

        # the user's scheduler files travel with every task (one object in Ray's store)
        self.shipped = ray.put(source_files())

    def submit(self, member: "StudyMember") -> None:
        task = self.remote_task.remote(
            member, self.results_root, self.task, self.channel, self.shipped, self.study_file
        )
        self.refs[task] = member

    def running(self) -> int:
        return len(self.refs)

    def collect(self, timeout: float, retry: deque) -> list[tuple["StudyMember", Outcome]]:
        if not self.refs:
            return []
        ready, _ = self.ray.wait(list(self.refs), num_returns=len(self.refs), timeout=timeout)
        finished: list[tuple["StudyMember", Outcome]] = []
        for ref in ready:
            member = self.refs.pop(ref)
            try:
                finished.append((member, self._landed(member, tuple(self.ray.get(ref)))))
            except Exception as exc:
                finished.append((member, ("failed", None, _ray_error(exc))))
        return finished

    def _landed(self, member: "StudyMember", returned: tuple[Any, ...]) -> Outcome:
        """A task's outcome; a run folder sent back with it (a node without the shared results
        folder) is put in place first (runners.study.cluster.land_folder)."""
        if len(returned) == 3:
            return returned
        status, summary, error, archive = returned
        if archive is not None:
            from runners.study.cluster import land_folder

            try:
                land_folder(Path(self.results_root), member.run_id, archive)
            except (OSError, SchedlabError, ValueError) as exc:
                return "failed", None, f"its run came back from its node but could not be put in place: {exc}"
        return status, summary, error

    def progress(self) -> list[tuple[str, int, int]]:
        return [tuple(report) for report in self.ray.get(self.channel.drain.remote())]

    def placements(self) -> list[Placement]:
        return [Placement(*placed) for placed in self.ray.get(self.channel.drain_placed.remote())]

    def stop(self) -> None:
        self.ray.get(self.channel.stop.remote())

    def close(self) -> None:
        if self.refs:  # only when leaving early (an exception): the runs left end cancelled
            self.stop()
            self.ray.wait(list(self.refs), num_returns=len(self.refs))
        self.ray.kill(self.channel)
        self.close_ray()

    def close_ray(self) -> None:
        """Shut down the Ray this backend started (a Ray the caller started stays)."""
        if self.started_ray:
            self.ray.shutdown()
