"""Planted fault: a livelock that keeps asking to be woken - it waits for a batch of 1,000
requests that never comes, so requests wait while every instance is idle."""

from runners.schedulers.base import Decision, SchedulerPolicy


class HoldsForever(SchedulerPolicy):
    name = "planted-holds-forever"

    def decide(self, now: float) -> Decision:
        if len(self.pending) < 1000:
            return Decision(wake_at=now + 0.05)
        return Decision([self._take(rid, self.least_loaded_instance()) for rid in list(self.pending)])
