"""Static batching: a batch of up to B requests per instance; the next batch only after the
whole previous one has finished (run-to-completion at the client). Its KV usage is the
sawtooth of Baton's Fig. 8."""

from __future__ import annotations

from pydantic import Field

from runners.schedulers.base import Decision, PolicyParams, SchedulerPolicy
from runners.schedulers.papers import cite_titles


class StaticBatchingParams(PolicyParams):
    batch_size: int = Field(title="batch size (B)", default=8, gt=0, le=65_536, description="B: requests per batch")
    fill_timeout_s: float = Field(
        title="batch fill timeout (s)",
        default=0.0,
        ge=0,
        le=3600.0,
        description="wait up to this long (seconds) for a full batch before sending a partial one",
    )


class StaticBatchingPolicy(SchedulerPolicy[StaticBatchingParams]):
    name = "static"
    summary = "Fixed batch size B; the next batch starts only when the whole previous batch has finished."
    paper = cite_titles(("000", "001", "002"), "the static-batching baseline of")
    Params = StaticBatchingParams

    def decide(self, now: float) -> Decision:
        params = self.params
        dispatches = []
        wake_at = None
        for instance in sorted(self.in_flight):
            if self.in_flight[instance] or not self.pending:
                continue
            oldest = next(iter(self.pending.values())).arrival_s
            if len(self.pending) < params.batch_size and now < oldest + params.fill_timeout_s:
                wake_at = oldest + params.fill_timeout_s
                continue
            for request_id in list(self.pending)[: params.batch_size]:
                dispatches.append(self._take(request_id, instance))
        return Decision(dispatches, wake_at)
