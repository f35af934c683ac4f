"""FCFS: send every request the moment it arrives; the engine's own continuous batching decides."""

from __future__ import annotations

from runners.schedulers.base import Decision, SchedulerPolicy


class FCFSPolicy(SchedulerPolicy):
    name = "fcfs"
    summary = "Dispatch on arrival to the least-loaded instance; the engine batches (vLLM's default)."
    paper = "baseline in all five papers"

    def decide(self, now: float) -> Decision:
        dispatches = [self._take(request_id, self.least_loaded_instance()) for request_id in list(self.pending)]
        return Decision(dispatches)
