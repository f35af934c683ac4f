"""A launched server dies with the process that launched it (runners.engines.reaper), also when
that process is killed outright, as a Ray worker or a lost node's member is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from runners.engines.launcher import ServerProcess

ROOT = Path(__file__).resolve().parents[2]

LAUNCHER = """
import sys, time
from pathlib import Path
from runners.engines.launcher import ServerProcess
server = ServerProcess([sys.executable, "-c", "import time; time.sleep(600)"], 1, "127.0.0.1", Path(sys.argv[1]))
server.start()
print(server.process.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_a_server_outlives_no_launcher_killed_outright(tmp_path):
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "server.log")], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        server_pid = int(launcher.stdout.readline())
        assert _alive(server_pid)
        os.kill(launcher.pid, signal.SIGKILL)  # no finally, no atexit: only the kernel closes its pipe
        launcher.wait(timeout=10)
        assert _wait_gone(server_pid, 15), "the server outlived its launcher"
    finally:
        launcher.kill()


def test_a_server_stopped_on_purpose_releases_its_reaper(tmp_path):
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(600)"], 1, "127.0.0.1", tmp_path / "s.log")
    server.start()
    reaper = server._reaper[0]
    assert reaper.poll() is None
    server.stop(grace_s=5)
    assert server.process.poll() is not None
    assert reaper.poll() == 0 and server._reaper is None
