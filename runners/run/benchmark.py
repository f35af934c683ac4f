"""Run one benchmark end to end: build the workload, the engine and the policy, drive them, and
keep every measurement in ``results/<run_id>/`` whatever happens."""

from __future__ import annotations

import gc
import math
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import runners
from runners.drivers.base import Driver
from runners.drivers.policy_guard import RUN_LOG, DecideGuard, policy_failure, write_run_log
from runners.drivers.virtual_time import VirtualTimeDriver
from runners.drivers.watchdog import stalled_message
from runners.engines.beliefs import InstanceBeliefs, latency_belief, simulated_beliefs
from runners.engines.latency_model import LatencyModel
from runners.engines.planning_model import PlanningModel, planning_model
from runners.engines.profile import EngineProfile, load_profile
from runners.engines.real_config import ClientOptions, LaunchOptions, redact_args
from runners.engines.sim_config import ResolvedSimulator, SimulatorConfig
from runners.engines.simulator import SimulatedInstance
from runners.errors import ConfigError, RunCancelled, RunStopped
from runners.metrics.run_metrics import distribution
from runners.registry import check_engine_for, make_policy
from runners.run.config import RunConfig, config_record
from runners.run.knowledge import run_oracles
from runners.schedulers.base import PolicyParams, PolicyStalled, SchedulerPolicy
from runners.schedulers.predictors import calibration_moments
from runners.store.models import ENGINE_RECORD_SCHEMA_VERSION, EngineRecord, RunSummary
from runners.store.recording import RunRecorder
from runners.store.result_store import DEFAULT_RESULTS_DIR, RunWriter, write_record
from runners.store.run_ids import new_run_id
from runners.timestamps import utc_stamp
from runners.workload.arrivals import RATE_PROCESSES
from runners.workload.builder import Workload, build_workload
from runners.workload.slo import TaskSLO

if TYPE_CHECKING:  # a simulator run imports neither the HTTP client (aiohttp) nor the vLLM plugin
    from runners.drivers.wall_clock import WallClockDriver
    from runners.engines.real_engine import RealEngine

#: Longest wall time (seconds) finished rows and telemetry samples wait in memory before they reach
#: the run folder, where the dashboard's live view reads them: a run at 100x pace lasts about a
#: second, so every run (a study's members too) streams at least this often.
LIVE_FLUSH_S = 0.5


@dataclass
class PreparedRun:
    config: RunConfig
    simulator: ResolvedSimulator | None
    latency: LatencyModel | None
    workload: Workload
    slos: dict[str, TaskSLO]
    tokenization: dict[str, Any] | None = None  # real engines: counter, context limit, what was tried
    planning: PlanningModel | None = None  # simulator: the latency model policies plan with
    real_profile: EngineProfile | None = None  # real engines: engine.profile, read once


@dataclass
class RunOutcome:
    run_id: str
    folder: Path
    status: str
    summary: RunSummary
    error: str | None = None


