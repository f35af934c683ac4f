"""Shortest prompt first: of the waiting requests, the one with the fewest prompt tokens (known at
arrival, so no oracle) goes first, to the least-loaded instance, at most ``max_in_flight`` in
flight per instance; ties by arrival. Registered by this package's entry point
``shortest-prompt`` in the group ``schedlab.schedulers``."""

from __future__ import annotations

from pydantic import Field

from runners.schedulers.base import Decision, PolicyParams, SchedulerPolicy


class ShortestPromptParams(PolicyParams):
    max_in_flight: int = Field(default=4, gt=0, le=65_536, description="most requests in flight per instance")


class ShortestPromptFirst(SchedulerPolicy[ShortestPromptParams]):
    name = "shortest-prompt"
    summary = "Shortest prompt first (prompt tokens, known at arrival), at most max_in_flight per instance."
    paper = "examples/shortest_prompt_package (an installed package's entry point)"
    Params = ShortestPromptParams

    def decide(self, now: float) -> Decision:
        dispatches = []
        order = sorted(self.pending.values(), key=lambda r: (r.input_tokens, r.arrival_s))
        for request in order:
            instance = self.least_loaded_instance()
            if len(self.in_flight[instance]) >= self.params.max_in_flight:
                break
            dispatches.append(self._take(request.request_id, instance))
        return Decision(dispatches)
