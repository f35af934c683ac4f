"""A prefix-aware baseline (issue 31): prefix-affinity routing across instances and longest cached
prefix first within a bounded wait, as production gateways do it, not from one of the five papers.

Source: llm-d's approximate prefix-cache scorer (llm-d.ai, "Prefix-Cache Aware Routing",
approximate implementation: the gateway splits each prompt into fixed-size blocks, chains their
hashes, keeps an in-memory LRU index of the prefix hashes recently sent to each server, and scores
a server by the share of the prompt's blocks it matched), with the load check of Ray Serve's
PrefixCacheAffinityRouter (affinity only while the servers' loads are balanced within a
threshold, and only for a match of at least a minimum share; otherwise the least-loaded server).

What the policy knows is what a gateway knows: the prompt's content (``Request.segments``, the
block keys of :func:`runners.workload.prefix.block_keys`) and where it sent each one. It never sees
an engine's cache or a request's target length. Its index of an instance holds at most that
instance's KV capacity in blocks (least recently sent dropped first), so it guesses what the
engine still holds, as llm-d's does.

Order: a request that has waited ``max_wait_s`` or more goes first (arrival order, so no request
starves); the others by the share of their blocks their best instance holds, highest first, then
arrival. At most ``max_in_flight`` requests are in flight per instance (the cap that makes the
order matter, the same as FCFS's ``max_in_flight`` for a comparison with the same resources).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from runners.schedulers.base import Completion, Decision, InstanceInfo, PolicyParams, SchedulerPolicy
from runners.schedulers.prefix_index import PrefixIndex
from runners.workload.requests import Request


class PrefixAffinityParams(PolicyParams):
    max_in_flight: int = Field(
        title="most in flight per instance",
        default=16,
        gt=0,
        le=65_536,
        description="at most this many requests in flight per instance (the same cap as fcfs's max_in_flight "
        "gives both the same slots)",
    )
    max_wait_s: float = Field(
        title="bounded wait (s)",
        default=2.0,
        ge=0,
        le=3600.0,
        description="a request waiting this long (seconds since arrival) goes first, in arrival order, "
        "whatever its cached prefix",
    )
    min_match: float = Field(
        title="least match for affinity",
        default=0.1,
        ge=0,
        le=1,
        description="route by affinity only when the best instance holds at least this share of the "
        "prompt's blocks (Ray Serve's 10%); else to the least-loaded instance",
    )
    imbalance: int = Field(
        title="load imbalance allowed (requests)",
        default=4,
        ge=0,
        le=65_536,
        description="route by affinity only while the instance chosen has at most this many more requests "
        "in flight than the least-loaded one",
    )


class PrefixAffinityPolicy(SchedulerPolicy[PrefixAffinityParams]):
    name = "prefix-affinity"
    summary = (
        "Prefix-aware baseline: each instance's recently sent prompt blocks tracked as a gateway does "
        "(llm-d's approximate prefix-cache scorer); route to the instance holding most of a prompt while "
        "loads are balanced; longest cached prefix first, bounded by max_wait_s"
    )
    paper = "llm-d inference scheduler, approximate prefix-cache scorer; Ray Serve PrefixCacheAffinityRouter"
    Params = PrefixAffinityParams

    def start(self, instances: Sequence[InstanceInfo], now: float) -> None:
        super().start(instances, now)
        self.prefix = PrefixIndex(instances)

    def on_arrival(self, request: Request, now: float) -> None:
        super().on_arrival(request, now)
        self.prefix.add(request)

    def on_completion(self, completion: Completion, now: float) -> None:
        super().on_completion(completion, now)
        if completion.done:
            self.prefix.drop(completion.request_id)

    def matched(self, request_id: str, instance: int) -> float:
        """The share (0-1) of the request's full blocks whose chain the instance's index holds."""
        return self.prefix.matched(request_id, instance)

    def choose(self, request_id: str) -> int | None:
        """The instance for ``request_id``: the best-matching one when its match reaches min_match
        and its load is within ``imbalance`` of the least-loaded; else the least-loaded; None
        when every instance is at max_in_flight."""
        cap = self.params.max_in_flight
        open_ = [instance for instance, flying in self.in_flight.items() if len(flying) < cap]
        if not open_:
            return None
        least = min(open_, key=lambda instance: (len(self.in_flight[instance]), instance))
        best = max(open_, key=lambda instance: (self.matched(request_id, instance), -len(self.in_flight[instance])))
        if (
            self.matched(request_id, best) >= self.params.min_match
            and len(self.in_flight[best]) - len(self.in_flight[least]) <= self.params.imbalance
        ):
            return best
        return least

    def _order_key(self, request: Request, now: float) -> tuple[int, float, float]:
        if now - request.arrival_s >= self.params.max_wait_s:
            return (0, 0.0, request.arrival_s)
        share = max(self.matched(request.request_id, instance) for instance in self.in_flight)
        return (1, -share, request.arrival_s)

    def decide(self, now: float) -> Decision:
        dispatches = []
        for request in sorted(self.pending.values(), key=lambda request: self._order_key(request, now)):
            instance = self.choose(request.request_id)
            if instance is None:
                break
            dispatches.append(self._take(request.request_id, instance))
            self.prefix.remember(request.request_id, instance)
        return Decision(dispatches)
