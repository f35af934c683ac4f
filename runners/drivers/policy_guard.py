"""Containing a policy's failures (issue 30): a scheduler that raises, or whose ``decide`` runs
past the run's limit (``scheduler.decide_limit_s``, seconds), fails its run - with a one-line
reason in the summary that names the scheduler, the method and the line, and the traceback in the
run folder's ``run.log`` - while every row measured until then is kept and a study goes on with
its other runs.

How a long ``decide`` is stopped: :func:`guard_decide` wraps the policy object's ``decide`` (one
timer read before and after each call); a watchdog thread looks every :data:`LOOK_S` and, when a
call has run past the limit, raises :class:`DecideOverrun` inside the thread running it
(``PyThreadState_SetAsyncExc``: it lands at the policy's next Python bytecode, so a policy stuck
in one long C call, such as a sleep, is stopped when that call returns). A call that returns
after the limit fails the run the same way.
"""

from __future__ import annotations

import ctypes
import linecache
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

#: Seconds between the watchdog's looks at the running ``decide`` call.
LOOK_S = 0.02
#: The file in the run folder that holds the traceback of the exception that failed the run.
RUN_LOG = "run.log"


class DecideOverrun(RuntimeError):
    """A policy's ``decide`` ran past the run's decide-time limit."""


class DecideGuard:
    """Times ``policy.decide`` and stops a call that runs past ``limit_s`` seconds (see the module
    doc). ``close()`` stops the watchdog; the policy keeps the wrapper (harmless after the run)."""

    def __init__(self, policy: Any, limit_s: float) -> None:
        self.policy = policy
        self.limit_s = limit_s
        self.slowest_s = 0.0
        self._started: float | None = None
        self._thread_id: int | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        inner: Callable[[float], Any] = policy.decide
        guard = self

        def decide(now: float) -> Any:
            guard._thread_id = threading.get_ident()
            began = guard._started = time.perf_counter()
            try:
                decision = inner(now)
            except DecideOverrun:  # raised in it by the watchdog: say how long it ran
                raise DecideOverrun(guard.overrun_text(time.perf_counter() - began)) from None
            finally:
                with guard._lock:
                    guard._started = None
            elapsed = time.perf_counter() - began
            if elapsed > guard.slowest_s:
                guard.slowest_s = elapsed
                if elapsed > guard.limit_s:
                    raise DecideOverrun(guard.overrun_text(elapsed))
            return decision

        policy.decide = decide
        self._watchdog = threading.Thread(target=self._watch, name="schedlab-decide-watchdog", daemon=True)
        self._watchdog.start()

    def overrun_text(self, elapsed_s: float | None = None) -> str:
        took = f"ran {elapsed_s:.3g} s" if elapsed_s is not None else "was still running"
        return (
            f"decide {took}, past the decide-time limit of {self.limit_s:g} s "
            "(scheduler.decide_limit_s; check its speed with 'python -m runners check-scheduler')"
        )

    def _watch(self) -> None:
        while not self._closed.wait(LOOK_S):
            with self._lock:
                started, thread = self._started, self._thread_id
                if started is None or thread is None or time.perf_counter() - started <= self.limit_s:
                    continue
                self._started = None  # one exception per call
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(DecideOverrun))

    def close(self) -> None:
        self._closed.set()


def _policy_frame(policy: Any, tb: TracebackType | None) -> tuple[str, str, int] | None:
    """(method, file, line) of the innermost frame of ``tb`` that runs a method of ``policy``
    (its ``self``), or None when the exception did not pass through the policy."""
    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_locals.get("self") is policy:
            found = (frame.f_code.co_name, frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    return found


def policy_failure(policy: Any, exc: BaseException, guard: DecideGuard | None = None) -> str | None:
    """The one-line reason a run fails with when ``exc`` came from ``policy`` (it raised, or its
    decide ran past the limit); None when it came from elsewhere."""
    name = getattr(policy, "name", type(policy).__name__)
    if isinstance(exc, DecideOverrun):
        text = str(exc) or (guard.overrun_text() if guard is not None else "decide ran past its limit")
        return f"scheduler {name!r}: {text}"
    where = _policy_frame(policy, exc.__traceback__)
    if where is None:
        return None
    method, filename, line = where
    return f"scheduler {name!r} raised {type(exc).__name__} in {method} ({Path(filename).name}:{line}): {exc}"


def write_run_log(folder: Path, exc: BaseException, reason: str) -> None:
    """Write ``reason`` and ``exc``'s traceback to the run folder's :data:`RUN_LOG` (never raises:
    the run's measured rows matter more than its log)."""
    try:
        linecache.checkcache()
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        (folder / RUN_LOG).write_text(f"{reason}\n\n{text}", encoding="utf-8")
    except OSError:
        pass
