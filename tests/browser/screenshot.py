"""Real-browser check: load the dashboard in headless Chromium and save a screenshot.

Usage: python tests/browser/screenshot.py URL OUT.png [--wait-text TEXT] [--height PX] [--settle-ms MS]
Needs Debian's chromium (/usr/bin/chromium) and the playwright package (no browser download).
How schedlab starts headless Chromium (:func:`launch_chromium`) is defined here, once: the browser
tests and bench/results_page.py start theirs with it. This file imports nothing of the repository,
so it runs as a plain script.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

#: Debian's chromium, driven by playwright.
CHROMIUM = "/usr/bin/chromium"
#: Headless Chromium in a container: no sandbox, no GPU, nothing fetched in the background.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def launch_chromium(playwright: Any) -> Any:
    """Headless :data:`CHROMIUM` with :data:`CHROMIUM_FLAGS`, from a started playwright."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)


def screenshot(
    url: str, out: str, wait_text: str | None = None, timeout_s: float = 60, height: int = 900, settle_ms: int = 1500
) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": height})
        page.goto(url, timeout=timeout_s * 1000)
        if wait_text:
            page.get_by_text(wait_text).first.wait_for(timeout=timeout_s * 1000)
        page.wait_for_timeout(settle_ms)
        page.screenshot(path=out, full_page=True)
        browser.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--wait-text")
    parser.add_argument("--height", type=int, default=900, help="viewport height, pixels (Streamlit scrolls inside it)")
    parser.add_argument("--settle-ms", type=int, default=1500, help="wait after the text appears, milliseconds")
    args = parser.parse_args()
    screenshot(args.url, args.out, args.wait_text, height=args.height, settle_ms=args.settle_ms)
    sys.exit(0)
