"""Planted fault: a decide that never returns once 3 requests wait."""

from runners.schedulers.base import Decision, SchedulerPolicy


class Hangs(SchedulerPolicy):
    name = "planted-hangs"

    def decide(self, now: float) -> Decision:
        while len(self.pending) >= 3:
            pass
        return Decision(wake_at=now + 0.1)