def prepare_run(config: RunConfig) -> PreparedRun:
    """Resolve the engine, build the workload with its SLOs, and check the cache can hold it."""
    if not isinstance(config.engine, SimulatorConfig):
        from runners.engines.real_engine import check_api_key

        check_api_key(config.engine)
    check_engine_for(config.scheduler.name, config.engine.kind)
    simulator = config.engine.resolve() if isinstance(config.engine, SimulatorConfig) else None
    latency = simulator.latency if simulator else None
    real_profile = load_profile(config.engine.profile) if simulator is None and config.engine.profile else None
    if real_profile is not None:
        latency = real_profile.latency_model()
    resolved: dict[str, TaskSLO] = {}

    def slos_for(workload: Workload) -> dict[str, TaskSLO]:
        alone = {}
        if latency is not None:
            for task in ("chat", "code"):
                means = workload.mean_lengths(task)
                if means is not None:
                    alone[task] = latency.alone_latency(means[0], round(means[1]))[1]
        elif config.slo.preset == "auto":
            raise ConfigError(
                "slo.preset",
                "'auto' needs a latency model: set engine.profile to a profile file from 'python -m runners profile'",
            )
        try:
            resolved.update(config.slo.resolve(alone))
        except ValueError as exc:
            raise ConfigError("slo.preset", str(exc)) from exc
        return resolved

    tokenization = None
    if simulator is None:  # real servers: their tokenizer and their context limit
        from runners.engines.real_engine import resolve_tokenization

        tokenization = resolve_tokenization(config.engine, config.workload.tokenizer)
        workload = build_workload(config.workload, slos_for, tokenization.counter, tokenization.context)
    else:
        workload = build_workload(config.workload, slos_for)
    if simulator is not None:
        largest = max(workload.requests, key=lambda r: r.total_tokens)
        if largest.total_tokens > simulator.kv_capacity_tokens:
            raise ConfigError(
                "engine.kv_capacity_tokens",
                f"the KV cache holds {simulator.kv_capacity_tokens} tokens but request {largest.request_id} needs "
                f"{largest.total_tokens} (prompt + output); expected a cache of at least one whole request",
            )
    planning = None
    if simulator is not None:
        engine = config.engine
        assert isinstance(engine, SimulatorConfig)
        planning = planning_model(
            simulator.latency,
            simulator.kv_capacity_tokens,
            simulator.block_size,
            simulator.max_num_seqs,
            simulator.max_num_batched_tokens,
            engine.planning_model,
            engine.planning_error,
            config.workload.seed,
            max(r.input_tokens for r in workload.requests),
        )
    return PreparedRun(
        config,
        simulator,
        latency,
        workload,
        resolved,
        tokenization.record if tokenization is not None else None,
        planning,
        real_profile,
    )


def _config_record(prepared: PreparedRun, oracles: list[str]) -> dict[str, Any]:
    config = prepared.config
    resolved: dict[str, Any] = {
        "slos": {task: slo.model_dump(exclude_none=True) for task, slo in prepared.slos.items()},
        "workload_reports": prepared.workload.reports,
        "workload_synthetic": prepared.workload.synthetic,
    }
    resolved["knowledge"] = {
        "oracle": oracles,
        "calibration": {
            task: {"count": moments.count, "mean": moments.mean, "std": moments.std}
            for task, moments in calibration_moments(prepared.workload.calibration).items()
        },
        "planning_model": prepared.planning.record() if prepared.planning is not None else None,
    }
    if prepared.tokenization is not None:  # read from the servers: scrubbed of the key they were sent
        from runners.engines.openai_client import scrub
        from runners.engines.real_engine import config_secrets

        resolved["tokenization"] = scrub(prepared.tokenization, config_secrets(config.engine))
    simulator = prepared.simulator
    if prepared.real_profile is not None:  # the profile a real run's policy plans with, its fit and quality
        resolved["engine_profile"] = prepared.real_profile.model_dump(mode="json", by_alias=True, exclude_none=True)
    if simulator is not None:
        resolved.update(
            engine_profile=simulator.profile.model_dump(mode="json", by_alias=True, exclude_none=True),
            kv_capacity_tokens=simulator.kv_capacity_tokens,
            block_size=simulator.block_size,
            max_num_seqs=simulator.max_num_seqs,
            max_num_batched_tokens=simulator.max_num_batched_tokens,
        )
    return {
        "config": config_record(config),  # secrets (HF_TOKEN-like engine.env, --api-key ...) written as ***
        "resolved": resolved,
        "versions": {
            "schedlab": runners.__version__,
            "engine": f"schedlab-simulator {runners.__version__}" if simulator else config.engine.kind,
            "python": platform.python_version(),
        },
    }


