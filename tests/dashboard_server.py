"""The dashboard served as a user serves it (``streamlit run app.py`` on localhost), for the browser
tests (tests/e2e/test_browser.py) and the Results page benchmark (bench/results_page.py); the
headless Chromium that opens it is tests/browser/screenshot.py's (``launch_chromium``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO

from runners.engines.launcher import free_port

ROOT = Path(__file__).resolve().parents[1]


def start_dashboard(
    results: Path, log: IO[bytes] | int = subprocess.DEVNULL, timeout_s: float = 60.0
) -> tuple[subprocess.Popen[bytes], str]:
    """``streamlit run app.py`` on a free port of 127.0.0.1 showing the runs in ``results``
    (SCHEDLAB_RESULTS_DIR), its output to ``log``; waits until /_stcore/health answers ``ok``.
    Returns the server process and its URL; raises TimeoutError (the server killed) when it does
    not answer within ``timeout_s`` seconds."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "app.py"),
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
        ],
        cwd=ROOT,
        env={**os.environ, "SCHEDLAB_RESULTS_DIR": str(results)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return server, url
        except OSError:
            time.sleep(0.5)
    server.kill()
    server.wait()
    raise TimeoutError(f"streamlit did not answer /_stcore/health within {timeout_s:g} s")


def stop_dashboard(server: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Stop a server :func:`start_dashboard` started: SIGTERM, then SIGKILL when it has not exited
    within ``timeout_s`` seconds. Streamlit's graceful stop waits for a page's script still running
    in a session the browser left (seen once in CI on a loaded 2-core machine, the Results page);
    the tests check what the pages show, not how fast the server shuts down."""
    server.terminate()
    try:
        server.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(timeout=timeout_s)
