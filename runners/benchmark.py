"""Run one benchmark end to end: build the workload, the engine and the policy, drive them, and
keep every measurement in ``results/<run_id>/`` whatever happens."""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import runners
from runners.config import RunConfig
from runners.drivers.virtual_time import VirtualTimeDriver
from runners.engines.simulator import ResolvedSimulator, SimulatedInstance
from runners.errors import ConfigError, RunCancelled
from runners.recording import RunRecorder
from runners.registry import make_policy
from runners.result_store import DEFAULT_RESULTS_DIR, RunWriter, new_run_id
from runners.workload.builder import Workload, build_workload
from runners.workload.slo import TaskSLO


@dataclass
class PreparedRun:
    config: RunConfig
    engine: ResolvedSimulator
    workload: Workload
    slos: dict[str, TaskSLO]


@dataclass
class RunOutcome:
    run_id: str
    folder: Path
    status: str
    summary: dict[str, Any]
    error: str | None = None


def prepare_run(config: RunConfig) -> PreparedRun:
    """Resolve the engine, build the workload with its SLOs, and check the cache can hold it."""
    engine = config.engine.resolve()
    resolved: dict[str, TaskSLO] = {}

    def slos_for(workload: Workload) -> dict[str, TaskSLO]:
        alone = {}
        for task in ("chat", "code"):
            means = workload.mean_lengths(task)
            if means is not None:
                alone[task] = engine.latency.alone_latency(means[0], round(means[1]))[1]
        try:
            resolved.update(config.slo.resolve(alone))
        except ValueError as exc:
            raise ConfigError("slo.preset", str(exc)) from exc
        return resolved

    workload = build_workload(config.workload, slos_for)
    largest = max(workload.requests, key=lambda r: r.total_tokens)
    if largest.total_tokens > engine.kv_capacity_tokens:
        raise ConfigError(
            "engine.kv_capacity_tokens",
            f"the KV cache holds {engine.kv_capacity_tokens} tokens but request {largest.request_id} needs "
            f"{largest.total_tokens} (prompt + output); expected a cache of at least one whole request",
        )
    return PreparedRun(config, engine, workload, resolved)


def _config_record(prepared: PreparedRun) -> dict[str, Any]:
    config = prepared.config
    return {
        "config": config.model_dump(mode="json"),
        "resolved": {
            "slos": {task: slo.model_dump(exclude_none=True) for task, slo in prepared.slos.items()},
            "engine_profile": prepared.engine.profile.model_dump(mode="json", by_alias=True, exclude_none=True),
            "kv_capacity_tokens": prepared.engine.kv_capacity_tokens,
            "block_size": prepared.engine.block_size,
            "max_num_seqs": prepared.engine.max_num_seqs,
            "max_num_batched_tokens": prepared.engine.max_num_batched_tokens,
            "workload_reports": prepared.workload.reports,
            "workload_synthetic": prepared.workload.synthetic,
        },
        "versions": {
            "schedlab": runners.__version__,
            "engine": f"schedlab-simulator {runners.__version__}",
            "python": platform.python_version(),
        },
    }


def execute_run(
    config: RunConfig,
    results_root: str | Path = DEFAULT_RESULTS_DIR,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> RunOutcome:
    """Run ``config`` and save it. Input errors raise before anything is written; once the run
    folder exists, a failure or cancel closes it with its partial data and the reason."""
    prepared = prepare_run(config)
    policy = make_policy(config.scheduler.name, config.scheduler.params)
    run_id = config.run_id or new_run_id(config.scheduler.name, config.engine.kind)
    header = {
        "engine": config.engine.kind,
        "scheduler": config.scheduler.name,
        "workload": config.workload.label(),
        "synthetic": prepared.workload.synthetic,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "slos": {task: slo.describe() for task, slo in prepared.slos.items()},
    }
    writer = RunWriter(results_root, run_id, _config_record(prepared), header)
    recorder = RunRecorder(prepared.workload.requests, writer, progress)
    engine = prepared.engine
    instances = [
        SimulatedInstance(
            index,
            engine.latency,
            engine.kv_capacity_tokens,
            engine.block_size,
            engine.max_num_seqs,
            engine.max_num_batched_tokens,
            config.engine.scheduling_policy,
            config.engine.run_to_completion,
        )
        for index in range(config.engine.instances)
    ]
    driver = VirtualTimeDriver(instances, policy, prepared.workload.requests, recorder, config.sample_interval_s, should_stop)
    status, error = "done", None
    wall_start = time.perf_counter()
    try:
        result = driver.run()
        if result.stalled:
            status, error = "failed", f"{result.stalled} requests never completed: {policy.name} stopped dispatching"
    except (RunCancelled, KeyboardInterrupt) as exc:
        status, error = "cancelled", str(exc) or "cancelled"
    except Exception as exc:  # keep what was measured, then report
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        if status != "done" or not recorder.all_done:
            recorder.fail_unfinished(status if status != "done" else "not finished", driver.now)
        summary = recorder.summary()
        summary["wall_time_s"] = time.perf_counter() - wall_start
        summary["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        writer.close(status, summary, error)
    return RunOutcome(run_id, writer.folder, status, {**writer.header, "status": status, **summary}, error)