def _engine_with_scheduler(
    config: RunConfig, policy: SchedulerPolicy, folder: Path, latency: LatencyModel | None = None
) -> Any:
    """The engine config to launch: with an in-engine scheduler, its ``--scheduler-cls`` and the
    server environment that hands it its parameters and a decisions file in the run folder. The
    run's ``latency`` model (from engine.profile) goes into the parameters of a class that plans
    with one (engine-slo-sa); ConfigError before the server starts when it has none, or when the
    engine's scheduling policy cannot carry the class's plan (see ``launch_settings``)."""
    engine = config.engine
    if not policy.in_engine:
        return engine
    from runners.schedulers.vllm import launch_settings

    if not isinstance(engine, LaunchOptions):  # check_engine_for admits in-engine schedulers on launched engines only
        raise ConfigError(
            "scheduler.name", f"{policy.name} runs inside the engine: it needs an engine schedlab launches"
        )
    scheduler_cls, env = launch_settings(
        type(policy),
        _calibrated_engine_params(
            policy.params, policy.calibration, config.workload.ratio.counts(config.workload.requests)
        ),
        folder,
        latency,
        getattr(engine, "scheduling_policy", "fcfs"),
        engine.env.get("PYTHONPATH"),
    )
    return engine.model_copy(update={"scheduler_cls": scheduler_cls, "env": {**engine.env, **env}})


def _calibrated_engine_params(
    params: PolicyParams, calibration: Mapping[str, Sequence[int]], task_counts: Mapping[str, int]
) -> PolicyParams:
    """An in-engine class's parameters as the engine reads them: output_prior ``calibration``
    (the engine does not see tasks) becomes ``given`` moments (tokens) of the calibration sample,
    each task weighted by its share of the run's requests (law of total variance); ``cold``
    where no task has a calibration sample. Other parameters unchanged."""
    from runners.schedulers.dynamic_batching import mixture_moments
    from runners.schedulers.vllm import EngineDynamicMemoryParams

    if not isinstance(params, EngineDynamicMemoryParams) or params.output_prior != "calibration":
        return params
    moments = calibration_moments(calibration)
    weights = {task: count for task, count in task_counts.items() if count and task in moments}
    if not weights:
        return params.model_copy(update={"output_prior": "cold"})
    mean, variance = mixture_moments(weights, moments, float(params.prior_output_tokens))
    return params.model_copy(update={"output_prior": "given", "output_mean": mean, "output_std": math.sqrt(variance)})


def _simulated_instances(engine: SimulatorConfig, simulator: ResolvedSimulator) -> list[SimulatedInstance]:
    """The engine's instances, each a simulated vLLM-like engine of the resolved size and speed."""
    return [
        SimulatedInstance(
            instance_id=index,
            latency=simulator.latency,
            kv_capacity_tokens=simulator.kv_capacity_tokens,
            block_size=simulator.block_size,
            max_num_seqs=simulator.max_num_seqs,
            max_num_batched_tokens=simulator.max_num_batched_tokens,
            scheduling_policy=engine.scheduling_policy,
            run_to_completion=engine.run_to_completion,
            prefix_caching=engine.prefix_caching,
        )
        for index in range(engine.instances)
    ]


def _real_planning(
    config: RunConfig,
    latency: LatencyModel | None,
    engine: RealEngine,
    max_prompt_tokens: int | None = None,
    profile: EngineProfile | None = None,
) -> PlanningModel | None:
    """The latency model a policy on real servers plans with: engine.profile's model refitted with
    a measured profile's noise on the first instance's beliefs and the workload seed, exactly as
    a simulated run from that profile gives its policy (runners.engines.planning_model), so the
    two sides plan with one model. A limit the servers did not give is the profile's. None
    without a profile."""
    if latency is None:
        return None
    beliefs = engine.instances[0].beliefs
    assert beliefs is not None

    def limit(name: str) -> int:
        value = beliefs.value(name)
        if value is None and profile is not None:
            value = profile.capacity_tokens() if name == "kv_capacity_tokens" else getattr(profile, name)
        return int(value)

    return planning_model(
        latency,
        limit("kv_capacity_tokens"),
        limit("block_size"),
        limit("max_num_seqs"),
        limit("max_num_batched_tokens"),
        "fitted",
        0.0,
        config.workload.seed,
        max_prompt_tokens,
    )


