"""Planted fault: decide raises PolicyError once more than 3 requests wait, without declaring a
max_waiting: a refusal it did not declare is a failure, not n/a."""

from __future__ import annotations

from runners.schedulers.base import Decision, PolicyError
from runners.schedulers.fcfs import FCFSPolicy


class RefusesUndeclared(FCFSPolicy):
    name = "planted-refuses"
    summary = "FCFS that raises PolicyError above 3 waiting, undeclared"

    def decide(self, now: float) -> Decision:
        if len(self.pending) > 3:
            raise PolicyError("too many waiting")
        return super().decide(now)
