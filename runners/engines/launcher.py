"""Start and stop engine servers: argument lists (never a shell), free ports, one process group
per server, a health wait that quotes the server's log when it fails, and terminate-then-kill;
a reaper per server stops it if the launching process dies first (:mod:`runners.engines.reaper`).

The value of a secret-looking flag (``--api-key X``, ``--hf-token=X``: see
:func:`runners.engines.real_config.redact_args`) is written to the server's log as ``***``, and
the log tail quoted in an error has those values and anything that looks like a token
(``Bearer <token>``, ``sk-...``) redacted too.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.error import URLError
from urllib.request import urlopen

from runners.engines.engine_decisions import DECISION_LOG_PREFIX
from runners.engines.openai_client import redact
from runners.engines.real_config import is_secret_name, redact_args
from runners.engines.reaper import release, start_reaper
from runners.errors import RunCancelled, SchedlabError

#: Text in a server log that says the server crashed (a Python traceback; vLLM's engine core died).
CRASH_MARKS = ("Traceback (most recent call last)", "EngineDeadError", "EngineCore encountered a fatal error")

#: Seconds between two health probes, and the longest one probe may take.
HEALTH_POLL_S = 0.5
HEALTH_PROBE_TIMEOUT_S = 2.0
#: Seconds between two looks at ``should_stop`` while waiting on a server.
STOP_POLL_S = 0.1
T = TypeVar("T")


def command_secrets(command: Sequence[str]) -> list[str]:
    """The values that :func:`redact_args` hides in ``command`` (``--api-key X``, ``--hf-token=X``)."""
    secrets = []
    for original, shown in zip(command, redact_args(list(command))):
        if original != shown:
            secrets.append(original.partition("=")[2] if "=" in shown else original)
    return [secret for secret in secrets if secret]


def env_secrets(env: dict[str, str]) -> list[str]:
    """The values of ``env`` whose name reads as a secret (``HF_TOKEN``, ``OPENAI_API_KEY``,
    ``DB_PASSWORD``: :func:`runners.engines.real_config.is_secret_name`); config.json hides the same."""
    return [value for name, value in env.items() if value and is_secret_name(name)]


def scrub_log(path: Path, secrets: Sequence[str]) -> None:
    """Rewrite a finished server log with ``secrets`` and token-like text as ``***``: a server may
    print its own arguments or environment (``--api-key``), and the log stays in the run folder."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return
    cleaned = redact(text, list(secrets))
    if cleaned != text:
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(cleaned, encoding="utf-8")
        os.replace(temporary, path)


def unless_stopped(probe: Callable[[], T], should_stop: Callable[[], bool] | None, what: str) -> T:
    """``probe()``'s result, run in a helper thread so that ``should_stop`` is honoured within
    ``STOP_POLL_S`` while it waits on a server: RunCancelled(``"cancelled while " + what``); the
    thread is left to end at the probe's own timeout."""
    if should_stop is None:
        return probe()
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["value"] = probe()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=call, name=f"probe {what}", daemon=True)
    thread.start()
    while thread.is_alive():
        if should_stop():
            raise RunCancelled(f"cancelled while {what}")
        thread.join(STOP_POLL_S)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class EngineStartError(SchedlabError):
    """A server exited or never became healthy; the message ends with its last log lines."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


#: Log lines naming this are quoted even when they are older than the tail: schedlab's own code
#: inside the server (the in-engine schedulers) says there why it refused to run. Its routine
#: decision lines (DECISION_LOG_PREFIX) are not quoted: they say nothing about a failure.
OWN_LINES_MARK = "schedlab"


def log_tail(path: Path, lines: int = 30, secrets: Sequence[str] = ()) -> str:
    """The last ``lines`` lines of a server log, after up to 5 earlier lines that name schedlab
    (:data:`OWN_LINES_MARK`; its decision lines excepted), with ``secrets`` and token-like text
    redacted."""
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            tail: deque[str] = deque(maxlen=lines)
            own: list[str] = []
            for line in handle:
                if (
                    len(tail) == lines
                    and OWN_LINES_MARK in tail[0].lower()
                    and DECISION_LOG_PREFIX not in tail[0]
                    and len(own) < 5
                ):
                    own.append(tail[0])  # about to leave the tail
                tail.append(line)
    except FileNotFoundError:
        return ""
    earlier = "".join(own) + "[...]\n" if own else ""
    return redact(earlier + "".join(tail), list(secrets))


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
    _log_handle: IO[bytes] | None = None
    _reaper: tuple[subprocess.Popen, int] | None = None  # runners.engines.reaper: the server dies with us

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.log_path.open("ab")
        self._log_handle = handle
        handle.write(("$ " + " ".join(redact_args(self.command)) + "\n").encode())
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
        try:
            self._reaper = start_reaper(self.process.pid)
        except OSError:  # the server still runs; only a launcher killed outright would leave it behind
            self._reaper = None

    def _tail(self) -> str:
        return log_tail(self.log_path, secrets=command_secrets(self.command) + env_secrets(self.env))

    def crash_report(self) -> str | None:
        """The log's tail (as at a failed start) when the server's log shows a crash after it
        started (:data:`CRASH_MARKS`: a Python traceback, vLLM's dead engine core), else None."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return self._tail() if any(mark in text for mark in CRASH_MARKS) else None

    def healthy(self) -> bool:
        try:
            with urlopen(self.base_url + self.health_path, timeout=HEALTH_PROBE_TIMEOUT_S) as response:
                return response.status == 200
        except (URLError, OSError, ValueError):
            return False

    def wait_healthy(self, timeout_s: float, should_stop: Callable[[], bool] | None = None) -> float:
        """Seconds until healthy; EngineStartError with the log tail on exit or timeout;
        RunCancelled within about ``STOP_POLL_S`` of ``should_stop()`` saying so (a start-up can
        take minutes), a health probe in progress included."""
        start = time.monotonic()
        waiting = "the servers were starting"

        def stop_requested() -> bool:
            return should_stop is not None and should_stop()

        while time.monotonic() - start < timeout_s:
            if stop_requested():
                raise RunCancelled(f"cancelled while {waiting}")
            if self.process is not None and self.process.poll() is not None:
                raise EngineStartError(
                    f"server on port {self.port} exited with code {self.process.returncode} during start-up; "
                    f"log {self.log_path}:\n{self._tail()}"
                )
            if unless_stopped(self.healthy, should_stop, waiting):
                return time.monotonic() - start
            next_probe = time.monotonic() + HEALTH_POLL_S
            while time.monotonic() < next_probe and not stop_requested():
                time.sleep(STOP_POLL_S)
        raise EngineStartError(
            f"server on port {self.port} not healthy after {timeout_s:g} s; log {self.log_path}:\n{self._tail()}"
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
        if self._reaper is not None:
            release(*self._reaper)
            self._reaper = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
            scrub_log(self.log_path, command_secrets(self.command) + env_secrets(self.env))


def launch_servers(
    servers: Sequence[ServerProcess], timeout_s: float, should_stop: Callable[[], bool] | None = None
) -> list[float]:
    """Start all servers, then wait for each; on any failure or cancel stop them all and re-raise."""
    try:
        for server in servers:
            server.start()
        return [server.wait_healthy(timeout_s, should_stop) for server in servers]
    except BaseException:
        for server in servers:
            server.stop(grace_s=5)
        raise