def _simulated_engine_record(engine: SimulatorConfig, beliefs: InstanceBeliefs) -> dict[str, Any]:
    """engine.json of a simulated run (version 3): one instance per simulated one, each with the
    beliefs its policy was given."""
    return {
        "schema_version": ENGINE_RECORD_SCHEMA_VERSION,
        "instances": [
            {"index": index, "kind": "sim", "beliefs": beliefs.record()} for index in range(engine.instances)
        ],
        "host": None,
    }


def _engine_record(engine: RealEngine) -> dict[str, Any]:
    """What was launched or attached (no headers: they may hold an API key; the values of
    secret-looking flags in a launch command written as ***). Every string the servers supplied
    (model id, version, kind) is scrubbed of the key they were sent, which a server may echo."""
    from runners.engines.openai_client import header_secrets, scrub

    secrets = [secret for instance in engine.instances for secret in header_secrets(instance.endpoint.headers)]
    return scrub(
        {
            "schema_version": ENGINE_RECORD_SCHEMA_VERSION,
            "instances": [
                {
                    "index": instance.index,
                    "base_url": instance.endpoint.base_url,
                    "kind": instance.endpoint.kind,
                    "model": instance.endpoint.model,
                    "api": instance.endpoint.api,
                    "version": instance.version,
                    "kv_capacity_tokens": instance.kv_capacity_tokens,
                    "block_size": instance.block_size,
                    "command": redact_args(instance.server.command) if instance.server else None,
                    "log": instance.server.log_path.name if instance.server else None,
                    "beliefs": instance.beliefs.record() if instance.beliefs is not None else None,
                    "cpu_affinity": _affinity(instance.server.process.pid)
                    if instance.server is not None and instance.server.process is not None
                    else None,
                }
                for instance in engine.instances
            ],
            "host": _launch_host(engine),
            "client_cpu_affinity": _affinity(0),
        },
        secrets,
    )


