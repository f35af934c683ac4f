"""FCFS: send every request the moment it arrives; the engine's own continuous batching decides.
With ``max_in_flight`` it becomes FCFS under a conservative cap (the ILS baseline of SCLS)."""

from __future__ import annotations

from pydantic import Field

from runners.schedulers.base import Decision, Dispatch, P, PolicyParams, SchedulerPolicy


class FCFSParams(PolicyParams):
    max_in_flight: int | None = Field(
        title="max requests in flight per instance",
        default=None,
        gt=0,
        le=65_536,
        description="at most this many requests in flight per instance (None: no cap)",
    )


class DispatchOnArrival(SchedulerPolicy[P]):
    """Send every pending request to the least-loaded instance, at most :meth:`in_flight_cap` in flight per
    instance: FCFS, and the client side of the in-engine schedulers (no cap)."""

    def in_flight_cap(self) -> int | None:
        """Most requests in flight per instance (None: no cap)."""
        return None

    def decide(self, now: float) -> Decision:
        if not self.pending:
            return Decision()
        cap = self.in_flight_cap()
        # the common case, without per-request bookkeeping calls (a class that adds to _take, such
        # as an in-engine policy's engine arguments, goes through it below)
        if cap is None and len(self.in_flight) == 1 and type(self)._take is SchedulerPolicy._take:
            instance, flying = next(iter(self.in_flight.items()))
            dispatches = [Dispatch(request_id, instance) for request_id in self.pending]
            flying.update(self.pending)
            self.pending.clear()
            return Decision(dispatches)
        dispatches = []
        for request_id in list(self.pending):
            instance = self.least_loaded_instance()
            if cap is not None and len(self.in_flight[instance]) >= cap:
                break
            dispatches.append(self._take(request_id, instance))
        return Decision(dispatches)


class FCFSPolicy(DispatchOnArrival[FCFSParams]):
    name = "fcfs"
    summary = "Dispatch on arrival to the least-loaded instance; the engine batches (vLLM's default)."
    paper = "the baseline in all five papers"
    Params = FCFSParams

    def in_flight_cap(self) -> int | None:
        return self.params.max_in_flight
