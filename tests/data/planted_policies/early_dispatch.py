"""Planted fault: dispatches the whole workload at the first decide, before most of it arrived."""

from runners.schedulers.base import Decision, Dispatch, SchedulerPolicy


class EarlyDispatch(SchedulerPolicy):
    name = "planted-early-dispatch"

    def decide(self, now: float) -> Decision:
        if getattr(self, "sent_all", False):
            return Decision()
        self.sent_all = True
        return Decision([Dispatch(request.request_id, 0) for request in self.workload])