def _affinity(pid: int) -> list[int] | None:
    """The CPUs process ``pid`` (0: this one) may run on, sorted; None where the system cannot say."""
    import os

    try:
        return sorted(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        return None


def _launch_host(engine: RealEngine) -> dict[str, Any] | None:
    """Where launched servers ran (runners.engines.gpu.host_record, their GPUs as
    CUDA_VISIBLE_DEVICES gave them); None for attached servers, whose machine is not this one."""
    from runners.engines.gpu import host_record

    servers = [instance.server for instance in engine.instances if instance.server is not None]
    if not servers:
        return None
    devices = [server.env["CUDA_VISIBLE_DEVICES"] for server in servers if "CUDA_VISIBLE_DEVICES" in server.env]
    return host_record(devices or None)


def execute_run(
    config: RunConfig,
    results_root: str | Path = DEFAULT_RESULTS_DIR,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    flush_seconds: float = LIVE_FLUSH_S,
) -> RunOutcome:
    """Run ``config`` and save it. Input errors raise before anything is written; once the run
    folder exists, a failure or cancel closes it with its partial data and the reason.
    ``flush_seconds``: longest wall time finished rows wait in memory before they reach disk
    (the dashboard's live view reads them from there). ``should_stop``: polled by the driver
    before it dispatches and at least every 0.05 s (the simulator) or 0.1 s (a real engine); when
    it says yes, nothing more is dispatched, requests in flight end as cancelled and the rows
    so far are kept."""
    with _collector_skips_older_objects():
        return _execute_run(config, results_root, progress, should_stop, flush_seconds)


@contextmanager
def _collector_skips_older_objects() -> Iterator[None]:
    """Hide the objects that exist before a run (modules, classes, functions: ~160,000 once
    pandas, scipy and numba are imported) from Python's cyclic garbage collector while the run
    goes (``gc.freeze``), so a full collection, which the run's own allocations trigger, walks
    only the run's objects (a pass over everything took ~50 ms, 5% of a 10,000-request
    simulation); handed back (``gc.unfreeze``) when the run ends, so nothing stays hidden from
    the collector. Reference counting frees objects as before either way."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _execute_run(
    config: RunConfig,
    results_root: str | Path,
    progress: Callable[[int, int], None] | None,
    should_stop: Callable[[], bool] | None,
    flush_seconds: float,
) -> RunOutcome:
    prepared = prepare_run(config)
    policy = make_policy(config.scheduler.name, config.scheduler.params)
    try:
        policy.on_calibration(prepared.workload.calibration)
        policy.prepare()  # compiles its kernels now, before the clock and the decide-time limit
    except Exception as exc:  # before the run folder exists: one line, nothing written
        raise ConfigError("scheduler.name", policy_failure(policy, exc) or f"{type(exc).__name__}: {exc}") from exc
    run_id = config.run_id or new_run_id(config.scheduler.name, config.engine.kind)
    oracles = run_oracles(config)
    writer = RunWriter(
        results_root,
        run_id,
        _config_record(prepared, oracles),
        _summary_header(config, prepared, oracles),
        flush_seconds=flush_seconds,
    )
    recorder = RunRecorder(prepared.workload.requests, writer, progress)
    run = _Running(config, prepared, policy, recorder, writer, should_stop)
    status, error = "done", None
    try:
        status, error = run.drive()
    finally:  # whatever ended the run, what it measured is written
        status, error, summary = run.finish(status, error)
        writer.close(status, summary, error)
    final = RunSummary.model_validate({**writer.header, "status": status, **summary})
    return RunOutcome(run_id, writer.folder, status, final, error)


def _summary_header(config: RunConfig, prepared: PreparedRun, oracles: list[str]) -> dict[str, Any]:
    """summary.json's header: what runs, on what, when (the run's own fields follow it)."""
    return {
        "engine": config.engine.kind,
        "scheduler": config.scheduler.name,
        "workload": config.workload.label(),
        "synthetic": prepared.workload.synthetic,
        "started_at": utc_stamp(),
        "started_at_unix_s": time.time(),
        "slos": {task: slo.describe() for task, slo in prepared.slos.items()},
        # a replayed trace keeps its own times: "trace", and no rate
        "arrival_process": "trace" if config.workload.trace is not None else config.workload.arrival.process,
        # a rate only where arrivals follow one (all at once and replayed stamps have none)
        "arrival_rate_rps": (
            config.workload.arrival.rate
            if config.workload.trace is None and config.workload.arrival.process in RATE_PROCESSES
            else None
        ),
        "instances": config.engine.instances,
        "sweep_id": config.sweep_id,
        "notes": config.notes,
        "oracle": oracles,
    }


@dataclass
class _Running:
    """One run from its first request to its summary: the driver for its engine (virtual time on
    the simulator, wall clock on a real engine), how it ended, and what it measured."""

    config: RunConfig
    prepared: PreparedRun
    policy: SchedulerPolicy[Any]
    recorder: RunRecorder
    writer: RunWriter
    should_stop: Callable[[], bool] | None
    real_engine: RealEngine | None = None
    driver: Driver | None = None
    wall_driver: WallClockDriver | None = None  # the driver, when it is the wall-clock one
    wall_start: float = field(default_factory=time.perf_counter)

    def drive(self) -> tuple[str, str | None]:
        """Run the driver to its end: ("done", None), or the status and error it ended with
        (every exception is caught: what was measured is kept). An exception that came from the
        policy, or a decide past ``scheduler.decide_limit_s``, is one line naming the scheduler,
        the method and the line (runners.drivers.policy_guard); any exception's traceback goes
        to the run folder's run.log."""
        guard = DecideGuard(self.policy, self.config.scheduler.decide_limit_s)
        try:
            engine = self.config.engine
            if isinstance(engine, SimulatorConfig):
                return self._simulate(engine)
            self._serve(engine)
            return "done", None
        except (RunCancelled, KeyboardInterrupt) as exc:
            return "cancelled", str(exc) or "cancelled"
        except RunStopped as exc:
            return "failed", str(exc)
        except PolicyStalled as exc:
            return "failed", f"stalled: {self.policy.name}: {exc}"
        except Exception as exc:  # keep what was measured, then report
            reason = policy_failure(self.policy, exc, guard) or f"{type(exc).__name__}: {exc}"
            write_run_log(self.writer.folder, exc, reason)
            return "failed", f"{reason} (traceback in {RUN_LOG})"
        finally:
            guard.close()
            if self.real_engine is not None:
                self.real_engine.stop()

    def _simulate(self, engine: SimulatorConfig) -> tuple[str, str | None]:
        """The simulator in virtual time; a run whose policy stalls fails, saying so."""
        if self.prepared.simulator is None:  # prepare_run resolves every simulator config
            raise ConfigError("engine", "the simulator config was not resolved")
        planning = self.prepared.planning
        beliefs = simulated_beliefs(self.prepared.simulator, engine).with_latency(*latency_belief(planning))
        write_record(
            self.writer.folder / "engine.json",
            EngineRecord,
            _simulated_engine_record(engine, beliefs),
        )
        driver = VirtualTimeDriver(
            instances=_simulated_instances(engine, self.prepared.simulator),
            beliefs=[beliefs] * engine.instances,
            policy=self.policy,
            requests=self.prepared.workload.requests,
            recorder=self.recorder,
            sample_interval_s=self.config.sample_interval_s,
            should_stop=self.should_stop,
            max_duration_s=self.config.max_duration_s,
            pace=engine.pace,
            planning_model=self.prepared.planning.model if self.prepared.planning else None,
        )
        self.driver = driver
        result = driver.run()
        if result.stalled:
            return "failed", stalled_message(result.stalled, self.policy.name)
        return "done", None

    def _serve(self, engine: ClientOptions) -> None:
        """A real engine (launched or attached) in wall-clock time; its card in engine.json."""
        from runners.drivers.wall_clock import WallClockDriver
        from runners.engines.real_engine import RealEngine

        config, folder = self.config, self.writer.folder
        self.real_engine = RealEngine(
            config=_engine_with_scheduler(config, self.policy, folder, self.prepared.latency), log_folder=folder
        )
        self.real_engine.start(self.should_stop)
        planning = _real_planning(
            config,
            self.prepared.latency,
            self.real_engine,
            max(r.input_tokens for r in self.prepared.workload.requests),
            self.prepared.real_profile,
        )
        for instance in self.real_engine.instances:
            assert instance.beliefs is not None  # RealEngine.start sets every instance's
            instance.beliefs = instance.beliefs.with_latency(*latency_belief(planning))
        write_record(folder / "engine.json", EngineRecord, _engine_record(self.real_engine))
        self.driver = self.wall_driver = WallClockDriver(
            engine=self.real_engine,
            policy=self.policy,
            requests=self.prepared.workload.requests,
            recorder=self.recorder,
            options=engine,
            sample_interval_s=config.sample_interval_s,
            should_stop=self.should_stop,
            latency_model=planning.model if planning is not None else None,
            max_duration_s=config.max_duration_s,
        )
        self.wall_driver.run()

    def finish(self, status: str, error: str | None) -> tuple[str, str | None, dict[str, Any]]:
        """The run's final status, error and summary fields: the failure gate judged on a run
        that ran to its end, a crashed server's reasons added, unfinished requests given rows."""
        recorder = self.recorder
        now = self.driver.elapsed_s if self.driver is not None else 0.0
        # before unfinished requests get a row
        gate = failure_gate(recorder.finished_count, recorder.failed_count, self.config.max_error_rate)
        if status == "done" and recorder.all_done and gate["tripped"]:
            status, error = "failed", gate["reason"]
        else:
            gate["tripped"] = False  # judged only on a run that ran to its end
        if status == "failed" and self.real_engine is not None:
            crashes = self.real_engine.crash_reports()  # a server that crashed says why in its log
            if crashes:
                error = f"{error}\n{crashes}"
        if status != "done" or not recorder.all_done:
            recorder.fail_unfinished(status if status != "done" else "not finished", now)
        summary = recorder.summary()
        summary["failure_gate"] = {
            key: gate[key] for key in ("max_error_rate", "error_rate", "errors", "ran", "tripped")
        }
        if isinstance(self.driver, VirtualTimeDriver) and self.driver.instances[0].prefix_caching:
            instances = self.driver.instances
            queries = sum(instance.prefix_queries for instance in instances)
            summary.update(
                prefix_cache_fields(queries, sum(instance.prefix_hits for instance in instances), "simulator")
            )
        if self.wall_driver is not None:
            summary.update(_wall_clock_extras(self.wall_driver))
        summary["wall_time_s"] = time.perf_counter() - self.wall_start
        summary["finished_at"] = utc_stamp()
        return status, error, summary


