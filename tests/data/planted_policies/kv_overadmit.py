"""Planted fault: claims to keep within the KV cache, yet dispatches every request on arrival."""

from runners.schedulers.base import Decision, SchedulerPolicy


class OverAdmit(SchedulerPolicy):
    name = "planted-kv-overadmit"
    admission_limits = frozenset({"kv"})

    def decide(self, now: float) -> Decision:
        return Decision([self._take(rid, self.least_loaded_instance()) for rid in list(self.pending)])
