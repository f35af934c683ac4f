"""A launched server dies with the process that launched it, however that process ends.

A server runs in its own process group (:class:`runners.engines.launcher.ServerProcess`), so that
stopping it takes its children too; the price is that a launcher killed outright (SIGKILL, out of
memory, a Ray worker or node lost mid-member) would leave the server running, holding its GPU and
port. So each server gets a reaper: a small process, in a session of its own, that holds the read
end of a pipe whose write end only the launcher holds. When the launcher ends in any way, the
kernel closes its end; the reaper reads end-of-file, sends SIGTERM to the server's process group,
and SIGKILL after :data:`GRACE_S` seconds. A launcher that stops its server itself first writes
:data:`RELEASE` (the reaper then exits without a signal: the group id may be reused).

Run as ``python -m runners.engines.reaper FD PGID``; never imports more than the standard library.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: The byte a launcher writes when it has stopped its server itself: the reaper leaves quietly.
RELEASE = b"r"
#: Seconds between SIGTERM and SIGKILL of an orphaned server's process group.
GRACE_S = 10.0


def start_reaper(pgid: int) -> tuple[subprocess.Popen, int]:
    """Start the reaper of process group ``pgid``; returns it and the write end of its pipe (the
    launcher keeps it open while the server should live, and must not let children inherit it)."""
    read_end, write_end = os.pipe()
    os.set_inheritable(write_end, False)
    try:
        reaper = subprocess.Popen(
            [sys.executable, "-m", "runners.engines.reaper", str(read_end), str(pgid)],
            pass_fds=(read_end,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C of the terminal or a group kill of the launcher misses it
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
    finally:
        os.close(read_end)
    return reaper, write_end


def release(reaper: subprocess.Popen, write_end: int) -> None:
    """Tell the reaper the server was stopped on purpose, close the pipe and reap the reaper."""
    try:
        os.write(write_end, RELEASE)
    except OSError:
        pass
    try:
        os.close(write_end)
    except OSError:
        pass
    try:
        reaper.wait(timeout=5)
    except subprocess.TimeoutExpired:
        reaper.kill()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def watch(read_end: int, pgid: int, grace_s: float = GRACE_S) -> bool:
    """Block until the launcher's end of the pipe closes; then, unless it wrote :data:`RELEASE`,
    stop process group ``pgid`` (SIGTERM, SIGKILL after ``grace_s``). True when it had to."""
    while True:
        try:
            data = os.read(read_end, 1)
            break
        except InterruptedError:
            continue
    if data == RELEASE:
        return False
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return True
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return True


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch(int(argv[0]), int(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
