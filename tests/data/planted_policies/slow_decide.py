"""Planted fault: a decide call of 50 ms once 10 requests wait (time.sleep reads no clock)."""

import time

from runners.schedulers.base import Decision, SchedulerPolicy


class SlowDecide(SchedulerPolicy):
    name = "planted-slow-decide"

    def decide(self, now: float) -> Decision:
        if len(self.pending) >= 10:
            time.sleep(0.05)
        return Decision([self._take(rid, self.least_loaded_instance()) for rid in list(self.pending)])
