"""Policies that fail in the ways a run must contain (tests/integration/test_policy_failures.py):
FCFS that raises at its first decide 12 s into the run, one whose decide sleeps, and one whose decide never returns."""

from __future__ import annotations

import time

from runners.schedulers.base import Decision
from runners.schedulers.fcfs import FCFSPolicy


class RaisesLater(FCFSPolicy):
    name = "raises-later"
    summary = "FCFS that divides by zero 12 s into the run"

    def decide(self, now: float) -> Decision:
        if now >= 12.0:
            return Decision([], 1 / 0)
        return super().decide(now)


class SlowDecide(FCFSPolicy):
    name = "slow-decide"
    summary = "FCFS whose decide sleeps 0.3 s"

    def decide(self, now: float) -> Decision:
        time.sleep(0.3)
        return super().decide(now)


class SpinsForever(FCFSPolicy):
    name = "spins-forever"
    summary = "FCFS whose 3rd decide never returns"

    def decide(self, now: float) -> Decision:
        self.calls = getattr(self, "calls", 0) + 1
        while self.calls >= 3:
            pass
        return super().decide(now)
