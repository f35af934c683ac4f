"""What a driver measures while a run goes: one record per request, engine samples, and the
bridge to the result store. Both drivers (virtual time and wall clock) use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from runners.metrics.contention import contention
from runners.metrics.request_metrics import inter_token_latencies, request_latencies
from runners.metrics.run_metrics import summarize_requests
from runners.result_store import REQUEST_COLUMNS, RunWriter
from runners.schedulers.base import Dispatch, PolicyError
from runners.workload.requests import Request


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

    @property
    def remaining_tokens(self) -> int:
        return self.request.target_output_tokens - self.output_tokens

    def to_row(self) -> dict[str, Any]:
        """One ``requests.parquet`` row, with the per-request metrics and SLO verdict."""
        request = self.request
        row: dict[str, Any] = {
            "request_id": request.request_id,
            "task": request.task,
            "arrival_s": request.arrival_s,
            "dispatch_s": self.dispatch_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "input_tokens": request.input_tokens,
            "output_tokens": self.output_tokens,
            "target_output_tokens": request.target_output_tokens,
            "ttft_s": None,
            "tpot_s": None,
            "e2e_s": None,
            "queue_s": None if self.dispatch_s is None else self.dispatch_s - request.arrival_s,
            "slo_met": False,
            "instance": self.instance,
            "slices": self.slices,
            "error": self.error,
            "preemptions": self.preemptions,
            "itl_max_s": self.itl_max_s,
        }
        if self.error is None and self.finish_s is not None and self.first_token_s is not None:
            latencies = request_latencies(
                request.arrival_s, self.dispatch_s or request.arrival_s, self.first_token_s, self.finish_s,
                self.output_tokens,
            )
            row.update(ttft_s=latencies.ttft_s, tpot_s=latencies.tpot_s, e2e_s=latencies.e2e_s, queue_s=latencies.queue_s)
            row["slo_met"] = request.slo.is_met(latencies.ttft_s, latencies.tpot_s, latencies.e2e_s)
        return row


@dataclass
class RunRecorder:
    """Holds every record, streams finished rows and samples to the writer, builds summaries."""

    requests: Sequence[Request]
    writer: RunWriter | None = None
    progress: Callable[[int, int], None] | None = None
    records: dict[str, RequestRecord] = field(init=False)
    rows: list[dict[str, Any]] = field(default_factory=list)
    itl_gaps: list[np.ndarray] = field(default_factory=list)
    preemptions_by_instance: dict[int, int] = field(default_factory=dict)
    # (t_s, instance, waiting, gateway_pending) of every sample, for the contention summary
    waiting_samples: list[tuple[float, int, Any, Any]] = field(default_factory=list)
    finished_count: int = 0

    def __post_init__(self) -> None:
        self.records = {request.request_id: RequestRecord(request) for request in self.requests}

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

    def dispatched(self, request_id: str, instance: int, now: float) -> RequestRecord:
        record = self.records[request_id]
        if record.dispatch_s is None:
            record.dispatch_s = now
        record.instance = instance
        record.slices += 1
        return record

    def tokens(self, request_id: str, token_times_s: Sequence[float], tokens: int, preemptions: int = 0) -> RequestRecord:
        """A dispatch of ``request_id`` produced ``tokens`` tokens whose chunks arrived at ``token_times_s``."""
        record = self.records[request_id]
        if not token_times_s:
            return record
        if record.first_token_s is None:
            record.first_token_s = token_times_s[0]
        times = token_times_s if record.last_token_s is None else [record.last_token_s, *token_times_s]
        gaps = inter_token_latencies(times)
        if gaps.size:
            self.itl_gaps.append(gaps.astype(np.float32))
            largest = float(gaps.max())
            record.itl_max_s = largest if record.itl_max_s is None else max(record.itl_max_s, largest)
        record.last_token_s = token_times_s[-1]
        record.output_tokens += tokens
        record.preemptions += preemptions
        return record

    def finish(self, request_id: str, now: float, error: str | None = None) -> None:
        """The request is done (all tokens) or failed for good (``error`` says why)."""
        record = self.records[request_id]
        if record.done:
            return
        record.done = True
        record.error = error
        record.finish_s = record.last_token_s if error is None else now
        row = record.to_row()
        self.rows.append(row)
        if self.writer is not None:
            self.writer.add_request(row)
        self.finished_count += 1
        if self.progress is not None:
            self.progress(self.finished_count, len(self.records))

    def sample(self, row: dict[str, Any]) -> None:
        if self.writer is not None:
            self.writer.add_sample(row)
        if row.get("preemptions") is not None:
            self.preemptions_by_instance[int(row["instance"])] = int(row["preemptions"])
        self.waiting_samples.append((row["t_s"], row["instance"], row.get("waiting"), row.get("gateway_pending")))

    # -- summaries ---------------------------------------------------------------------------
    @property
    def all_done(self) -> bool:
        return self.finished_count == len(self.records)

    def fail_unfinished(self, reason: str, now: float) -> int:
        """Record every unfinished request as failed with ``reason``; returns how many."""
        count = 0
        for request_id, record in self.records.items():
            if not record.done:
                self.finish(request_id, now, error=reason)
                count += 1
        return count

    def summary(self, include_itl: bool = True) -> dict[str, Any]:
        """Summary metrics of the rows so far, and ``contention`` of the samples so far
        (:func:`runners.metrics.contention.contention`); ITL percentiles (over every token gap)
        only when ``include_itl``, since they cost a pass over all gaps."""
        frame = pd.DataFrame(list(self.rows), columns=list(REQUEST_COLUMNS))
        gaps = np.concatenate(self.itl_gaps) if include_itl and self.itl_gaps else None
        summary = summarize_requests(frame, preemptions=sum(self.preemptions_by_instance.values()), itl_gaps_s=gaps)
        summary["requests_total"] = len(self.records)
        summary["contention"] = contention(
            pd.DataFrame(self.waiting_samples, columns=["t_s", "instance", "waiting", "gateway_pending"]))
        return summary

    def flush_due(self) -> bool:
        return self.writer is not None and self.writer.due()

    def flush(self) -> None:
        """Write buffered rows and an interim summary (may run in a worker thread)."""
        if self.writer is not None:
            self.writer.flush(self.summary(include_itl=False))

    def maybe_flush(self) -> None:
        if self.flush_due():
            self.flush()
