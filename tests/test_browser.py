"""Real-browser check: `streamlit run app.py` served on localhost, every page loaded in headless
Chromium (Debian's /usr/bin/chromium driven by playwright, no browser download), a simulator run
launched by clicking, its live view followed to the end, and a screenshot of each page saved.

Screenshots go to $SCHEDLAB_SCREENSHOTS (default: the test's temporary folder). Skipped when
Chromium or playwright is missing, unless SCHEDLAB_REQUIRE_BROWSER=1 (set by .ci/run).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
# Results: two runs of the bundled demo study compared as saved runs (runs= picks that mode), every chart
PAGES = [("", "Latest runs"), ("Launch", "Launch runs"), ("Results?runs=demo-fcfs-s0,demo-static-s0&view=All+charts",
                                                         "Compare"),
         ("Demo", "Which scheduler serves more users on time?")]


def _requirements() -> None:
    missing = []
    if not Path(CHROMIUM).exists():
        missing.append(f"{CHROMIUM} (apt install chromium)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install playwright)")
    if missing:
        if os.environ.get("SCHEDLAB_REQUIRE_BROWSER") == "1":
            pytest.fail("browser test required but missing: " + ", ".join(missing))
        pytest.skip("needs " + ", ".join(missing))


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    _requirements()
    results = tmp_path_factory.mktemp("results")
    for folder in (ROOT / "results").glob("demo*"):  # the Demo's study: demo/ and demo-<scheduler>-s<seed>/
        shutil.copytree(folder, results / folder.name)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (results.parent / "streamlit.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=ROOT, env={**os.environ, "SCHEDLAB_RESULTS_DIR": str(results)}, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            time.sleep(0.5)
    else:
        server.kill()
        pytest.fail("streamlit did not answer /_stcore/health within 60 s")
    yield url, results
    server.terminate()
    server.wait(timeout=20)
    log.close()


@pytest.fixture(scope="module")
def browser():
    _requirements()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def shots_folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("SCHEDLAB_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("path,text", PAGES)
def test_each_page_loads_without_an_exception(dashboard, browser, tmp_path, path, text):
    url, _ = dashboard
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/{path}", timeout=60_000)
    page.get_by_text(text).first.wait_for(timeout=60_000)
    if path.startswith("Results"):
        page.locator(".js-plotly-plot").nth(8).wait_for(timeout=60_000)  # all nine comparison charts
    if path == "Demo":
        page.locator(".js-plotly-plot").nth(2).wait_for(timeout=60_000)
    page.wait_for_timeout(2000)  # let the rest draw
    assert page.locator("[data-testid='stException']").count() == 0
    name = (path.split("?")[0] or "home").lower()
    page.screenshot(path=str(shots_folder(tmp_path) / f"{name}.png"), full_page=True)
    page.close()


def test_a_run_launched_in_the_browser_streams_to_the_end(dashboard, browser, tmp_path):
    url, results = dashboard
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/Launch", timeout=60_000)
    requests = page.get_by_label("Requests", exact=True)
    requests.wait_for(timeout=60_000)
    requests.fill("120")
    requests.press("Enter")
    page.wait_for_timeout(800)
    page.get_by_role("button", name="Launch", exact=True).click()
    page.get_by_text("Started job").first.wait_for(timeout=30_000)
    page.get_by_text("120 / 120 requests").first.wait_for(timeout=120_000)
    page.get_by_text("10 of 10 runs finished").first.wait_for(timeout=120_000)  # the whole study
    assert page.locator("[data-testid='stException']").count() == 0
    page.screenshot(path=str(shots_folder(tmp_path) / "launch-live.png"), full_page=True)
    page.close()
    saved = [folder for folder in results.iterdir() if (folder / "summary.json").exists()
             and not folder.name.startswith("demo-")]
    assert len(saved) == 10  # one study: the default pair of schedulers x the default 5 seeds
