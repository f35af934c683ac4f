"""Real-browser check: `streamlit run app.py` served on localhost, every page loaded in headless
Chromium (Debian's /usr/bin/chromium driven by playwright, no browser download), a simulator run
launched by clicking, its live view followed to the end, and a screenshot of each page saved.

Screenshots go to $SCHEDLAB_SCREENSHOTS (default: the test's temporary folder). Skipped when
Chromium or playwright is missing, unless SCHEDLAB_REQUIRE_BROWSER=1 (set by .ci/run).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.browser.screenshot import CHROMIUM, launch_chromium
from tests.dashboard_server import start_dashboard, stop_dashboard

ROOT = Path(__file__).resolve().parents[2]
# Results: two runs of the bundled demo study compared as saved runs (runs= picks that mode), every chart
PAGES = [
    ("", "Latest runs"),
    ("Launch", "Launch runs"),
    ("Results?runs=demo-overload-fcfs-s0,demo-overload-static-s0&view=All+charts", "Compare"),
    ("Demo", "Which scheduler serves more users on time?"),
]


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
    with (results.parent / "streamlit.log").open("wb") as log:
        try:
            server, url = start_dashboard(results, log, timeout_s=60)
        except TimeoutError as error:
            pytest.fail(str(error))
        yield url, results
        stop_dashboard(server, timeout_s=20)


@pytest.fixture(scope="module")
def browser():
    _requirements()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch_chromium(playwright)
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


def job_count(results: Path) -> int:
    jobs = results / ".jobs"
    return len(list(jobs.iterdir())) if jobs.is_dir() else 0


def job_shown(page) -> str:
    """The text the Jobs panel's drop-down shows (the selected job's label; the first drop-down of
    the Launch page): its visible text and its input's value."""
    box = page.locator("[data-testid='stSelectbox']").first
    inputs = box.locator("input")
    return " ".join([box.inner_text()] + [inputs.nth(i).input_value() for i in range(inputs.count())])


def jobs_said(results: Path) -> str:
    """Every job's status.json and every study's member statuses and errors, for a failure's message."""
    said = [f"{path.parent.name}: {path.read_text()}" for path in sorted((results / ".jobs").glob("*/status.json"))]
    for path in sorted(results.glob("*/study.json")):
        runs = json.loads(path.read_text()).get("runs", [])
        said.append(
            f"{path.parent.name}: " + "; ".join(f"{r.get('run_id')} {r.get('status')} {r.get('error')}" for r in runs)
        )
    return "\n".join(said)


