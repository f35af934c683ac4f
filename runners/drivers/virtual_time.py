"""The virtual-time discrete-event driver: policies against simulated engine instances.

Events, in time order: request arrivals, engine step ends, policy wake-ups and telemetry
samples. After every batch of events at one instant the policy is asked to decide (only when
something it can see happened), dispatches join the chosen instance's queue, and idle
instances with work start their next step. Each telemetry sample carries ``decode_step_s``,
the mean duration (seconds) of the instance's steps that decoded since the previous sample
(None if none did). No measured value reads the wall clock: a run is a pure function of
its config and seed. ``pace`` (simulated seconds per wall second) only adds sleeps between
events so a person can watch the run; it never changes a measured value.

The wall clock is read for two chores only, at every pace: at least every :data:`LOOK_S` the
driver asks ``should_stop`` (and before every batch of dispatches), so a cancel stops
dispatching at once and the requests in flight end as cancelled; and it lets the recorder
flush (rows and samples reach the run folder for the live view every ``flush_seconds``).
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable, Sequence
from operator import attrgetter

from runners.drivers.base import DriverResult, instance_info
from runners.drivers.watchdog import CANCELLED, time_limit_message
from runners.engines.beliefs import InstanceBeliefs
from runners.engines.latency_model import LatencyModel
from runners.engines.simulator import SimulatedInstance
from runners.errors import RunCancelled, RunStopped
from runners.schedulers.base import Completion, SchedulerPolicy, TelemetrySample
from runners.schedulers.fcfs import DispatchOnArrival, FCFSPolicy
from runners.store.recording import RunRecorder
from runners.store.timeseries import engine_sample_values
from runners.workload.requests import Request

STEP_END, WAKE, ADMIT = 0, 1, 2
_arrival_of = attrgetter("arrival_s")
MIN_STEP_S = 1e-6
#: Longest wall time (seconds) between two looks at ``should_stop`` and at the recorder's flush,
#: sleeps of a paced run included.
LOOK_S = 0.05
#: Most silent steps (:meth:`VirtualTimeDriver._silent_steps`) applied between two looks.
SILENT_STEPS = 256


class VirtualTimeDriver:
    """Runs ``policy`` over ``requests`` (sorted by arrival) on simulated ``instances``."""

    def __init__(
        self,
        *,
        instances: Sequence[SimulatedInstance],
        policy: SchedulerPolicy,
        requests: Sequence[Request],
        recorder: RunRecorder,
        sample_interval_s: float = 0.25,
        should_stop: Callable[[], bool] | None = None,
        max_duration_s: float = math.inf,
        pace: float | None = None,
        planning_model: LatencyModel | None = None,
        beliefs: Sequence[InstanceBeliefs] | None = None,
    ) -> None:
        """``planning_model``: the latency model the policy plans with (each instance's
        ``InstanceInfo.latency_model``): the run's fitted one (runners.engines.planning_model),
        never the instances' own unless the user chose that oracle; None: the policy gets none.
        ``beliefs``: each instance's limits with their sources (runners.engines.beliefs), as a
        run config resolved them; None: the instances' own values, sourced "the simulated engine"."""
        self.planning_model = planning_model
        self.beliefs = list(beliefs) if beliefs is not None else None
        self.instances = list(instances)
        self.pace = pace
        self.max_duration_s = max_duration_s
        self.policy = policy
        self.requests = sorted(requests, key=_arrival_of)
        self.recorder = recorder
        self.sample_interval_s = sample_interval_s
        self.should_stop = should_stop
        self._events: list[tuple[float, int, int, int]] = []
        self._counter = 0
        self._tokens_since_sample = [0] * len(self.instances)
        # decode steps since the last sample, per instance: their count and summed duration (seconds)
        self._decode_steps_since_sample = [0] * len(self.instances)
        self._decode_time_since_sample = [0.0] * len(self.instances)
        self._last_sample_s = 0.0
        # dispatches still in the serving front end (see ServingOverhead), by event payload:
        # (request id, instance, prompt tokens, max tokens, priority); and payload by request id
        self._admitting: dict[int, tuple[str, int, int, int, int, tuple[tuple[int, int], ...], bool]] = {}
        self._admitting_ids: dict[str, int] = {}
        self.elapsed_s = 0.0  # simulated seconds since the run's start, as far as the run has got
        self._quiet_samples = _samples_change_nothing(policy)
        # a policy that keeps the base class's on_first_token (a no-op) is not told of first tokens
        self._first_token_calls = type(policy).on_first_token is not SchedulerPolicy.on_first_token
        self._next_look = 0.0  # perf_counter() of the next look at should_stop and the flush
        # multi-turn sessions' turns released by the recorder, not yet arrived: (arrival_s, order, request)
        self._released: list[tuple[float, int, Request]] = []
        recorder.on_release = self._release

    def _release(self, request: Request) -> None:
        """A session's next turn is ready at its ``arrival_s`` (the recorder released it)."""
        self._counter += 1
        heapq.heappush(self._released, (request.arrival_s, self._counter, request))

    def _next_arrival_s(self, next_arrival: int) -> float:
        """When the next request arrives (seconds; inf: none is due): the workload's next, or a
        released session turn."""
        requests = self.requests
        planned = requests[next_arrival].arrival_s if next_arrival < len(requests) else math.inf
        if self._released and self._released[0][0] < planned:
            return self._released[0][0]
        return planned

    def _push(self, time_s: float, kind: int, payload: int) -> None:
        self._counter += 1
        heapq.heappush(self._events, (time_s, self._counter, kind, payload))

    def _sample(self, now: float) -> None:
        interval = now - self._last_sample_s
        pending = len(self.policy.pending)
        policy = self.policy
        recorder = self.recorder
        # a policy that keeps the base class's on_telemetry (a no-op) is not handed samples
        telemetry = type(policy).on_telemetry is not SchedulerPolicy.on_telemetry
        for index, instance in enumerate(self.instances):
            tokens = self._tokens_since_sample[index]
            self._tokens_since_sample[index] = 0
            steps = self._decode_steps_since_sample[index]
            decode_step_s = self._decode_time_since_sample[index] / steps if steps else None
            self._decode_steps_since_sample[index] = 0
            self._decode_time_since_sample[index] = 0.0
            kv_usage = instance.used_blocks / instance.total_blocks
            running = len(instance.running)
            waiting = instance.waiting_count
            preemptions = instance.preemptions_total
            recorder.sample_values(
                engine_sample_values(
                    now,
                    index,
                    kv_usage,
                    running,
                    waiting,
                    preemptions,
                    tokens / interval if interval > 0 else 0.0,
                    pending,
                    len(policy.in_flight.get(index, ())),
                    instance.prefix_queries,
                    instance.prefix_hits,
                )
            )
            if telemetry:
                policy.on_telemetry(
                    TelemetrySample(index, now, kv_usage, running, waiting, preemptions, decode_step_s), now
                )
        self._last_sample_s = now

    def _apply(self, now: float) -> None:
        decision = self.policy.decide(now)
        for request_id in decision.cancels:
            payload = self._admitting_ids.pop(request_id, None)
            if payload is not None:
                del self._admitting[payload]
            for instance in self.instances:
                instance.cancel(request_id)
        if decision.dispatches and self.should_stop is not None and self.should_stop():
            raise RunCancelled(CANCELLED)  # nothing more is dispatched after a cancel
        for dispatch in decision.dispatches:
            record, max_tokens = self.recorder.check_dispatch(dispatch, self.policy.name, len(self.instances))
            prompt = record.request.input_tokens + record.output_tokens
            returns = max_tokens < record.request.target_output_tokens - record.output_tokens  # a slice
            instance = self.instances[dispatch.instance]
            overhead = instance.latency.overhead
            if overhead is None:
                instance.add(
                    dispatch.request_id, prompt, max_tokens, dispatch.priority or 0, record.request.segments, returns
                )
            else:  # the front end holds it first: the engine sees it when its overhead has passed
                self._counter += 1
                payload = self._counter
                self._admitting[payload] = (
                    dispatch.request_id,
                    dispatch.instance,
                    prompt,
                    max_tokens,
                    dispatch.priority or 0,
                    record.request.segments,
                    returns,
                )
                self._admitting_ids[dispatch.request_id] = payload
                delay = overhead.seconds(prompt, len(instance.running))
                if overhead.busy_request_engine_s and instance.running:
                    instance.charge_front_end(overhead.busy_request_engine_s)
                heapq.heappush(self._events, (now + max(delay, MIN_STEP_S), payload, ADMIT, payload))
            self.recorder.dispatched(dispatch.request_id, dispatch.instance, now)
        if decision.wake_at is not None and math.isfinite(decision.wake_at):
            self._push(max(decision.wake_at, now + MIN_STEP_S), WAKE, -1)

    def _start_idle(self, now: float) -> None:
        for index, instance in enumerate(self.instances):
            if not instance.busy and (instance.running or instance.waiting_count):
                duration = instance.start_step()
                if duration is not None:
                    self._counter += 1
                    heapq.heappush(
                        self._events,
                        (now + (duration if duration > MIN_STEP_S else MIN_STEP_S), self._counter, STEP_END, index),
                    )

    def _step_end(self, index: int, now: float) -> bool:
        """Apply a finished step; True if the policy saw an event."""
        instance = self.instances[index]
        outcome = instance.finish_step(now)
        self._tokens_since_sample[index] += outcome.tokens
        if outcome.decode_requests:
            self._decode_steps_since_sample[index] += 1
            self._decode_time_since_sample[index] += outcome.duration_s
        policy = self.policy
        recorder = self.recorder
        if self._first_token_calls:
            for seq in outcome.first_tokens:
                policy.on_first_token(seq.request_id, index, now)
        for seq in outcome.finished:
            record = recorder.step_tokens(
                seq.request_id, index, instance.step_times, seq.runs, seq.generated, seq.preemptions
            )
            recorder.cached(seq.request_id, seq.cached)
            done = record.remaining_tokens <= 0
            policy.on_completion(Completion(seq.request_id, index, seq.generated, record.output_tokens, done), now)
            if done:
                recorder.finish(seq.request_id, now)
        return bool(outcome.first_tokens or outcome.finished)

    def _look(self) -> None:
        """At most every :data:`LOOK_S` of wall time: RunCancelled when ``should_stop`` says so,
        else let the recorder flush what is due."""
        wall = time.perf_counter()
        if wall < self._next_look:
            return
        self._next_look = wall + LOOK_S
        if self.should_stop is not None and self.should_stop():
            raise RunCancelled(CANCELLED)
        self.recorder.maybe_flush()

    def _wait_for_wall_clock(self, now: float, wall_start: float, pace: float) -> None:
        """Sleep until ``now`` simulated seconds map onto the wall clock at ``pace`` simulated
        seconds per wall second, in slices of at most :data:`LOOK_S` with a look (cancel, flush)
        after each, so a paced run streams to its folder and stops promptly at any pace."""
        while True:
            delay = wall_start + now / pace - time.perf_counter()
            if delay <= 0.002:
                return
            time.sleep(min(delay, LOOK_S))
            self._look()

    def run(self) -> DriverResult:
        """Serve every request (or stop: RunCancelled on a cancel, RunStopped at the time limit);
        requests the policy never dispatched fail as stalled.

        The objects that exist when the run starts (the workload, one record per request: a
        million of each in a big run) are hidden from Python's cyclic garbage collector while it
        goes (``gc.freeze``), so its full collections walk only what the run makes since (they
        took seconds of a million-request run, growing with the run). Handed back when the run
        ends unless a caller had frozen objects already (runners.run.benchmark does for the whole
        run, and hands them all back at its end)."""
        owner = gc.get_freeze_count() == 0
        gc.freeze()
        try:
            self._begin()
            now = self._simulate()
            return self._finish(now)
        finally:
            if owner:
                gc.unfreeze()

    def _begin(self) -> None:
        """Show the policy the workload and the instances, at time 0."""
        infos = [instance_info(i, self._beliefs(i, inst), self.planning_model) for i, inst in enumerate(self.instances)]
        self.policy.on_workload(self.requests)
        self.policy.start(infos, 0.0)

    def _beliefs(self, index: int, instance: SimulatedInstance) -> InstanceBeliefs:
        if self.beliefs is not None:
            return self.beliefs[index]
        return InstanceBeliefs.of(instance, "the simulated engine")

    def _simulate(self) -> float:
        """Take the instants in time order until every request has its row or nothing is left that
        could make progress; returns the last instant (seconds). At each: a telemetry sample, the
        arrivals due, or the events due (in that order of precedence at equal times); then the
        policy decides if it saw something, and idle instances start their next step."""
        next_arrival = 0
        next_sample = 0.0
        now = 0.0
        events = self._events
        recorder = self.recorder
        wall_start = time.perf_counter()
        records = len(recorder.records)
        fuse = self.pace is None  # a paced run takes every event on the wall clock
        while recorder.finished_count != records:
            if time.perf_counter() >= self._next_look:  # (what _look checks first, without the call)
                self._look()
            arrival_time = self._next_arrival_s(next_arrival)
            event_time = events[0][0] if events else math.inf
            if arrival_time == math.inf and event_time == math.inf:
                break  # nothing left that could make progress: the policy holds requests forever
            if min(arrival_time, event_time) > self.max_duration_s:
                raise RunStopped(time_limit_message(self.max_duration_s))
            if next_sample <= arrival_time and next_sample <= event_time:
                now = next_sample
                self._sample(now)
                next_sample += self.sample_interval_s
                noticed = True
            elif arrival_time <= event_time:
                now = arrival_time
                next_arrival = self._arrivals(next_arrival, now)
                noticed = True
            else:
                now = event_time
                noticed = self._events_due(now)
            self.elapsed_s = now
            if self.pace is not None:
                self._wait_for_wall_clock(now, wall_start, self.pace)
            if noticed:
                self._apply(now)
            self._start_idle(now)
            if fuse and events:
                arrival_time = self._next_arrival_s(next_arrival)
                now, next_sample = self._silent_steps(now, arrival_time, next_sample)
        return now

    def _silent_steps(self, now: float, arrival_s: float, next_sample: float) -> tuple[float, float]:
        """Apply, in time order, the step ends that the main loop would take next and that no one
        would notice: steps of steady decoders alone that finish none of them (each gives its
        decoders one token), ending before the next arrival (``arrival_s``, seconds), before
        every other event and within the time limit, each followed at once by its instance's
        next step, while every other instance is busy or has no work (so the main loop would
        start no other step either). With a policy whose decisions samples cannot change
        (:func:`_samples_change_nothing`) the samples due before such a step's end are taken
        here too, in their turn; otherwise the next sample (``next_sample``, seconds) ends the
        stretch. The same steps, samples, times and tokens as taking them one by one; at most
        :data:`SILENT_STEPS` steps, so the loop still looks at the wall clock often. Returns the
        last instant applied and the next sample's time (seconds)."""
        events = self._events
        instances = self.instances
        limit = self.max_duration_s
        interval = self.sample_interval_s
        sampling = self._quiet_samples
        horizon = arrival_s if sampling or arrival_s < next_sample else next_sample
        for _ in range(SILENT_STEPS):
            end, _, kind, index = events[0]
            if kind != STEP_END or end >= horizon or end > limit:
                break
            size = len(events)
            if size > 1 and (events[1][0] <= end or (size > 2 and events[2][0] <= end)):
                break  # another event at the same instant: the main loop orders them
            instance = instances[index]
            if not instance.silent_step() or (len(instances) > 1 and not self._others_settled(index)):
                break
            while next_sample <= end:  # (only when sampling: else end < horizon <= next_sample)
                now = next_sample
                self.elapsed_s = now
                self._sample(now)
                next_sample += interval
            heapq.heappop(events)
            self._tokens_since_sample[index] += instance.finish_silent_step(end)
            self._decode_steps_since_sample[index] += 1
            self._decode_time_since_sample[index] += instance.step_duration_s
            now = end
            self.elapsed_s = now
            duration = instance.start_step()
            if duration is not None:
                self._counter += 1
                heapq.heappush(
                    events, (now + (duration if duration > MIN_STEP_S else MIN_STEP_S), self._counter, STEP_END, index)
                )
            if not events:
                break
        return now, next_sample

    def _others_settled(self, index: int) -> bool:
        """Whether every instance but ``index`` is busy or has no work (none would start a step)."""
        return all(
            instance.busy or not (instance.running or instance.waiting_count)
            for position, instance in enumerate(self.instances)
            if position != index
        )

    def _arrivals(self, next_arrival: int, now: float) -> int:
        """Hand the policy every request arriving by ``now`` from index ``next_arrival`` on, then
        the released session turns due; returns the index of the first request yet to arrive."""
        requests = self.requests
        total = len(requests)
        policy = self.policy
        while next_arrival < total and requests[next_arrival].arrival_s <= now:
            policy.on_arrival(requests[next_arrival], now)
            next_arrival += 1
        released = self._released
        while released and released[0][0] <= now:
            policy.on_arrival(heapq.heappop(released)[2], now)
        return next_arrival

    def _events_due(self, now: float) -> bool:
        """Apply every event due by ``now`` (step ends, admissions from the front end, wake-ups);
        True if the policy saw one (a wake-up, a first token or a completion)."""
        events = self._events
        noticed = False
        while events and events[0][0] <= now:
            _, _, kind, payload = heapq.heappop(events)
            if kind == STEP_END:
                noticed = self._step_end(payload, now) or noticed
            elif kind == ADMIT:
                self._admit(payload)
            else:
                noticed = True
        return noticed

    def _admit(self, payload: int) -> None:
        """A dispatch leaves the serving front end and joins its instance's queue."""
        entry = self._admitting.pop(payload, None)
        if entry is not None:  # else cancelled while in the front end
            request_id, index, prompt, max_tokens, priority, segments, returns = entry
            del self._admitting_ids[request_id]
            self.instances[index].add(request_id, prompt, max_tokens, priority, segments, returns)

    def _finish(self, now: float) -> DriverResult:
        """Fail the requests the policy never dispatched (stalled), take the last sample at ``now``."""
        stalled = 0
        if not self.recorder.all_done:
            stalled = self.recorder.fail_unfinished(f"never completed: {self.policy.name} stopped dispatching", now)
        self._sample(now)
        return DriverResult(end_s=now, preemptions=sum(i.preemptions_total for i in self.instances), stalled=stalled)


def _samples_change_nothing(policy: SchedulerPolicy) -> bool:
    """Whether a telemetry sample can change nothing ``policy`` decides: FCFS and the dispatch-on-
    arrival client of the in-engine schedulers (their own ``decide``, a constant in-flight cap)
    that keep the base class's no-op ``on_telemetry``. Their decisions depend only on the
    requests pending and in flight, which change only at arrivals and completions (after
    which they decide anyway), so asking them again at a sample gives nothing. The driver
    then takes the samples between silent steps without a turn of its main loop."""
    if not isinstance(policy, DispatchOnArrival):
        return False
    kind = type(policy)
    return (
        kind.decide is DispatchOnArrival.decide
        and kind.in_flight_cap in (DispatchOnArrival.in_flight_cap, FCFSPolicy.in_flight_cap)
        and kind.on_telemetry is SchedulerPolicy.on_telemetry
    )
