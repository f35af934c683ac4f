"""The result files as typed records (issue 26): ``summary.json`` (:class:`RunSummary`),
``study.json`` (:class:`StudyRecord`), a job's ``status.json`` (:class:`JobStatusRecord`) and
``engine.json`` (:class:`EngineRecord`). Their JSON Schemas are published in docs/schemas/
(:func:`json_schemas`; a test keeps them current).

Writers build a record and write :func:`record_json` of it; readers validate what they read into
the record. The field order below is the order the files have always had (a record dumps its
fields in declaration order), and only fields a writer set are written (``exclude_unset``), so a
file written through its record is byte for byte what the dict-building writers wrote: the tests
re-write every committed result file through its record and compare. Numbers that are not counts
are ``int | float`` (a ``float`` field would write ``2`` as ``2.0``).

Reading is lenient: every record keeps fields it does not know (a newer writer's, or another
tool's; ``extra="allow"``), and every field of a section added after version 1 has a default,
so each earlier schema version still reads (tests/data/records/ holds one file of each).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

#: A number that is not a count: an int stays an int, a float a float (as written).
Number = int | float

#: summary.json's schema version (the history of each version: runners.store.result_store).
SUMMARY_SCHEMA_VERSION = 7
#: study.json's schema version (the history: runners.study.runner).
STUDY_SCHEMA_VERSION = 5
#: status.json's and engine.json's schema versions (both versioned from issue 26; a file without
#: ``schema_version`` is version 0, written before).
JOB_STATUS_SCHEMA_VERSION = 1
ENGINE_RECORD_SCHEMA_VERSION = 3


class Record(BaseModel):
    """Base of the records: unknown fields are kept (and written back after the known ones). A
    record's validator is built when it first validates (``defer_build``, issue 42)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)


def record_json(record: BaseModel) -> str:
    """The file text of ``record``: the fields its writer set, in declaration order, as
    ``json.dump(..., indent=2)`` writes them (what the result files have always been)."""
    return json.dumps(record.model_dump(mode="python", exclude_unset=True), indent=2, default=str)


# -- summary.json -------------------------------------------------------------------------------
class WriterIdentity(Record):
    """The process that writes a run or study folder (runners.store.result_store.writer_identity)."""

    pid: int | None = None
    hostname: str | None = None
    start_ticks: int | None = None
    boot_id: str | None = None


class Distribution(Record):
    """A latency's mean, median and tails, seconds (None: no request has it)."""

    mean: Number | None = None
    median: Number | None = None
    p90: Number | None = None
    p99: Number | None = None


class Contention(Record):
    """How many requests waited in the engine's queue (runners.metrics.contention)."""

    waiting_peak: Number | None = None
    waiting_mean: Number | None = None
    queued_share: Number | None = None
    samples: int = 0


class PrefixCache(Record):
    """The prefix cache over the run (version 6+): prompt tokens looked up when requests were
    admitted and those found cached (tokens, all instances), and where the counts come from
    (``simulator``; real engines: their ``/metrics``)."""

    queries_tokens: int | None = None
    hits_tokens: int | None = None
    source: str | None = None


class Sessions(Record):
    """A multi-turn run's sessions (version 7+; runners.metrics.sessions): sent, their turns, those
    whose every turn completed, and those whose every turn completed and met its SLO (a share 0-1)."""

    sessions: int | None = None
    turns: int | None = None
    turns_per_session_mean: Number | None = None
    completed: int | None = None
    all_turns_met: int | None = None
    slo_attainment: Number | None = None


class TurnMetrics(Record):
    """One turn index of a multi-turn run (version 7+): requests, completed, TTFT mean and p99
    (seconds, from when the turn was ready) and SLO attainment (0-1)."""

    turn: int
    requests: int | None = None
    completed: int | None = None
    ttft_mean_s: Number | None = None
    ttft_p99_s: Number | None = None
    slo_attainment: Number | None = None


class FailureGate(Record):
    """The run's failure rule and whether it tripped (runners.run.benchmark.failure_gate)."""

    max_error_rate: Number | None = None
    error_rate: Number | None = None
    errors: int | None = None
    ran: int | None = None
    tripped: bool | None = None


