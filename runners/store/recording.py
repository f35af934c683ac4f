"""What a driver measures while a run goes: one record per request, engine samples, and the
bridge to the result store. Both drivers (virtual time and wall clock) use it."""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from runners.metrics.contention import contention
from runners.metrics.outcomes import NOT_SENT_ERRORS, SESSION_ENDED, outcome_of
from runners.metrics.request_metrics import inter_token_latencies
from runners.metrics.run_metrics import SUMMARY_COLUMNS, distribution, summarize_requests, weighted_distribution
from runners.metrics.sessions import SESSION_COLUMNS, session_summary
from runners.schedulers.base import Dispatch, PolicyError
from runners.store.result_store import REQUEST_COLUMNS, RunWriter, table_from_rows
from runners.store.timeseries import TIMESERIES_NAMES, TimeseriesRow
from runners.workload.requests import FOLLOWS, Request


@dataclass(slots=True)
class RequestRecord:
    """Timestamps (seconds since run start) and counts for one request, filled in as it runs."""

    request: Request
    dispatch_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finish_s: float | None = None
    output_tokens: int = 0
    slices: int = 0
    preemptions: int = 0
    instance: int | None = None
    error: str | None = None
    itl_max_s: float | None = None
    done: bool = False
    #: prompt tokens the engine found in its prefix cache, summed over the request's dispatches; None: not reported
    cached_tokens: int | None = None

    @property
    def remaining_tokens(self) -> int:
        return self.request.target_output_tokens - self.output_tokens

    def row_values(self) -> tuple:
        """The ``requests.parquet`` row as a tuple in :data:`REQUEST_COLUMNS` order, with the
        per-request metrics (:func:`runners.metrics.request_metrics.request_latencies`, from
        arrival) and the SLO verdict."""
        request = self.request
        arrival = request.arrival_s
        dispatch = self.dispatch_s
        ttft = tpot = e2e = None
        queue = None if dispatch is None else dispatch - arrival
        met = False
        if self.error is None and self.finish_s is not None and self.first_token_s is not None:
            ttft = self.first_token_s - arrival
            e2e = self.finish_s - arrival
            tpot = (e2e - ttft) / (self.output_tokens - 1) if self.output_tokens > 1 else None
            queue = (dispatch or arrival) - arrival
            met = request.slo.is_met(ttft, tpot, e2e)
        return (
            request.request_id,
            request.task,
            arrival,
            dispatch,
            self.first_token_s,
            self.finish_s,
            request.input_tokens,
            self.output_tokens,
            request.target_output_tokens,
            ttft,
            tpot,
            e2e,
            queue,
            met,
            self.instance,
            self.slices,
            self.error,
            self.preemptions,
            self.itl_max_s,
            request.session or None,
            request.turn or None,
            self.cached_tokens,
        )

    def to_row(self) -> dict[str, Any]:
        """One ``requests.parquet`` row, with the per-request metrics and SLO verdict."""
        return dict(zip(REQUEST_NAMES, self.row_values()))


REQUEST_NAMES = tuple(REQUEST_COLUMNS)
_T_S, _INSTANCE, _WAITING, _PREEMPTIONS, _PENDING = (
    TIMESERIES_NAMES.index(name) for name in ("t_s", "instance", "waiting", "preemptions", "gateway_pending")
)
_REQUEST_SCHEMA = pa.schema([pa.field(name, dtype) for name, dtype in REQUEST_COLUMNS.items()])


class RowStore:
    """Every row of a run as tuples in column order, compacted into Arrow tables every
    ``chunk_rows`` rows (a few bytes a value instead of Python objects). Appends come from one
    thread; :meth:`table` may be called from another (a flush worker) at the same time."""

    def __init__(self, schema: pa.Schema, chunk_rows: int = 8192) -> None:
        self.schema = schema
        self.chunk_rows = chunk_rows
        self.pending: list[tuple] = []
        self.chunks: list[pa.Table] = []
        self.count = 0
        self._lock = threading.Lock()

    def append(self, values: tuple) -> None:
        self.pending.append(values)
        self.count += 1
        if len(self.pending) >= self.chunk_rows:
            with self._lock:
                self.chunks.append(table_from_rows(self.pending, self.schema))
                self.pending = []

    def __len__(self) -> int:
        return self.count

    def table(self) -> pa.Table:
        """Every row so far as one table."""
        with self._lock:
            chunks = list(self.chunks)
            pending = list(self.pending)
        return pa.concat_tables([*chunks, table_from_rows(pending, self.schema)])


