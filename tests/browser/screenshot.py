"""Real-browser check: load the dashboard in headless Chromium and save a screenshot.

Usage: python tests/browser/screenshot.py URL OUT.png [--wait-text TEXT] [--width PX] [--height PX] [--settle-ms MS]
    [--clip-from TEXT --clip-to TEXT]
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
    url: str,
    out: str,
    wait_text: str | None = None,
    timeout_s: float = 60,
    height: int = 900,
    settle_ms: int = 1500,
    width: int = 1400,
    clip: tuple[str, str] | None = None,
) -> None:
    """Save a full-page PNG of ``url`` to ``out`` in a ``width`` x ``height`` px window, once
    ``wait_text`` (if given) shows and ``settle_ms`` more have passed; ``clip`` (first text, last
    text): only the band of the page from the top of the first element showing the first text to
    the bottom of the first showing the last (the window must be tall enough to hold it)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(url, timeout=timeout_s * 1000)
        if wait_text:
            page.get_by_text(wait_text).first.wait_for(timeout=timeout_s * 1000)
        page.wait_for_timeout(settle_ms)
        if clip is None:
            page.screenshot(path=out, full_page=True)
        else:
            top = page.get_by_text(clip[0]).first.bounding_box()
            bottom = page.get_by_text(clip[1]).first.bounding_box()
            if top is None or bottom is None:
                raise SystemExit(f"cannot clip: {clip[0]!r} or {clip[1]!r} is not shown")
            band = {"x": 0, "y": max(top["y"] - 16, 0), "width": width}
            band["height"] = bottom["y"] + bottom["height"] + 16 - band["y"]
            page.screenshot(path=out, full_page=True, clip=band)
        browser.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("out")
    parser.add_argument("--wait-text")
    parser.add_argument("--width", type=int, default=1400, help="viewport width, pixels (1024: a small laptop)")
    parser.add_argument("--height", type=int, default=900, help="viewport height, pixels (Streamlit scrolls inside it)")
    parser.add_argument("--settle-ms", type=int, default=1500, help="wait after the text appears, milliseconds")
    parser.add_argument("--clip-from", help="keep the page from the first element showing this text ...")
    parser.add_argument("--clip-to", help="... to the first element showing this one")
    args = parser.parse_args()
    screenshot(
        args.url,
        args.out,
        args.wait_text,
        height=args.height,
        settle_ms=args.settle_ms,
        width=args.width,
        clip=(args.clip_from, args.clip_to) if args.clip_from and args.clip_to else None,
    )
    sys.exit(0)