class Warmup(Record):
    """What warm-up sent before the clock started (version 4+)."""

    waves_planned: int | None = None
    waves: int | None = None
    requests: int | None = None
    failed: int | None = None
    output_tokens: int | None = None
    duration_s: Number | None = None
    stopped: str | None = None


class TelemetryCounts(Record):
    """The ``/metrics`` scrapes of a real-engine run (version 4+)."""

    scrapes: int | None = None
    failed: int | None = None
    too_large: int | None = None
    samples_dropped: int | None = None


class RunSummary(Record):
    """``summary.json``: the run's header (what ran, when, by which process), its status and
    every run metric (definitions: runners.metrics.catalog; units in the names: ``_s`` seconds,
    ``_rps`` requests/s, ``_tps`` tokens/s; shares 0-1). Real-engine runs add the wall-clock
    fields, imported runs ``imported``."""

    schema_version: int
    run_id: str | None = None
    engine: str | None = None
    scheduler: str | None = None
    workload: str | None = None
    synthetic: bool | None = None
    started_at: str | None = None
    started_at_unix_s: Number | None = None
    slos: dict[str, Any] | None = None
    arrival_process: str | None = None
    arrival_rate_rps: Number | None = None
    instances: int | None = None
    sweep_id: str | None = None
    notes: str | None = None
    oracle: list[str] | None = None  # version 5+, not on imported runs
    writer: WriterIdentity | None = None
    status: str | None = None  # running | done | failed | cancelled
    requests: int | None = None
    completed: int | None = None
    failed: int | None = None
    cancelled: int | None = None  # version 3+
    not_run: int | None = None  # version 3+
    duration_s: Number | None = None
    slo_attainment: Number | None = None
    slo_attainment_by_task: dict[str, Number | None] | None = None
    slo_met: int | None = None
    G: Number | None = None
    goodput_rps: Number | None = None
    request_throughput_rps: Number | None = None
    output_throughput_tps: Number | None = None
    total_throughput_tps: Number | None = None
    preemptions: int | None = None
    ttft_s: Distribution | None = None
    tpot_s: Distribution | None = None
    e2e_s: Distribution | None = None
    queue_s: Distribution | None = None
    itl_s: Distribution | None = None
    requests_total: int | None = None
    contention: Contention | None = None
    failure_gate: FailureGate | None = None
    prefix_cache_hit_rate: Number | None = None  # version 6+: hits_tokens / queries_tokens (0-1)
    prefix_cache: PrefixCache | None = None  # version 6+, where the engine reports it
    sessions: Sessions | None = None  # version 7+, a multi-turn run only
    turns: list[TurnMetrics] | None = None  # version 7+, a multi-turn run only: per turn index
    # real engines (the wall-clock driver)
    server_ttft_mean_s: Number | None = None
    server_ttft_count: Number | None = None  # written as a float by the wall-clock driver
    output_length_mismatches: int | None = None
    arrival_lag_s: Distribution | None = None
    achieved_arrival_rate_rps: Number | None = None
    scheduled_arrival_rate_rps: Number | None = None
    failures: int | None = None
    resent_requests: int | None = None
    server_requests: int | None = None
    client_cpu_s: Number | None = None
    client_cpu_ms_per_1k_chunks: Number | None = None
    engine_decisions_malformed: int | None = None
    warmup: Warmup | None = None
    telemetry: TelemetryCounts | None = None
    wall_time_s: Number | None = None
    imported: dict[str, Any] | None = None  # an imported run's provenance (runners.imports.base)
    finished_at: str | None = None
    rows_rejected: dict[str, int] | None = None  # version 4+, only when rows were left out
    error: str | None = None

    def partial(self) -> str | None:
        """Why the run's figures cover only part of what it planned, in one line (``cancelled:
        143 of 200 requests completed, 41 cancelled, 16 never sent``), or None for a run that
        ran every request to an end of its own (status done, nothing cancelled or never sent).
        Still-running, failed, cancelled and interrupted runs are partial; a record without a
        status (a hand-made summary) is not judged (None)."""
        cancelled, not_run = self.cancelled or 0, self.not_run or 0
        if self.status is None or (self.status == "done" and not cancelled and not not_run):
            return None
        planned = self.requests_total if self.requests_total is not None else self.requests
        parts = [f"{self.completed or 0:,} of {planned:,} requests completed" if planned else "no request completed"]
        parts += [
            f"{count:,} {what}"
            for count, what in ((self.failed or 0, "failed"), (cancelled, "cancelled"), (not_run, "never sent"))
            if count
        ]
        return f"{self.status}: " + ", ".join(parts)


