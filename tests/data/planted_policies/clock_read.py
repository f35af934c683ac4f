"""Planted fault: reads the wall clock inside decide (imported by name, not as time.monotonic)."""

from time import monotonic

from runners.schedulers.base import Decision, SchedulerPolicy


class ClockRead(SchedulerPolicy):
    name = "planted-clock-read"

    def decide(self, now: float) -> Decision:
        self.last_look = monotonic()
        return Decision([self._take(rid, self.least_loaded_instance()) for rid in list(self.pending)])
