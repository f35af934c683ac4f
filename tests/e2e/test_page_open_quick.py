"""bench/page_open.py still runs (issue 42): in quick mode (a 2 x 2 study, one fresh server and
browser per page, nothing written) it opens Home, Launch and the study's Results page in headless
Chromium and prints a row for each. It checks that the pages are drawn without an exception, not
how fast (timings on a shared machine would make it flaky). Skipped when Chromium or playwright is
missing, unless SCHEDLAB_REQUIRE_BROWSER=1."""

from __future__ import annotations

import subprocess
import sys

from tests.e2e.test_browser import ROOT, _requirements


def test_the_page_open_benchmark_runs_in_quick_mode():
    _requirements()
    done = subprocess.run(
        [sys.executable, "-m", "bench.page_open", "--quick", "--pages", "Home,Launch,Results"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for page in ("Home", "Launch", "Results"):
        assert f"| {page} |" in done.stdout, done.stdout
    assert "target (first visit)" in done.stdout