class RunEntry(RunSummary):
    """A run as the result store lists it (runners.store.result_store.inspect_run): its summary with
    ``run_id`` = the folder's name, ``status`` ``interrupted`` when its writer is gone and ``rows``
    = its request rows so far; or, for a run that cannot be read, only ``run_id``, ``status``
    (``damaged`` | ``incomplete``) and ``problem`` (why). Never written to a file."""

    schema_version: int | None = None  # type: ignore[assignment]  # absent on a damaged entry
    rows: int | None = None
    problem: str | None = None


# -- study.json ---------------------------------------------------------------------------------
class SeedSummary(Record):
    """One scheduler's metric over the seeds (runners.metrics.seed_statistics.summarize)."""

    n: int = 0
    mean: Number | None = None
    median: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    note: str | None = None


class RelativeChange(Record):
    """The relative change mean(ours) / mean(baseline) - 1 with its interval."""

    n_pairs: int = 0
    change: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    method: str | None = None
    note: str | None = None


class PairedComparison(Record):
    """A scheduler against the baseline over the paired seeds."""

    n_pairs: int = 0
    dropped: int = 0
    diff_mean: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    wins: int = 0
    verdict: str | None = None
    note: str | None = None
    p_value: Number | None = None
    test: str | None = None
    relative: RelativeChange | None = None  # absent while the study runs


class MetricStatistics(Record):
    """One metric: each scheduler over the seeds, and each against the baseline."""

    schedulers: dict[str, SeedSummary] = {}
    vs_baseline: dict[str, PairedComparison] = {}


class RateStatistics(Record):
    """The statistics at one arrival rate of a study over several rates (req/s)."""

    rate: Number | None = None
    statistics: dict[str, MetricStatistics] = {}


class StudyRun(Record):
    """One member run of a study."""

    run_id: str | None = None
    scheduler: str | None = None
    seed: int | None = None
    rate: Number | None = None
    status: str | None = None
    error: str | None = None
    # version 4 (issue 32): where the member ran and, while it runs, how far it is
    node: str | None = None  # the machine (hostname) of a launched server, or the attached server(s)
    hardware: str | None = None  # engine.json host.hardware: GPU models and driver, or the CPU
    cache_reset: str | None = None  # on an attached pool: why its server's prefix cache could not be emptied
    started_at: str | None = None
    requests_done: int | None = None
    requests_total: int | None = None
    # version 5 (issue 43): when it ended, and whether its servers had accelerators of their own
    finished_at: str | None = None
    dedicated: bool | None = None  # True: its launched servers were given GPUs; None: not known


class StudyExecution(Record):
    """How a study's runs were executed (version 4 adds the Ray ``resources`` each member held
    and an attached pool's ``servers_per_member``)."""

    executor: str | None = None
    workers: int | None = None
    resources: dict[str, Number] | None = None
    servers_per_member: int | None = None


class StudyRecord(Record):
    """``study.json``: the plan, each member's status and the statistics over seeds (prose:
    runners.study.runner's module docstring). Version 2 added ``oracles``, version 3 ``config``,
    ``writer`` and ``resumed_at``."""

    schema_version: int = 1
    study_id: str
    baseline: str
    schedulers: list[str] = []
    seeds: list[int] = []
    status: str | None = None
    created_at: str | None = None
    finished_at: str | None = None
    rates: list[Number] = []
    runs: list[StudyRun]
    statistics: dict[str, MetricStatistics]
    statistics_by_rate: list[RateStatistics] = []
    execution: StudyExecution | None = None
    oracles: dict[str, list[str]] | None = None
    config: dict[str, Any] | None = None
    writer: WriterIdentity | None = None
    resumed_at: list[str] | None = None
    #: version 5: a sentence when real-engine members ran at the same time on the same machine
    #: without accelerators of their own (each one's figures include the other's load); None: none did
    side_by_side: str | None = None


