"""What every driver shares: its interface and the result a run returns (the time-series row it
samples is the store's: runners.store.timeseries)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runners.engines.beliefs import LIMIT_NAMES, InstanceBeliefs
from runners.engines.latency_model import LatencyModel
from runners.schedulers.base import InstanceInfo


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


def instance_info(index: int, beliefs: InstanceBeliefs, latency_model: LatencyModel | None = None) -> InstanceInfo:
    """The :class:`InstanceInfo` a policy gets for an instance with ``beliefs``: the one path
    both the simulator's and the real engine's drivers take."""
    return InstanceInfo(
        index,
        beliefs.value("kv_capacity_tokens"),
        beliefs.value("block_size"),
        beliefs.value("max_num_seqs"),
        latency_model,
        max_num_batched_tokens=beliefs.value("max_num_batched_tokens"),
        prefix_caching=beliefs.value("prefix_caching"),
        sources={name: getattr(beliefs, name).source for name in LIMIT_NAMES},
    )
