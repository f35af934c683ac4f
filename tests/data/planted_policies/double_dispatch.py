"""Planted fault: dispatches every pending request again on each decide while it is in flight."""

from runners.schedulers.base import Decision, Dispatch, SchedulerPolicy


class DoubleDispatch(SchedulerPolicy):
    name = "planted-double-dispatch"

    def decide(self, now: float) -> Decision:
        instance = self.least_loaded_instance()
        flying = [rid for rids in self.in_flight.values() for rid in rids]
        dispatches = [self._take(rid, instance) for rid in list(self.pending)]
        dispatches += [Dispatch(rid, instance) for rid in flying[:1]]  # one already in flight, again
        return Decision(dispatches)
