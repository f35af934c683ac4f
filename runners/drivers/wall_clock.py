"""The wall-clock asyncio driver: the same policy objects against real engines over HTTP.

Arrivals fire at their times; the policy is asked to decide whenever something it can see
happens (arrival, first token, completion, failure, telemetry) or at the time it asked to be
woken; each dispatch becomes a streaming request; telemetry is polled from every instance's
``/metrics``; each sample's ``decode_step_s`` is the engine's mean inter-token latency over the
interval since the previous scrape (deltas of vLLM's histogram; None where the engine has none).
A launched server running one of schedlab's in-engine scheduler classes also has its decisions
file read at each sample (:class:`runners.engines.engine_decisions.EngineDecisionTracker`): the
sample's ``engine_limit``, ``engine_held_back`` and ``engine_admitted`` (requests; null for an
instance without one).
Times given to the policy and written to results are seconds since the run's
start on a monotonic clock. Requests in flight are bounded only by the policy: the aiohttp
connection pool is unlimited.

Every dispatch ends in exactly one of: the tokens asked for (a slice, or the whole request), a
reply shorter than asked (the request ends there with what arrived, counted as an output-length
mismatch: it is never re-sent), or a failure (the error says why; what arrived is kept). So a
request costs at most one server request per dispatch, plus the one re-send of a request a
server dropped unanswered. Nothing a request task raises is lost: it fails that request. A stop
request (``should_stop``) is polled every ``STOP_POLL_S`` and before every batch of dispatches,
and ends whatever the run is waiting on, warm-up included: nothing more is dispatched, and the
requests in flight end as cancelled. The rules that stop a run early (a stalled policy, an exited server, the
time limit) are :class:`runners.drivers.watchdog.Watchdog`'s, checked at every telemetry sample.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from runners.drivers.base import DriverResult, instance_info
from runners.drivers.watchdog import CANCELLED, DeadInstance, RunState, Watchdog
from runners.engines.beliefs import InstanceBeliefs
from runners.engines.engine_decisions import SAMPLE_COLUMNS, EngineDecisionTracker, decisions_path
from runners.engines.gpu import GPUMonitor
from runners.engines.latency_model import LatencyModel
from runners.engines.openai_client import StreamResult, client_connector, header_secrets, redact, stream_request
from runners.engines.real_config import ClientOptions
from runners.engines.real_engine import RealEngine, RealInstance
from runners.engines.telemetry import (
    SCRAPE_TIMEOUT_S,
    MetricsSnapshot,
    TelemetryCounts,
    mean_between,
    parse_metrics,
    read_metrics_page,
)
from runners.errors import RunCancelled, RunStopped
from runners.schedulers.base import Completion, Dispatch, InstanceInfo, PolicyError, SchedulerPolicy, TelemetrySample
from runners.store.recording import RunRecorder
from runners.store.timeseries import TimeseriesRow
from runners.workload.requests import FOLLOWS, Request

#: Seconds between two looks at ``should_stop``: a cancel takes effect within about this long.
STOP_POLL_S = 0.1
#: A /metrics page at least this long (characters) is parsed in a thread, off the event loop.
PARSE_IN_THREAD_CHARS = 2**18
#: Output tokens each warm-up request asks for.
WARMUP_TOKENS = 16


@contextmanager
def collector_skips_older_objects() -> Iterator[None]:
    """Everything allocated before the measured run (the modules the run's set-up imported: the
    tokenizer's, aiohttp's; what warm-up left) hidden from Python's cyclic garbage collector while
    the run is measured: one full collection, then ``gc.freeze``. A full collection that the run's
    allocations trigger then walks only the run's own objects: without it one walked the ~51,000
    objects allocated since :func:`runners.run.benchmark.execute_run` froze the heap, once in
    every 200-request run on the CPU vLLM, wherever the allocation count fell: 55-73 ms beside 4
    busy processes, 124-200 ms beside 12, in one go on the event loop. Handed back (``gc.unfreeze``) at the end unless objects were frozen before (a caller
    such as :func:`runners.run.benchmark.execute_run` then unfreezes them all at its end).
    Reference counting frees objects as before either way."""
    frozen_before = gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


@dataclass
class WarmupRecord:
    """What warm-up sent before the measured run (the summary's ``warmup``): waves done (of
    ``planned``), HTTP requests (re-sends included), those that failed, output tokens the servers
    reported, seconds it took, and why it stopped early (None when every wave ran)."""

    planned: int = 0
    waves: int = 0
    requests: int = 0
    failed: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    stopped: str | None = None

    def as_record(self) -> dict[str, object]:
        return {
            "waves_planned": self.planned,
            "waves": self.waves,
            "requests": self.requests,
            "failed": self.failed,
            "output_tokens": self.output_tokens,
            "duration_s": self.duration_s,
            "stopped": self.stopped,
        }


@dataclass
class _InstanceTelemetry:
    """One instance's telemetry between samples: the scrape taken after warm-up (``baseline``, for
    counters since the run's start), streamed chunks since the last sample, that sample's time
    (seconds since the run's start) and the ITL histogram's running totals."""

    baseline: MetricsSnapshot | None = None
    chunks_since_sample: int = 0
    last_sample_s: float = 0.0
    itl_sum_s: float | None = None  # the inter-token latency histogram at the last scrape that had it
    itl_count: float | None = None

    def decode_step_s(self, snapshot: MetricsSnapshot | None) -> float | None:
        """The engine's mean inter-token latency (seconds) since the last scrape that had its
        histogram, from the deltas of ``_sum`` and ``_count``; None without one, or when no token
        was generated in between. Remembers this scrape's values for the next."""
        if snapshot is None or snapshot.itl_count is None or snapshot.itl_sum_s is None:
            return None
        mean = mean_between(self.itl_sum_s, self.itl_count, snapshot.itl_sum_s, snapshot.itl_count)
        self.itl_sum_s, self.itl_count = snapshot.itl_sum_s, snapshot.itl_count
        return mean


def decision_tracker(instance: RealInstance) -> EngineDecisionTracker | None:
    """A tracker of ``instance``'s in-engine scheduler decisions, when schedlab launched it with a
    decisions file (the path in the server's environment); else None."""
    server = getattr(instance, "server", None)
    path = decisions_path(getattr(server, "env", None) or {})
    return EngineDecisionTracker(path) if path is not None else None


@dataclass
class EngineCounters:
    """Engine-side figures over the run: server TTFT mean from its histogram deltas."""

    server_ttft_sum_s: float = 0.0
    server_ttft_count: float = 0.0
    # the engines' prefix-cache counters over the run (tokens, after warm-up); None: not reported
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    output_length_mismatches: int = 0  # replies with another token count than asked (each ends its request)
    arrival_lag_s: list[float] = field(default_factory=list)
    # each arrival's planned time (seconds since the start), in the order of arrival_lag_s
    arrival_planned_s: list[float] = field(default_factory=list)
    client_cpu_s: float = 0.0
    chunks: int = 0
    resent: list[str] = field(default_factory=list)  # why a request was sent twice (dropped unanswered)
    server_requests: int = 0  # HTTP requests sent during the measured run, re-sends included

    @property
    def server_ttft_mean_s(self) -> float | None:
        return self.server_ttft_sum_s / self.server_ttft_count if self.server_ttft_count else None


class WallClockDriver:
    """Runs ``policy`` over ``requests`` against the instances of a started :class:`RealEngine`."""

    def __init__(
        self,
        *,
        engine: RealEngine,
        policy: SchedulerPolicy,
        requests: Sequence[Request],
        recorder: RunRecorder,
        options: ClientOptions,
        sample_interval_s: float = 0.25,
        should_stop: Callable[[], bool] | None = None,
        latency_model: LatencyModel | None = None,
        max_duration_s: float = float("inf"),
    ) -> None:
        self.engine = engine
        self.latency_model = latency_model
        self.instances: list[RealInstance] = engine.instances
        self.policy = policy
        self.requests = sorted(requests, key=lambda r: r.arrival_s)
        self.recorder = recorder
        self.options = options
        self.sample_interval_s = sample_interval_s
        self.watchdog = Watchdog(policy_name=policy.name, max_duration_s=max_duration_s, should_stop=should_stop)
        self.counters = EngineCounters()
        self.telemetry = TelemetryCounts()
        self.warmup = WarmupRecord(planned=len(options.warmup_concurrency))
        self.failures = 0
        self.stop_reason: str | None = None
        self.cancelled = False
        self._telemetry_of = [_InstanceTelemetry() for _ in self.instances]
        self.decision_trackers = [decision_tracker(instance) for instance in self.instances]
        self._texts: dict[str, str] = {}
        self._tasks: set[asyncio.Task] = set()
        self._request_tasks: dict[str, asyncio.Task] = {}
        self._task_dispatch: dict[asyncio.Task, Dispatch] = {}
        self._cancelled: set[asyncio.Task] = set()
        self._task_failure: BaseException | None = None
        self._secrets = [secret for instance in self.instances for secret in header_secrets(instance.endpoint.headers)]
        self._start = 0.0
        self._wake_at: float | None = None
        self._arrivals_done = False
        self._releases_waiting = 0  # session turns released, their arrival time not yet come
        recorder.on_release = self._release
        self._flushing: asyncio.Future | None = None
        self._gpu = GPUMonitor()

    # -- time --------------------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the run started (monotonic)."""
        return time.perf_counter() - self._start

    @property
    def elapsed_s(self) -> float:
        """Seconds since the measured run started (monotonic); 0.0 before it has (warm-up included)."""
        return self.now() if self._start else 0.0

    # -- policy calls ------------------------------------------------------------------------
    def _decide(self) -> None:
        if self._finished.is_set():
            return  # the run is over (cancelled, stopped): nothing more is dispatched
        now = self.now()
        decision = self.policy.decide(now)
        for request_id in decision.cancels:
            task = self._request_tasks.pop(request_id, None)
            if task is not None:
                self._cancelled.add(task)
                task.cancel()  # aiohttp closes the stream; the server aborts the request
        if decision.dispatches and self.watchdog.cancel_requested():  # asked before every dispatch too
            self.cancelled = True
            self._stop(CANCELLED)
            return
        for dispatch in decision.dispatches:
            self._dispatch(dispatch, now)
        self._wake_at = decision.wake_at

    def _dispatch(self, dispatch: Dispatch, now: float) -> None:
        _, max_tokens = self.recorder.check_dispatch(dispatch, self.policy.name, len(self.instances))
        self.recorder.dispatched(dispatch.request_id, dispatch.instance, now)
        task = asyncio.get_running_loop().create_task(self._serve(dispatch, max_tokens))
        self._tasks.add(task)
        self._request_tasks[dispatch.request_id] = task
        self._task_dispatch[task] = dispatch
        task.add_done_callback(self._request_ended)

    async def _serve(self, dispatch: Dispatch, max_tokens: int) -> None:
        request_id, index = dispatch.request_id, dispatch.instance
        instance = self.instances[index]
        record = self.recorder.records[request_id]
        prompt = record.request.prompt + self._texts.get(request_id, "")
        state = self._telemetry_of[index]
        arrived: list[float] = []  # chunk times, kept here too in case the client fails unexpectedly

        def on_chunk(at: float, first: bool) -> None:
            arrived.append(at)
            state.chunks_since_sample += 1
            self.counters.chunks += 1
            if first:
                self.policy.on_first_token(request_id, index, at - self._start)
                self._wake.set()

        try:
            result = await stream_request(
                self._session,
                instance.endpoint,
                prompt,
                max_tokens,
                dispatch.priority,
                self.options.send_min_tokens,
                self.options.request_timeout_s,
                on_chunk,
                engine_args=dispatch.engine_args,
            )
        except asyncio.CancelledError:
            if asyncio.current_task() in self._cancelled:
                return  # the policy cancelled this dispatch: nothing to record
            # the run is ending: keep what arrived; the row is closed with the run's status
            self.recorder.tokens(request_id, [t - self._start for t in arrived], len(arrived))
            raise
        except Exception as exc:  # the client returns server trouble; anything else fails this request
            result = StreamResult(sent_at=0.0, chunk_times=arrived, error=f"client error: {type(exc).__name__}: {exc}")
        self._settle(dispatch, max_tokens, result)

    def _settle(self, dispatch: Dispatch, max_tokens: int, result: StreamResult) -> None:
        """Record what one dispatch produced and tell the policy."""
        request_id, index = dispatch.request_id, dispatch.instance
        if self._request_tasks.get(request_id) is asyncio.current_task():
            del self._request_tasks[request_id]
        self.counters.server_requests += 1
        if result.retried_after is not None:
            self.counters.server_requests += 1
            self.counters.resent.append(f"{request_id}: {result.retried_after}")
        now = self.now()
        times = [t - self._start for t in result.chunk_times]
        self.recorder.cached(request_id, result.cached_tokens)
        if result.error is not None:
            self.recorder.tokens(request_id, times, len(times))
            self.policy.on_failure(request_id, index, result.error, now)
            self._failed(request_id, result.error, now)
        else:
            tokens = result.output_tokens
            if tokens != max_tokens:
                self.counters.output_length_mismatches += 1
            self._texts[request_id] = self._texts.get(request_id, "") + result.text
            record = self.recorder.tokens(request_id, times, tokens)
            # a reply shorter than asked ends the request with what it got: re-sending the rest
            # would hide the mismatch and, against a server that keeps answering short, never end
            done = record.remaining_tokens <= 0 or tokens < max_tokens
            self.policy.on_completion(Completion(request_id, index, tokens, record.output_tokens, done), now)
            if done:
                self.recorder.finish(request_id, now)
                self._texts.pop(request_id, None)
        if self.recorder.all_done:
            self._finished.set()
        self._wake.set()

    def _failed(self, request_id: str, error: str, now: float) -> None:
        """Close a request's row as failed (``error`` redacted) and apply the run's failure rules."""
        error = redact(error, self._secrets)
        self.recorder.finish(request_id, now, error=error)
        self.failures += 1
        if self.options.on_failure == "stop":
            self._stop(f"request {request_id} failed ({error}) and engine.on_failure is 'stop'")
        elif self.options.max_failures is not None and self.failures >= self.options.max_failures:
            self._stop(
                f"{self.failures} requests failed (engine.max_failures = {self.options.max_failures}); last: {error}"
            )

    def _request_ended(self, task: asyncio.Task) -> None:
        """Done-callback of every request task: an exception it raised fails its request (the row
        is written) and, if it came from the policy, the run; it is never left unobserved."""
        self._tasks.discard(task)
        dispatch = self._task_dispatch.pop(task, None)
        if dispatch is None or task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        reason = f"request task failed: {type(exc).__name__}: {exc}"
        if self._request_tasks.get(dispatch.request_id) is task:
            del self._request_tasks[dispatch.request_id]
        if not self.recorder.records[dispatch.request_id].done:
            self._failed(dispatch.request_id, reason, self.now())
        if isinstance(exc, PolicyError):
            self._task_failure = exc
            self._finished.set()
        else:
            try:
                self.policy.on_failure(dispatch.request_id, dispatch.instance, reason, self.now())
            except Exception as policy_exc:
                self._task_failure = policy_exc
                self._finished.set()
        if self.recorder.all_done:
            self._finished.set()
        self._wake.set()

    def _stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self._finished.set()

    @property
    def decisions_malformed(self) -> int:
        """Lines of the instances' decisions files skipped so far as not a decision."""
        return sum(tracker.malformed for tracker in self.decision_trackers if tracker is not None)

    # -- background tasks --------------------------------------------------------------------
    async def _arrivals(self) -> None:
        for request in self.requests:
            if request.arrival_s == FOLLOWS:
                break  # a session's later turns (sorted last) arrive when released: _release
            delay = request.arrival_s - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            self._arrive(request)
        self._arrivals_done = True

    def _arrive(self, request: Request) -> None:
        """Hand ``request`` to the policy now, its lag behind its planned arrival counted."""
        now = self.now()
        self.counters.arrival_lag_s.append(now - request.arrival_s)
        self.counters.arrival_planned_s.append(request.arrival_s)
        self.policy.on_arrival(request, now)
        self._wake.set()

    def _release(self, request: Request) -> None:
        """A session's next turn (released by the recorder, on the event loop) arrives at its
        ``arrival_s``: a timer of the loop hands it to the policy then."""
        self._releases_waiting += 1
        asyncio.get_running_loop().call_later(max(0.0, request.arrival_s - self.now()), self._released, request)

    def _released(self, request: Request) -> None:
        self._releases_waiting -= 1
        if not self._finished.is_set():  # after the run's end nothing more arrives
            self._arrive(request)

    async def _decider(self) -> None:
        while not self._finished.is_set():
            timeout = None if self._wake_at is None else max(0.0, self._wake_at - self.now())
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            self._decide()

    async def _scrape(self, instance: RealInstance, timeout_s: float = SCRAPE_TIMEOUT_S) -> MetricsSnapshot | None:
        """One scrape of ``instance``'s ``/metrics`` (at most ``timeout_s`` seconds and
        :data:`METRICS_MAX_BYTES`), counted in ``self.telemetry``; None when it failed. A big page
        is parsed in a thread, so the event loop keeps serving the run's streams."""
        snapshot: MetricsSnapshot | None = None
        error: BaseException | None = None
        try:
            text = await read_metrics_page(self._session, instance.metrics_url, instance.endpoint.headers, timeout_s)
            if text is not None:
                snapshot = (
                    parse_metrics(text)
                    if len(text) < PARSE_IN_THREAD_CHARS
                    else await asyncio.to_thread(parse_metrics, text)
                )
        except (TimeoutError, aiohttp.ClientError, ValueError, UnicodeError) as exc:
            error = exc
        self.telemetry.record(snapshot, error)
        return snapshot

    def _sample_row(self, index: int, snapshot: MetricsSnapshot | None, now: float) -> TimeseriesRow:
        state = self._telemetry_of[index]
        interval = now - state.last_sample_s
        baseline = state.baseline
        preemptions = None
        if snapshot is not None and snapshot.preemptions is not None:
            base = baseline.preemptions if baseline is not None and baseline.preemptions is not None else 0.0
            preemptions = int(snapshot.preemptions - base)
        tracker = self.decision_trackers[index]
        decisions = tracker.sample() if tracker is not None else dict.fromkeys(SAMPLE_COLUMNS)
        queries, hits = _prefix_since(snapshot, baseline)
        row = TimeseriesRow(
            t_s=now,
            instance=index,
            kv_usage=snapshot.kv_usage if snapshot else None,
            running=snapshot.running if snapshot else None,
            waiting=snapshot.waiting if snapshot else None,
            preemptions=preemptions,
            tokens_per_s=state.chunks_since_sample / interval if interval > 0 else 0.0,
            gateway_pending=len(self.policy.pending),
            in_flight=len(self.policy.in_flight.get(index, ())),
            engine_limit=decisions["engine_limit"],
            engine_held_back=decisions["engine_held_back"],
            engine_admitted=decisions["engine_admitted"],
            prefix_cache_queries_tokens=queries,
            prefix_cache_hits_tokens=hits,
        )
        state.chunks_since_sample = 0
        state.last_sample_s = now
        return row

    async def _telemetry(self) -> None:
        while not self._finished.is_set():
            started = self.now()
            snapshots = await asyncio.gather(*(self._scrape(instance) for instance in self.instances))
            now = self.now()
            gpu_used_bytes = self._gpu.used_bytes()
            for index, snapshot in enumerate(snapshots):
                row = self._sample_row(index, snapshot, now)
                if gpu_used_bytes is not None:
                    row.gpu_memory_used_bytes = gpu_used_bytes
                self.recorder.sample(row)
                decode_step_s = self._telemetry_of[index].decode_step_s(snapshot)
                self.policy.on_telemetry(
                    TelemetrySample(index, now, row.kv_usage, row.running, row.waiting, row.preemptions, decode_step_s),
                    now,
                )
            reason = self.watchdog.stop_reason(self._run_state(now))
            if reason is not None:
                self._stop(reason)
            if self.recorder.flush_due() and (self._flushing is None or self._flushing.done()):
                # parquet writes and fsync-free JSON still touch the disk: keep them off the loop
                self._flushing = asyncio.ensure_future(asyncio.to_thread(self.recorder.flush))
            self._wake.set()
            await asyncio.sleep(max(0.0, self.sample_interval_s - (self.now() - started)))

    def _run_state(self, now: float) -> RunState:
        """What the watchdog's stop rules look at, ``now`` seconds into the run."""
        return RunState(
            now_s=now,
            arrivals_done=self._arrivals_done and not self._releases_waiting,
            requests_in_flight=len(self._tasks),
            pending=len(self.policy.pending),
            wake_at=self._wake_at,
            all_done=self.recorder.all_done,
            dead=[
                DeadInstance(instance.index, instance.endpoint.base_url, code)
                for instance, code in self.engine.dead_instances()
            ],
        )

    async def _watch_stop(self) -> None:
        """Polls the watchdog's cancel rule from the start of warm-up to the end of the run; a stop
        request ends the run (and so whatever it is awaiting) within ``STOP_POLL_S``."""
        if not self.watchdog.cancellable:
            return
        while not self._finished.is_set():
            if self.watchdog.cancel_requested():
                self.cancelled = True
                self._stop(CANCELLED)
                return
            await asyncio.sleep(STOP_POLL_S)

    async def _unless_finished(self, awaitable: Any) -> Any:
        """The result of ``awaitable``, or None if the run finishes (is cancelled) first."""
        task = asyncio.ensure_future(awaitable)
        finished = asyncio.ensure_future(self._finished.wait())
        try:
            await asyncio.wait({task, finished}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            finished.cancel()
            if not task.done():
                task.cancel()
            await asyncio.gather(task, finished, return_exceptions=True)
        return None if task.cancelled() else task.result()

    async def _warmup(self) -> None:
        """Waves of concurrent short requests per instance, before the clock starts; their rows
        are not recorded, their counts are (``self.warmup``, the summary's ``warmup``), so the
        servers' counters reconcile with the run. Without it the first batch shapes compile while
        the run is measured (seen on the CPU vLLM: seconds of stall that starve the client too).
        Each request has ``warmup_timeout_s`` (at most ``request_timeout_s``); the first wave
        with a request that failed ends the warm-up, and ``warmup.stopped`` says why. Warm-up
        prompts share no prefix with the run's (a marker first), so the run starts with a prefix
        cache that holds none of its own blocks."""
        # the run's first prompts, each behind a marker of its own: the same shapes to compile, but
        # no block of the run's prompts enters the engine's prefix cache before the clock starts
        # (vLLM caches prefixes by default: a warm-up of the run's own prompts made their first
        # requests hit, and their TTFT looked better than a cold run's)
        prompts = [f"schedlab warm-up {k}. {request.prompt}" for k, request in enumerate(self.requests[:8])]
        prompts = prompts or ["warm up"]
        waves = self.options.warmup_concurrency
        limit_s = min(self.options.warmup_timeout_s, self.options.request_timeout_s)
        record = self.warmup
        started = time.perf_counter()
        try:
            for number, wave in enumerate(waves, start=1):
                results = await asyncio.gather(
                    *(
                        stream_request(
                            self._session,
                            instance.endpoint,
                            prompts[k % len(prompts)],
                            WARMUP_TOKENS,
                            timeout_s=limit_s,
                        )
                        for instance in self.instances
                        for k in range(wave)
                    )
                )
                record.waves = number
                record.requests += len(results) + sum(result.retried_after is not None for result in results)
                record.output_tokens += sum(result.output_tokens for result in results)
                failed = [result for result in results if result.error is not None]
                record.failed += len(failed)
                if failed:
                    error = redact(failed[0].error or "", self._secrets)
                    record.stopped = (
                        f"warm-up stopped at wave {number} of {len(waves)} ({wave} concurrent requests per instance, "
                        f"each allowed {limit_s:g} s): {len(failed)} of {len(results)} failed; first: {error}"
                    )
                    return
        finally:
            record.duration_s = time.perf_counter() - started

    # -- run ---------------------------------------------------------------------------------
    async def _run(self) -> DriverResult:
        self._wake = asyncio.Event()
        self._finished = asyncio.Event()
        watcher = asyncio.create_task(self._watch_stop())
        try:
            return await self._measure()
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            self._gpu.close()

    async def _measure(self) -> DriverResult:
        async with aiohttp.ClientSession(connector=client_connector()) as session:
            self._session = session
            await self._unless_finished(self._warmup())
            for index, instance in enumerate(self.instances):
                state = self._telemetry_of[index]
                state.baseline = await self._unless_finished(self._scrape(instance))
                state.decode_step_s(state.baseline)  # the first interval's deltas start after warm-up
            if self.cancelled:
                raise RunCancelled(f"{CANCELLED} (during warm-up)")
            infos = [self._info(i) for i in self.instances]
            self.policy.on_workload(self.requests)
            with collector_skips_older_objects():
                end, failure = await self._window(infos)
        if failure is not None:
            raise failure
        if self.cancelled:
            raise RunCancelled(CANCELLED)
        if self.stop_reason is not None:
            raise RunStopped(self.stop_reason)
        preemptions = sum(self.recorder.preemptions_by_instance.values())
        return DriverResult(end_s=end, preemptions=preemptions, stalled=0)

    def _info(self, instance: Any) -> InstanceInfo:
        """The policy's view of ``instance``: its beliefs (runners.engines.beliefs, set when the
        engine started), built as the simulator builds its instances'."""
        beliefs = instance.beliefs
        if beliefs is None:  # an instance made without RealEngine.start (tests): its own fields
            beliefs = InstanceBeliefs.of(instance, "the instance")
        return instance_info(instance.index, beliefs, self.latency_model)

    async def _window(self, infos: list[InstanceInfo]) -> tuple[float, BaseException | None]:
        """The measured run, from the first arrival to the last look at the servers' counters:
        (its end, seconds since the start; the failure that ended it, if any)."""
        self._start = time.perf_counter()
        cpu_start = time.process_time()  # the client's own CPU time, from here to the end of the run
        self.policy.start(infos, 0.0)
        background = [
            asyncio.create_task(self._arrivals()),
            asyncio.create_task(self._decider()),
            asyncio.create_task(self._telemetry()),
        ]
        failure: BaseException | None = None
        try:
            waiter = asyncio.create_task(self._finished.wait())
            watched = {waiter, *background}
            while failure is None and not waiter.done():
                done, watched = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is not waiter and task.exception() is not None:
                        failure = task.exception()
            waiter.cancel()
        finally:
            for task in [*background, *self._tasks]:
                task.cancel()
            await asyncio.gather(*background, *self._tasks, return_exceptions=True)
            if self._flushing is not None:
                await asyncio.gather(self._flushing, return_exceptions=True)
        failure = failure or self._task_failure
        end = self.now()
        self.counters.client_cpu_s = time.process_time() - cpu_start
        # after a cancel the servers may not answer: a short last look, all instances at once
        finals = await asyncio.gather(
            *(self._scrape(instance, 1.0 if self.cancelled else SCRAPE_TIMEOUT_S) for instance in self.instances)
        )
        for index, final in enumerate(finals):
            self.recorder.sample(self._sample_row(index, final, end))
            baseline = self._telemetry_of[index].baseline
            if final is not None and final.ttft_count is not None:
                self.counters.server_ttft_sum_s += (final.ttft_sum_s or 0) - (
                    (baseline.ttft_sum_s or 0) if baseline else 0
                )
                self.counters.server_ttft_count += final.ttft_count - ((baseline.ttft_count or 0) if baseline else 0)
            self._count_prefix_cache(final, baseline)
        return end, failure

    def _count_prefix_cache(self, final: MetricsSnapshot | None, baseline: MetricsSnapshot | None) -> None:
        """Add one instance's prefix-cache counters over the run (final scrape less the one after
        warm-up; tokens) to the run's, where the engine reports them."""
        queries, hits = _prefix_since(final, baseline)
        if queries is None or hits is None:
            return
        counters = self.counters
        counters.prefix_queries = (counters.prefix_queries or 0.0) + queries
        counters.prefix_hits = (counters.prefix_hits or 0.0) + hits

    def run(self) -> DriverResult:
        return asyncio.run(self._run())


def _prefix_since(snapshot: MetricsSnapshot | None, baseline: MetricsSnapshot | None) -> tuple[int | None, int | None]:
    """An instance's prefix-cache counters (queries, hits; tokens) since the scrape after warm-up,
    or (None, None) where the scrape failed or the engine does not report them."""
    if snapshot is None or snapshot.prefix_queries is None or snapshot.prefix_hits is None:
        return None, None
    queries = snapshot.prefix_queries - ((baseline.prefix_queries or 0) if baseline is not None else 0)
    hits = snapshot.prefix_hits - ((baseline.prefix_hits or 0) if baseline is not None else 0)
    return int(queries), int(hits)
