"""Planted fault: a livelock - every decide cancels what is in flight and sends it again."""

from runners.schedulers.base import Decision, SchedulerPolicy


class Livelock(SchedulerPolicy):
    name = "planted-livelock"

    def decide(self, now: float) -> Decision:
        cancels = []
        for rids in self.in_flight.values():
            for rid in list(rids):
                rids.discard(rid)
                self.pending[rid] = self.requests[rid]
                cancels.append(rid)
        dispatches = [self._take(rid, self.least_loaded_instance()) for rid in list(self.pending)]
        return Decision(dispatches, wake_at=now + 0.01, cancels=cancels)
