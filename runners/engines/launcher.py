"""Start and stop engine servers: argument lists (never a shell), free ports, one process group
per server, a health wait that quotes the server's log when it fails, and terminate-then-kill."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence
from urllib.error import URLError
from urllib.request import urlopen

from runners.errors import RunCancelled, SchedlabError


class EngineStartError(SchedlabError):
    """A server exited or never became healthy; the message ends with its last log lines."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except FileNotFoundError:
        return ""


@dataclass
class ServerProcess:
    """One launched server. ``health_path`` is polled until it answers 200."""

    command: list[str]
    port: int
    host: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    health_path: str = "/health"
    process: subprocess.Popen | None = None
    _log_handle: object = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.log_path.open("ab")
        self._log_handle = handle
        handle.write(("$ " + " ".join(self.command) + "\n").encode())
        handle.flush()
        try:
            self.process = subprocess.Popen(
                self.command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                process_group=0,  # own process group: stop() takes its children too
            )
        except OSError as exc:
            handle.close()
            raise EngineStartError(f"could not start {self.command[0]!r}: {exc}") from exc

    def healthy(self) -> bool:
        try:
            with urlopen(self.base_url + self.health_path, timeout=2) as response:
                return response.status == 200
        except (URLError, OSError, ValueError):
            return False

    def wait_healthy(self, timeout_s: float, should_stop: Callable[[], bool] | None = None) -> float:
        """Seconds until healthy; EngineStartError with the log tail on exit or timeout;
        RunCancelled as soon as ``should_stop()`` says so (a start-up can take minutes)."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if should_stop is not None and should_stop():
                raise RunCancelled("cancelled while the servers were starting")
            if self.process is not None and self.process.poll() is not None:
                raise EngineStartError(
                    f"server on port {self.port} exited with code {self.process.returncode} during start-up; "
                    f"log {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if self.healthy():
                return time.monotonic() - start
            time.sleep(0.5)
        raise EngineStartError(
            f"server on port {self.port} not healthy after {timeout_s:g} s; log {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after ``grace_s``."""
        process = self.process
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # children that outlived their parent too
            except (ProcessLookupError, PermissionError):
                pass
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None


def launch_servers(servers: Sequence[ServerProcess], timeout_s: float,
                   should_stop: Callable[[], bool] | None = None) -> list[float]:
    """Start all servers, then wait for each; on any failure or cancel stop them all and re-raise."""
    try:
        for server in servers:
            server.start()
        return [server.wait_healthy(timeout_s, should_stop) for server in servers]
    except BaseException:
        for server in servers:
            server.stop(grace_s=5)
        raise