def prefix_cache_fields(queries: int, hits: int, source: str) -> dict[str, Any]:
    """The summary's prefix-cache fields (schema 6): prompt tokens looked up and found (tokens,
    every instance), their ratio (None before any lookup), and where the counts come from
    (``simulator``, or ``/metrics`` for a real engine's counters)."""
    return {
        "prefix_cache_hit_rate": hits / queries if queries else None,
        "prefix_cache": {"queries_tokens": queries, "hits_tokens": hits, "source": source},
    }


def failure_gate(ran: int, errors: int, max_error_rate: float) -> dict[str, Any]:
    """The failure gate over the request rows recorded so far (``ran``: requests that ran to an end
    of their own, completed or failed; cancelled and never-sent ones have no row yet): ``errors``
    of ``ran`` failed, ``error_rate`` = errors / ran (None before any ran), ``tripped`` when it
    exceeds ``max_error_rate`` (a fraction, 0-1), with ``reason`` saying so."""
    rate = errors / ran if ran else None
    tripped = rate is not None and rate > max_error_rate
    reason = (
        f"{errors} of {ran} requests failed (error rate {rate:.3g} > max_error_rate {max_error_rate:g})"
        if tripped
        else None
    )
    return {
        "max_error_rate": max_error_rate,
        "error_rate": rate,
        "errors": errors,
        "ran": ran,
        "tripped": tripped,
        "reason": reason,
    }