class RowsView(Sequence):
    """The request rows so far as read-only mappings (column -> value), in finish order."""

    def __init__(self, store: RowStore) -> None:
        self._store = store

    def __len__(self) -> int:
        return len(self._store)

    def __getitem__(self, index: Any) -> Any:  # an int gives one row, a slice a list of rows
        rows = self._store.table().to_pylist()
        return rows[index]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        table = self._store.table()
        for batch in table.to_batches(max_chunksize=65536):
            yield from batch.to_pylist()


class _Gaps:
    """Every inter-token gap of a run, in the order :meth:`RunRecorder.tokens` met them: float32
    values given one by one, and runs of consecutive steps of a simulated engine (the gaps
    between its successive step end times, taken when the summary needs them)."""

    def __init__(self) -> None:
        self.values = array("f")
        # (source, a, b): source -1: values[a:a+b]; else the gaps of steps a..b-1 of that source
        self.log = array("q")
        self.steps: dict[int, array] = {}
        self.count = 0

    def add_values(self, gaps: np.ndarray) -> None:
        if gaps.size:
            self.log.extend((-1, len(self.values), gaps.size))
            self.values.frombytes(gaps.astype(np.float32).tobytes())
            self.count += int(gaps.size)

    def add_value(self, gap: float) -> None:
        self.log.extend((-1, len(self.values), 1))
        self.values.append(gap)
        self.count += 1

    def add_run(self, source: int, steps: array, start: int, end: int) -> None:
        """The gaps between the end times ``steps[start:end]`` (end exclusive, at least 2 apart)."""
        self.steps[source] = steps
        self.log.extend((source, start, end))
        self.count += end - start - 1

    def _step_gaps(self) -> dict[int, np.ndarray]:
        return {
            source: np.diff(np.frombuffer(steps, dtype=np.float64)).astype(np.float32)
            for source, steps in self.steps.items()
        }

    def ordered(self) -> np.ndarray:
        """Every gap (float32), in order."""
        step_gaps = self._step_gaps()
        values = np.frombuffer(self.values, dtype=np.float32) if len(self.values) else np.zeros(0, np.float32)
        log = np.frombuffer(self.log, dtype=np.int64).reshape(-1, 3).tolist() if len(self.log) else []
        pieces = [values[a : a + b] if source < 0 else step_gaps[source][a : b - 1] for source, a, b in log]
        return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)

    def weighted(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct-position gaps and how often each occurs (float32 values, int64 counts)."""
        log = np.frombuffer(self.log, dtype=np.int64).reshape(-1, 3) if len(self.log) else np.zeros((0, 3), np.int64)
        values = [np.frombuffer(self.values, dtype=np.float32)] if len(self.values) else []
        counts = [np.ones(len(self.values), dtype=np.int64)] if len(self.values) else []
        for source, gaps in self._step_gaps().items():
            runs = log[log[:, 0] == source]
            size = len(gaps) + 1
            cover = np.bincount(runs[:, 1], minlength=size) - np.bincount(runs[:, 2] - 1, minlength=size)
            weight = np.cumsum(cover)[: len(gaps)]
            used = weight > 0
            values.append(gaps[used])
            counts.append(weight[used])
        if not values:
            return np.zeros(0, np.float32), np.zeros(0, np.int64)
        return np.concatenate(values), np.concatenate(counts)


#: Up to this many gaps the ITL mean is numpy's over the list of every gap in order, and the
#: percentiles come from (value, count) pairs when the gaps repeat (a simulated engine's gaps are
#: its few step durations: the same order statistics bit for bit, without partitioning millions
#: of values). Above it the list is not built: the mean is summed from the pairs in another
#: order (to ~1e-15).
ITL_LIST_LIMIT = 20_000_000


_largest = np.maximum.reduce

#: Most of the wall time the interim summaries (summary.json while a run goes) may take.
SUMMARY_COST_SHARE = 0.05


@dataclass
class RunRecorder:
    """Holds every record, streams finished rows and samples to the writer, builds summaries."""

    requests: Sequence[Request]
    writer: RunWriter | None = None
    progress: Callable[[int, int], None] | None = None
    records: dict[str, RequestRecord] = field(init=False)
    preemptions_by_instance: dict[int, int] = field(default_factory=dict)
    finished_count: int = 0  # request rows so far (every outcome)
    failed_count: int = 0  # of which failed (runners.metrics.outcomes: not cancelled, not "not run")
    cancelled_count: int = 0  # of which in flight when the run was cancelled
    not_run_count: int = 0  # of which never sent: the run ended first
    #: Called with a multi-turn session's next turn when it is released: its previous turn has ended,
    #: and its ``arrival_s`` is now that turn's last token plus its think time (seconds). The driver
    #: hands it to the policy at that time.
    on_release: Callable[[Request], None] | None = None

    def __post_init__(self) -> None:
        self.records = {request.request_id: RequestRecord(request) for request in self.requests}
        # a session's turn id -> the id of the turn that waits for it to end
        self._next_turn = {request.after: request.request_id for request in self.requests if request.after}
        self._sessions = bool(self.requests) and bool(self.requests[0].session)  # a multi-turn run's are all turns
        self._rows = RowStore(_REQUEST_SCHEMA)
        self._gaps = _Gaps()
        # (t_s, instance, waiting, gateway_pending) of every sample, for the contention summary
        self._samples = {name: array("d") for name in ("t_s", "instance", "waiting", "gateway_pending")}
        self._sample_t_s, self._sample_instance, self._sample_waiting, self._sample_pending = self._samples.values()
        self._summary_after = 0.0  # time.monotonic() before which no interim summary is computed

    @property
    def rows(self) -> RowsView:
        """The request rows written so far (finished or failed requests), in finish order."""
        return RowsView(self._rows)

    # -- events from drivers ---------------------------------------------------------------------
    def check_dispatch(self, dispatch: Dispatch, policy_name: str, instances: int) -> tuple[RequestRecord, int]:
        """The record and the token count to ask for; PolicyError for an impossible dispatch."""
        record = self.records.get(dispatch.request_id)
        if record is None or record.done:
            raise PolicyError(f"{policy_name} dispatched unknown or finished request {dispatch.request_id!r}")
        if not 0 <= dispatch.instance < instances:
            raise PolicyError(f"{policy_name} dispatched to instance {dispatch.instance}, which does not exist")
        remaining = record.remaining_tokens
        max_tokens = remaining if dispatch.max_tokens is None else min(dispatch.max_tokens, remaining)
        if max_tokens <= 0:
            raise PolicyError(f"{policy_name} dispatched {dispatch.request_id} with max_tokens {max_tokens}")
        return record, max_tokens

    def cached(self, request_id: str, tokens: int | None) -> None:
        """A dispatch of ``request_id`` found ``tokens`` prompt tokens in the engine's prefix cache
        (None: not reported, which changes nothing)."""
        if tokens is not None:
            record = self.records[request_id]
            record.cached_tokens = tokens + (record.cached_tokens or 0)

    def dispatched(self, request_id: str, instance: int, now: float) -> RequestRecord:
        record = self.records[request_id]
        if record.dispatch_s is None:
            record.dispatch_s = now
        record.instance = instance
        record.slices += 1
        return record

    def tokens(
        self, request_id: str, token_times_s: Sequence[float], tokens: int, preemptions: int = 0
    ) -> RequestRecord:
        """A dispatch of ``request_id`` produced ``tokens`` tokens whose chunks arrived at ``token_times_s``."""
        record = self.records[request_id]
        if not token_times_s:
            return record
        if record.first_token_s is None:
            record.first_token_s = token_times_s[0]
        times = token_times_s if record.last_token_s is None else [record.last_token_s, *token_times_s]
        gaps = inter_token_latencies(times)
        if gaps.size:
            self._gaps.add_values(gaps)
            largest = float(gaps.max())
            record.itl_max_s = largest if record.itl_max_s is None else max(record.itl_max_s, largest)
        record.last_token_s = token_times_s[-1]
        record.output_tokens += tokens
        record.preemptions += preemptions
        return record

    def step_tokens(
        self, request_id: str, source: int, step_times_s: array, runs: Sequence[int], tokens: int, preemptions: int = 0
    ) -> RequestRecord:
        """As :meth:`tokens`, for a simulated engine: the token times are ``step_times_s[i]`` for
        ``i`` in the runs ``runs`` (flat ``[start, end)`` pairs of step indices, in order) of the
        engine ``source`` (an index of its own; ``step_times_s`` is its growing list of step end
        times, seconds)."""
        record = self.records[request_id]
        if not runs:
            return record
        gaps = self._gaps
        first = step_times_s[runs[0]]
        if record.first_token_s is None:
            record.first_token_s = first
        largest = None
        previous = record.last_token_s
        for position in range(0, len(runs), 2):
            start, end = runs[position], runs[position + 1]
            if previous is not None:
                gap = step_times_s[start] - previous
                gaps.add_value(gap)
                largest = gap if largest is None or gap > largest else largest
            if end - start > 1:
                gaps.add_run(source, step_times_s, start, end)
                times = np.frombuffer(step_times_s, np.float64, end - start, 8 * start)
                top = float(_largest(times[1:] - times[:-1]))  # np.diff(times).max(), fewer calls
                largest = top if largest is None or top > largest else largest
            previous = step_times_s[end - 1]
        if largest is not None:
            record.itl_max_s = largest if record.itl_max_s is None else max(record.itl_max_s, largest)
        record.last_token_s = previous
        record.output_tokens += tokens
        record.preemptions += preemptions
        return record

    def finish(self, request_id: str, now: float, error: str | None = None) -> None:
        """The request is done (all tokens) or ended for good (``error`` says why: a failure, or the
        run's end; :func:`runners.metrics.outcomes.outcome_of` tells which). ``progress`` hears
        ``(requests that ran so far, requests)``: a request never sent is not counted as run.

        A multi-turn session's next turn is then released (:attr:`on_release`), or, when this turn
        did not complete, it and the session's later turns get rows too: never sent, with the run's
        end status when the run ended, else :data:`SESSION_ENDED`."""
        self._close(request_id, now, error)
        if not self._next_turn:
            return
        following = self._next_turn.pop(request_id, None)
        if following is None:
            return
        record = self.records[request_id]
        if error is None:
            waiting = self.records[following]
            ended = record.finish_s if record.finish_s is not None else now
            waiting.request = replace(waiting.request, arrival_s=ended + waiting.request.think_s)
            if self.on_release is not None:
                self.on_release(waiting.request)
            return
        reason = error if error in NOT_SENT_ERRORS else SESSION_ENDED
        while following is not None:
            self._close(following, now, reason)
            following = self._next_turn.pop(following, None)

    def _close(self, request_id: str, now: float, error: str | None) -> None:
        """:meth:`finish` of one request: its row (a turn never released arrives ``now``)."""
        record = self.records[request_id]
        if record.done:
            return
        if record.request.arrival_s == FOLLOWS:
            record.request = replace(record.request, arrival_s=now)
        record.done = True
        record.error = error
        record.finish_s = record.last_token_s if error is None else now
        values = record.row_values()
        self._rows.append(values)
        if self.writer is not None:
            self.writer.add_request_values(values)
        self.finished_count += 1
        if error is not None:
            outcome = outcome_of(error, record.dispatch_s, record.finish_s)
            if outcome == "not_run":
                self.not_run_count += 1
                return  # it did not run: progress stays where it was
            if outcome == "cancelled":
                self.cancelled_count += 1
            else:
                self.failed_count += 1
        if self.progress is not None:
            self.progress(self.finished_count - self.not_run_count, len(self.records))

    def sample(self, row: TimeseriesRow) -> None:
        """One instance's telemetry sample: written to the time series, kept for the contention
        summary, and its preemption count (since the run's start) noted for the instance."""
        self.sample_values(row.values())

    def sample_values(self, values: tuple) -> None:
        """:meth:`sample` of a row given as its values in :data:`TIMESERIES_NAMES` order."""
        if self.writer is not None:
            self.writer.add_sample_values(values)
        instance = values[_INSTANCE]
        preemptions = values[_PREEMPTIONS]
        if preemptions is not None:
            self.preemptions_by_instance[instance] = preemptions
        waiting = values[_WAITING]
        self._sample_t_s.append(values[_T_S])
        self._sample_instance.append(instance)
        self._sample_waiting.append(np.nan if waiting is None else waiting)
        self._sample_pending.append(values[_PENDING])

    # -- summaries ---------------------------------------------------------------------------
    @property
    def all_done(self) -> bool:
        return self.finished_count == len(self.records)

    def fail_unfinished(self, reason: str, now: float) -> int:
        """Close every unfinished request's row with ``error`` = ``reason``; returns how many. With
        a run's end status as ``reason`` (``cancelled``, ``failed``: runners.run.benchmark), a request
        never sent is *not run* and one in flight when the run was cancelled is *cancelled*, not
        failed (:mod:`runners.metrics.outcomes`); any other reason (a stalled scheduler) fails
        them all."""
        count = 0
        for request_id, record in self.records.items():
            if not record.done:
                self.finish(request_id, now, error=reason)
                count += 1
        return count

    def itl_distribution(self) -> dict[str, float | None]:
        """mean / median / p90 / p99 of every inter-token gap so far, seconds."""
        gaps = self._gaps
        values, counts = gaps.weighted()
        if gaps.count > ITL_LIST_LIMIT:
            return weighted_distribution(values, counts)
        every = gaps.ordered()
        if 4 * len(values) > len(every):  # few repeats (a real engine's gaps): one partition is quicker
            return distribution(every)
        return weighted_distribution(values, counts, mean_of=every)

    def summary(self, include_itl: bool = True) -> dict[str, Any]:
        """Summary metrics of the rows so far, and ``contention`` of the samples so far
        (:func:`runners.metrics.contention.contention`); ITL percentiles (over every token gap)
        only when ``include_itl``, since they cost a pass over all gaps."""
        # the columns the summary reads (not the request ids: a million strings in a big run), with
        # a multi-turn run's session columns in the same pass over the rows
        columns = list(dict.fromkeys([*SUMMARY_COLUMNS, *SESSION_COLUMNS])) if self._sessions else list(SUMMARY_COLUMNS)
        frame = self._rows.table().select(columns).to_pandas()
        summary = summarize_requests(frame, preemptions=sum(self.preemptions_by_instance.values()))
        summary["itl_s"] = self.itl_distribution() if include_itl else distribution([])
        summary["requests_total"] = len(self.records)
        count = len(self._samples["gateway_pending"])
        samples = pd.DataFrame(
            {name: np.frombuffer(values, dtype=np.float64)[:count].copy() for name, values in self._samples.items()}
        )
        samples["instance"] = samples["instance"].astype(np.int64)
        summary["contention"] = contention(samples)
        if self._sessions:
            sessions = session_summary(frame)
            if sessions is not None:
                summary.update(sessions)
        return summary

    def flush_due(self) -> bool:
        return self.writer is not None and self.writer.due()

    def flush(self) -> None:
        """Write buffered rows, and an interim summary every ``flush_seconds`` and no more often
        than :data:`SUMMARY_COST_SHARE` of the wall time allows (a summary is a pass over every
        row so far: on a run of a million rows it can cost more than the flush interval). May
        run in a worker thread."""
        if self.writer is None:
            return
        summary = None
        if self.writer.summary_due() and time.monotonic() >= self._summary_after:
            started = time.monotonic()
            summary = self.summary(include_itl=False)
            self._summary_after = started + (time.monotonic() - started) / SUMMARY_COST_SHARE
        self.writer.flush(summary)

    def maybe_flush(self) -> None:
        if self.flush_due():
            self.flush()