# -- jobs and engines ---------------------------------------------------------------------------
class JobRunStatus(Record):
    """One run of a job as the worker last reported it."""

    run_id: str | None = None
    status: str | None = None
    error: str | None = None  # set once the run ended with one


class JobStatusRecord(Record):
    """A job's ``status.json`` (runners.app.jobs, runners.app.worker): its state, the worker's process,
    the run under way (index), each run's status and when this was written (Unix seconds)."""

    schema_version: int = 0
    state: str = "starting"
    pid: int | None = None
    current: int | None = None
    runs: list[JobRunStatus] = []
    error: str | None = None
    updated_at: Number = 0.0


class Belief(Record):
    """One thing a policy believed about its instance (version 3, issue 48): the value, and where
    it came from (a launch flag, a config key, what the server said, a documented default, or
    schedlab's stated assumption). A latency model's value is its planning record."""

    value: Any = None
    source: str | None = None


class EngineInstance(Record):
    """One engine instance of a run: where it served, what, and how it started; from version 3
    also a simulated run's instances (``kind`` "sim") and, for both, ``beliefs``: each limit the
    policy saw (runners.engines.beliefs.LIMITS and ``latency_model``) with its source."""

    index: int
    base_url: str | None = None
    kind: str | None = None
    model: str | None = None
    api: str | None = None
    version: str | None = None
    kv_capacity_tokens: int | None = None
    block_size: int | None = None
    command: list[str] | None = None
    log: str | None = None
    beliefs: dict[str, Belief] | None = None
    cpu_affinity: list[int] | None = None  # version 3: the CPUs a launched server's process may run on


class HostGPU(Record):
    """One GPU a launched server was given (NVML): its index on the node, model name and driver."""

    index: int | None = None
    name: str | None = None
    driver: str | None = None


class EngineHost(Record):
    """The node launched servers ran on (runners.engines.gpu.host_record): ``hardware`` is one line
    (GPU models and driver, or the CPU) that a study compares across the members of a seed."""

    hostname: str | None = None
    ray_node_id: str | None = None
    cpu: str | None = None
    gpus: list[HostGPU] = []
    hardware: str | None = None


class EngineRecord(Record):
    """``engine.json`` (the engine card): of a real-engine run, and from version 3 of a simulated
    run too. Version 3 adds each instance's ``beliefs``, a launched server's ``cpu_affinity`` and
    the client's ``client_cpu_affinity`` (how server and client were pinned to cores)."""

    schema_version: int = 0
    instances: list[EngineInstance]
    host: EngineHost | None = None  # version 2: where launched servers ran; None for attached ones
    #: version 3: the CPUs the run's own process (the client) may run on (pinning, issue 43)
    client_cpu_affinity: list[int] | None = None


#: The published records, by the file name of their schema in docs/schemas/.
PUBLISHED: dict[str, type[BaseModel]] = {
    f"run-summary.v{SUMMARY_SCHEMA_VERSION}": RunSummary,
    f"study-record.v{STUDY_SCHEMA_VERSION}": StudyRecord,
    f"job-status.v{JOB_STATUS_SCHEMA_VERSION}": JobStatusRecord,
    f"engine-record.v{ENGINE_RECORD_SCHEMA_VERSION}": EngineRecord,
}


def json_schemas() -> dict[str, str]:
    """The JSON Schema text of every published record, by file name (``<name>.schema.json``)."""
    return {
        f"{name}.schema.json": json.dumps(model.model_json_schema(mode="serialization"), indent=2) + "\n"
        for name, model in PUBLISHED.items()
    }


__all__ = [
    "Contention",
    "Distribution",
    "Belief",
    "EngineHost",
    "EngineInstance",
    "EngineRecord",
    "FailureGate",
    "HostGPU",
    "JobRunStatus",
    "JobStatusRecord",
    "MetricStatistics",
    "Number",
    "PairedComparison",
    "RateStatistics",
    "Record",
    "RelativeChange",
    "RunEntry",
    "RunSummary",
    "SeedSummary",
    "StudyExecution",
    "StudyRecord",
    "StudyRun",
    "TelemetryCounts",
    "Warmup",
    "WriterIdentity",
    "json_schemas",
    "record_json",
]
