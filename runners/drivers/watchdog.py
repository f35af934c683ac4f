"""The rules that end a wall-clock run early, apart from the loops that apply them.

At every telemetry sample the wall-clock driver hands a :class:`RunState` to
:meth:`Watchdog.stop_reason`, which names the first rule that fires (None: the run goes on):

1. a stall: every request has arrived, none is being served, the policy holds some and has asked
   for no wake-up, so nothing could ever dispatch them;
2. an engine instance's server process has exited;
3. the time limit: more than ``max_duration_s`` seconds since the run's start.

The cancel rule (:meth:`Watchdog.cancel_requested`) is the user's stop request, ``should_stop``,
which the driver polls on its own schedule (every ``STOP_POLL_S``, warm-up included).
The messages are shared with the virtual-time driver and the benchmark (:func:`stalled_message`,
:func:`time_limit_message`), so a run stopped for one reason reads the same on either driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: The reason a run cancelled by its user ends with.
CANCELLED = "cancelled by the user"


def stalled_message(requests: int, policy_name: str) -> str:
    """Why a run ended with ``requests`` requests the policy ``policy_name`` never dispatched."""
    return f"{requests} requests never completed: {policy_name} stopped dispatching"


def time_limit_message(max_duration_s: float) -> str:
    """Why a run ended at its time limit, ``max_duration_s`` seconds."""
    return f"time limit: not finished after max_duration_s = {max_duration_s:g} s"


@dataclass(frozen=True)
class DeadInstance:
    """An engine instance whose server process exited: its index, base URL and exit code."""

    index: int
    base_url: str
    exit_code: int


@dataclass(frozen=True)
class RunState:
    """What the stop rules look at, at one telemetry sample."""

    now_s: float  # seconds since the run's start
    arrivals_done: bool  # every request has arrived (been handed to the policy)
    requests_in_flight: int  # dispatches being served (request tasks not yet ended)
    pending: int  # requests the policy holds, not dispatched
    wake_at: float | None  # when the policy asked to be woken (seconds since the start), if it did
    all_done: bool  # every request has its row (finished or failed)
    dead: Sequence[DeadInstance] = ()  # engine instances whose process has exited


class Watchdog:
    """The stop and cancel rules of one run (see the module docstring). ``policy_name`` names the
    policy in a stall's reason; ``max_duration_s`` is the time limit in seconds; ``should_stop``,
    when given, says whether the user asked to stop."""

    def __init__(
        self, *, policy_name: str, max_duration_s: float, should_stop: Callable[[], bool] | None = None
    ) -> None:
        self.policy_name = policy_name
        self.max_duration_s = max_duration_s
        self.should_stop = should_stop

    def stop_reason(self, state: RunState) -> str | None:
        """The reason of the first stop rule that fires on ``state``, or None."""
        if (
            state.arrivals_done
            and not state.requests_in_flight
            and state.pending
            and state.wake_at is None
            and not state.all_done
        ):
            return stalled_message(state.pending, self.policy_name)
        if state.dead:
            dead = state.dead[0]
            return f"engine instance {dead.index} ({dead.base_url}) exited with code {dead.exit_code}"
        if state.now_s > self.max_duration_s:
            return time_limit_message(self.max_duration_s)
        return None

    @property
    def cancellable(self) -> bool:
        """True when there is a stop request to poll."""
        return self.should_stop is not None

    def cancel_requested(self) -> bool:
        """True when the user asked to stop (never without ``should_stop``)."""
        return self.should_stop is not None and self.should_stop()
