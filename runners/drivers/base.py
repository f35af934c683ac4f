"""What every driver shares: its interface and the result a run returns (the time-series row it
samples is the store's: runners.store.timeseries)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class DriverResult:
    """How a driver's run ended: ``end_s`` (seconds since the run's start, on the driver's clock),
    ``preemptions`` (engine preemptions over the run, all instances) and ``stalled`` (requests
    failed because the policy stopped dispatching them)."""

    end_s: float
    preemptions: int
    stalled: int


class Driver(Protocol):
    """What the benchmark needs of a driver (:mod:`runners.drivers.virtual_time`,
    :mod:`runners.drivers.wall_clock`)."""

    @property
    def elapsed_s(self) -> float:
        """Seconds since the run's start on the driver's clock, as far as the run has got (0.0
        before it has started)."""
        ...

    def run(self) -> DriverResult:
        """Drive the run to its end; raises RunCancelled or RunStopped when it ends early."""
        ...