def wait_until_shown(page, text: str, timeout_s: float, results: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in job_shown(page):
        if time.monotonic() >= deadline:
            said = jobs_said(results) if results is not None else ""
            raise AssertionError(f"the Jobs drop-down never showed {text!r}: {job_shown(page)!r}\n{said}")
        page.wait_for_timeout(250)


def test_the_sidebar_names_the_home_page_home(dashboard, browser):
    """The sidebar lists Home, Launch, Results, Demo (app.py's st.navigation), not the entry file's
    name "app"; it lists the pages/ folder until the script's first run names them, so wait."""
    url, _ = dashboard
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    for path in ("", "Launch"):
        page.goto(f"{url}/{path}", timeout=60_000)
        nav = page.locator("[data-testid='stSidebarNav']")
        nav.get_by_text("Home", exact=True).wait_for(timeout=30_000)
        page.wait_for_timeout(3000)  # the Launch page's fragment reruns every second: the names stay
        names = [text.strip() for text in nav.locator("span").all_inner_texts() if text.strip()]
        assert "app" not in names, names
        assert [name for name in names if name in ("Home", "Launch", "Results", "Demo")] == [
            "Home",
            "Launch",
            "Results",
            "Demo",
        ]
    page.close()


def test_an_invalid_number_field_starts_nothing(dashboard, browser, tmp_path):
    """Issue 15 defect 3: 0 typed into Requests and Launch clicked without Enter: no job starts and
    the field's error shows (a number input kept its last valid value, 200, and launched it)."""
    url, results = dashboard
    before = job_count(results)
    page = browser.new_page(viewport={"width": 1024, "height": 1000})
    page.goto(f"{url}/Launch", timeout=60_000)
    requests = page.get_by_label("Requests", exact=True)
    requests.wait_for(timeout=60_000)
    requests.fill("0")  # no Enter
    page.get_by_role("button", name="Launch", exact=True).click()
    wanted = "Requests: expected a whole number from 1 to 1,000,000, got '0'"  # the field's label, plain words
    page.get_by_text(wanted).first.wait_for(timeout=30_000)
    assert wanted in page.locator("[data-testid='stAlert']").filter(has_text="Requests").first.inner_text()
    page.wait_for_timeout(2000)
    assert job_count(results) == before, "a job started from a form that shows an invalid field"
    assert page.get_by_text("Started job").count() == 0
    page.screenshot(path=str(shots_folder(tmp_path) / "launch-invalid-1024.png"), full_page=True)
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
    # issue 15 defect 2: the drop-down's label follows the job's state without a reload
    wait_until_shown(page, "· done", 10, results)
    assert "starting" not in job_shown(page)
    page.get_by_text("output tok/s, run mean").first.wait_for(timeout=10_000)  # defect 4
    page.get_by_text("elapsed, simulated (s)").first.wait_for(timeout=10_000)
    link = page.get_by_role("link", name="Compare these runs on the Results page")
    assert "study=" in (link.get_attribute("href") or "")  # defect 6: the link opens this job's study
    assert page.locator("[data-testid='stException']").count() == 0
    page.screenshot(path=str(shots_folder(tmp_path) / "launch-live.png"), full_page=True)
    page.close()
    saved = [
        folder
        for folder in results.iterdir()
        if (folder / "summary.json").exists() and not folder.name.startswith("demo-")
    ]
    assert len(saved) == 10  # one study: the default pair of schedulers x the default 5 seeds


def test_a_second_launch_is_followed_at_once_with_its_cancel_button(dashboard, browser, tmp_path):
    """Issue 15 defect 1: after a launch the Jobs panel kept showing the previous job, and the new
    one had no Cancel button until picked in the drop-down or the page reloaded."""
    url, results = dashboard
    page = browser.new_page(viewport={"width": 1024, "height": 1000})
    page.goto(f"{url}/Launch", timeout=60_000)
    requests = page.get_by_label("Requests", exact=True)
    requests.wait_for(timeout=60_000)
    for label, value in (("Requests", "2000"), ("Seeds", "1")):  # 800 simulated s each at 100x: 8 s a run
        field = page.get_by_label(label, exact=True)
        field.fill(value)
        field.press("Enter")
        page.wait_for_timeout(800)
    jobs_before = set((results / ".jobs").iterdir()) if (results / ".jobs").is_dir() else set()
    page.get_by_role("button", name="Launch", exact=True).click()
    page.get_by_text("Started job").first.wait_for(timeout=30_000)
    [new] = set((results / ".jobs").iterdir()) - jobs_before
    wait_until_shown(page, new.name, 5)  # selected at once, no reload
    cancel = page.get_by_role("button", name="Cancel job")
    cancel.wait_for(timeout=5_000)
    page.screenshot(path=str(shots_folder(tmp_path) / "launch-running-1024.png"), full_page=True)
    cancel.click()
    wait_until_shown(page, "· cancelled", 60)
    assert (new / "cancel").exists()
    assert page.locator("[data-testid='stException']").count() == 0
    page.close()


#: Text cut by its box (an ellipsis or a hidden overflow) at a 1,024 px window, as JavaScript: the
#: leaf elements of the page's main area whose text is wider than the box that shows it.
CUT_TEXT_JS = """() => {
  const main = document.querySelector("[data-testid='stMain']") || document.body;
  const clips = (el) => {
    const style = getComputedStyle(el);
    return style.textOverflow === "ellipsis" || ["hidden", "clip"].includes(style.overflowX);
  };
  const cut = [];
  for (const el of main.querySelectorAll("p, span, label, div, h1, h2, h3, h4, button")) {
    if (el.children.length || !el.textContent.trim() || !el.offsetParent) continue;
    const range = document.createRange();
    range.selectNodeContents(el);
    const right = range.getBoundingClientRect().right;
    for (let box = el, depth = 0; box && box !== main && depth < 6; box = box.parentElement, depth++) {
      if (!clips(box)) continue;
      const edge = box.getBoundingClientRect().right;
      if (box.scrollWidth > box.clientWidth + 1 || right > edge + 1) { cut.push(el.textContent.trim()); }
      break;
    }
  }
  return cut;
}"""
#: Pages checked for cut text at 1,024 px, and the text that says each has drawn.
NARROW_PAGES = [
    ("", "Latest runs"),
    ("Launch", "Launch runs"),
    ("Demo", "Which scheduler serves more users on time?"),
]


@pytest.mark.parametrize("path,text", NARROW_PAGES)
def test_no_label_is_cut_at_1024_px(dashboard, browser, tmp_path, path, text):
    """Issue 27, defect 11: at a 1,024 px window no page link, card label, field label or radio
    option is cut ("Demo: a ready comparis", "output throughput, run mean (t...")."""
    url, _ = dashboard
    page = browser.new_page(viewport={"width": 1024, "height": 1000})
    page.goto(f"{url}/{path}", timeout=60_000)
    page.get_by_text(text).first.wait_for(timeout=60_000)
    if path == "Demo":
        page.locator(".js-plotly-plot").nth(2).wait_for(timeout=60_000)
    page.wait_for_timeout(2500)
    cut = page.evaluate(CUT_TEXT_JS)
    page.screenshot(path=str(shots_folder(tmp_path) / f"narrow-{path.lower() or 'home'}.png"), full_page=True)
    page.close()
    assert not cut, f"text cut at 1,024 px on /{path}: {cut}"
