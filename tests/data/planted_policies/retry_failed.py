"""Planted fault: takes a failed request back as pending and sends it again."""

from runners.schedulers.base import Decision, SchedulerPolicy


class RetryFailed(SchedulerPolicy):
    name = "planted-retry-failed"

    def on_failure(self, request_id: str, instance: int, reason: str, now: float) -> None:
        super().on_failure(request_id, instance, reason, now)
        self.pending[request_id] = self.requests[request_id]

    def decide(self, now: float) -> Decision:
        return Decision([self._take(rid, self.least_loaded_instance()) for rid in list(self.pending)])
