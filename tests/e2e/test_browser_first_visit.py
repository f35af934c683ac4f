"""A server's first visit straight to a page (issue 27 follow-up): Streamlit runs an app with a
``pages/`` folder as a folder app until app.py's st.navigation has run once, so a first visit to
/Results listed "app" (and once the helper modules) in the sidebar. Every page now switches to
app.py's navigation first (pages/parts/app_navigation.py). Needs a server no one has visited yet,
so it starts its own."""

from __future__ import annotations

import shutil
from urllib.parse import urlsplit

import pytest

from tests.browser.screenshot import launch_chromium
from tests.dashboard_server import start_dashboard, stop_dashboard
from tests.e2e.test_browser import ROOT, _requirements


@pytest.mark.parametrize("path,text", [("Results", "Compare"), ("Demo", "Which scheduler serves more users on time?")])
def test_a_first_visit_straight_to_a_page_shows_app_navigation(tmp_path, path, text):
    _requirements()
    from playwright.sync_api import sync_playwright

    results = tmp_path / "results"
    results.mkdir()
    for folder in (ROOT / "results").glob("demo*"):
        shutil.copytree(folder, results / folder.name)
    with (tmp_path / "streamlit.log").open("wb") as log:
        server, url = start_dashboard(results, log, timeout_s=60)
        try:
            with sync_playwright() as playwright:
                browser = launch_chromium(playwright)
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(f"{url}/{path}", timeout=60_000)  # the server's first visit, not to /
                page.get_by_text(text).first.wait_for(timeout=60_000)
                nav = page.locator("[data-testid='stSidebarNav']")
                nav.get_by_text("Home", exact=True).wait_for(timeout=30_000)
                names = [name.strip() for name in nav.locator("span").all_inner_texts() if name.strip()]
                assert urlsplit(page.url).path.rstrip("/").endswith(path)  # still the page asked for
                browser.close()
        finally:
            stop_dashboard(server, timeout_s=20)
    assert names == ["Home", "Launch", "Results", "Demo"], names