def _wall_clock_extras(driver: WallClockDriver) -> dict[str, Any]:
    counters = driver.counters
    prefix: dict[str, Any] = {}
    if counters.prefix_queries is not None and counters.prefix_hits is not None:  # the engine reports them
        prefix = prefix_cache_fields(int(counters.prefix_queries), int(counters.prefix_hits), "/metrics")
    lags = np.asarray(counters.arrival_lag_s)
    scheduled = np.asarray(counters.arrival_planned_s)  # in arrival order (sessions' turns included)
    actual = scheduled + lags
    span = float(actual[-1] - actual[0]) if len(actual) > 1 else 0.0
    scheduled_span = float(scheduled[-1] - scheduled[0]) if len(scheduled) > 1 else 0.0
    return {
        "server_ttft_mean_s": counters.server_ttft_mean_s,
        "server_ttft_count": counters.server_ttft_count,
        "output_length_mismatches": counters.output_length_mismatches,
        "arrival_lag_s": distribution(lags),
        # all at once (no scheduled span) has no rate to achieve: the send spread is not one
        "achieved_arrival_rate_rps": (len(actual) - 1) / span if span > 0 and scheduled_span > 0 else None,
        "scheduled_arrival_rate_rps": (len(scheduled) - 1) / scheduled_span if scheduled_span > 0 else None,
        "failures": driver.failures,
        "resent_requests": len(counters.resent),  # dropped unanswered by the server, sent again
        "server_requests": counters.server_requests,  # sent in the measured run, re-sends included
        "client_cpu_s": counters.client_cpu_s,
        "client_cpu_ms_per_1k_chunks": 1e6 * counters.client_cpu_s / counters.chunks if counters.chunks else None,
        "engine_decisions_malformed": driver.decisions_malformed,  # lines of the decisions files skipped
        "warmup": driver.warmup.as_record(),  # what warm-up sent before the clock started
        "telemetry": driver.telemetry.as_record(),  # /metrics scrapes: tried, failed, too large, samples dropped
        **prefix,
    }
