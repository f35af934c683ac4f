"""What every driver shares: the result a run returns.

Imports nothing of schedlab's, so any module may import it without pulling in a driver.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DriverResult:
    """How a driver's run ended: ``end_s`` (seconds since the run's start, on the driver's clock),
    ``preemptions`` (engine preemptions over the run, all instances) and ``stalled`` (requests
    failed because the policy stopped dispatching them)."""

    end_s: float
    preemptions: int
    stalled: int
