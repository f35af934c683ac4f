"""The Results page in headless Chromium at 1,024 px: the comparison table of five runs of the
bundled demo study (issue 15) and the demo study's statistics tables (issue 27 defect 2), every row
shown without an inner scroll and without a horizontal one, run names (not ids) in the headers, the
verdict and k-of-n columns in view; and per-run downloads that start on every click (issue 27
defect 10). Reuses tests/e2e/test_browser.py's server and browser fixtures; skipped as it is when
Chromium or playwright is missing."""

from __future__ import annotations

from pathlib import Path

from runners.metrics.catalog import TABLE_METRICS
from runners.store.result_store import load_run
from runners.study.runner import read_study
from runners.views.study_view import study_frames
from tests.e2e.test_browser import browser, dashboard, shots_folder  # noqa: F401 - pytest fixtures

ROWS = len([metric for metric in TABLE_METRICS if not metric.real_engines_only])
FIVE = (
    "demo-overload-fcfs-s0",
    "demo-overload-static-s0",
    "demo-overload-mcsf-s0",
    "demo-overload-slo-sa-s0",
    "demo-overload-dynamic-mem-s0",
)


def test_five_run_comparison_table_fits_at_1024_px(dashboard, browser, tmp_path):  # noqa: F811
    url, _ = dashboard
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    page.goto(f"{url}/Results?runs={','.join(FIVE)}&baseline=demo-overload-fcfs-s0", timeout=60_000)
    table = page.locator(".st-key-comparison_table")
    table.wait_for(timeout=60_000)
    page.wait_for_timeout(2500)  # let the grid lay out
    assert page.locator("[data-testid='stException']").count() == 0
    grid = table.locator("table.schedlab-comparison")
    assert grid.locator("tbody tr").count() == ROWS  # every metric, in the page's own flow
    sizes = grid.evaluate("""node => {
        const main = node.closest('.st-key-comparison_table');
        const box = node.getBoundingClientRect(), room = main.getBoundingClientRect();
        let wrapper = node.parentElement, scrolls = false;
        while (wrapper && wrapper !== main) {  // no element between the table and the page scrolls
            const style = getComputedStyle(wrapper), scrollable = value => value === "auto" || value === "scroll";
            if ((scrollable(style.overflowX) && wrapper.scrollWidth > wrapper.clientWidth + 2)
                || (scrollable(style.overflowY) && wrapper.scrollHeight > wrapper.clientHeight + 2)) {
                scrolls = true;
            }
            wrapper = wrapper.parentElement;
        }
        return [box.right, room.right, scrolls || node.scrollWidth > box.width + 2,
                document.documentElement.scrollWidth, window.innerWidth];
    }""")
    right, room, scrolls, page_width, window_width = sizes
    assert right <= room + 1 and not scrolls and page_width <= window_width, f"table overflows at 1,024 px: {sizes}"
    headers = grid.locator("thead th")
    assert (
        headers.nth(2).get_attribute("title") == "run demo-overload-static-s0"
        and headers.nth(2).inner_text() == "static"
    )
    table.scroll_into_view_if_needed()
    page.screenshot(path=str(shots_folder(tmp_path) / "results-table-1024.png"), full_page=True)
    page.close()


#: No element between the table and its container scrolls, and nothing sticks out of the page.
NO_SCROLL = """(node, key) => {
    const main = node.closest(key);
    let wrapper = node.parentElement, scrolls = false;
    while (wrapper && wrapper !== main) {
        const style = getComputedStyle(wrapper), scrollable = value => value === "auto" || value === "scroll";
        if ((scrollable(style.overflowX) && wrapper.scrollWidth > wrapper.clientWidth + 2)
            || (scrollable(style.overflowY) && wrapper.scrollHeight > wrapper.clientHeight + 2)) {
            scrolls = true;
        }
        wrapper = wrapper.parentElement;
    }
    return scrolls || node.scrollWidth > node.getBoundingClientRect().width + 2
        || document.documentElement.scrollWidth > window.innerWidth;
}"""


def test_study_table_shows_every_row_with_verdict_and_k_of_n_in_view_at_1024_px(dashboard, browser, tmp_path):  # noqa: F811
    """Issue 27 defect 2: the demo study's statistics (6 schedulers x 24 metrics) as HTML tables in
    the page's flow: every row rendered (no ten-row inner scroll), headline metrics first, and in
    every group's table the verdict and seeds-better headers inside the 1,024 px window."""
    url, results = dashboard
    (_, frame), *_ = study_frames(read_study(results / "demo-overload"))
    page = browser.new_page(viewport={"width": 1024, "height": 900})
    page.goto(f"{url}/Results?study=demo-overload", timeout=60_000)
    block = page.locator(".st-key-study_table_0")
    block.wait_for(timeout=60_000)
    page.wait_for_timeout(2500)
    assert page.locator("[data-testid='stException']").count() == 0
    rows = block.locator("tr[data-key]")
    assert rows.count() == len(frame) == 144
    assert rows.first.get_attribute("data-key") == "slo_attainment" and rows.nth(6).get_attribute("data-key") == "G"
    tables = block.locator("table.schedlab-study")
    assert tables.count() == 5  # one per metric group
    for index in range(tables.count()):
        table = tables.nth(index)
        edges = table.evaluate("""node => {
            const edge = name => node.querySelector('th.' + name).getBoundingClientRect();
            return [edge('verdict').left, edge('verdict').right, edge('seeds-better').right, window.innerWidth,
                    node.getBoundingClientRect().right];
        }""")
        left, verdict_right, wins_right, window_width, table_right = edges
        assert 0 <= left and verdict_right <= window_width and wins_right <= window_width, edges
        assert table_right <= window_width, edges
        assert not table.evaluate(NO_SCROLL, ".st-key-study_table_0"), f"study table {index} scrolls at 1,024 px"
    # the last row is as tall as the others: rendered in the page's flow, not clipped in a box
    last = rows.last.bounding_box()
    assert last is not None and last["height"] < 80
    page.screenshot(path=str(shots_folder(tmp_path) / "results-study-1024.png"), full_page=True)
    page.close()


def test_per_run_downloads_start_on_every_click(dashboard, browser):  # noqa: F811
    """Issue 27 defect 10: per-run CSV and Parquet downloads clicked one after the other (0.1 s
    apart), with the Launch page open in another tab (its Jobs panel reruns every second, and each
    run's end drops the downloads no page shows). Before the fix a click reran the Results page, the
    other button went stale while it ran and its click found its file dropped: 2 to 4 of these 10
    clicks started no download. Each click must start its download, with the run's requests. (Ten
    clicks: Chromium drops an eleventh download started within a second, a limit of the browser's.)"""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    url, results = dashboard
    context = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 1000})
    launch = context.new_page()
    launch.goto(f"{url}/Launch", timeout=60_000)
    page = context.new_page()
    page.goto(f"{url}/Results?runs={FIVE[0]},{FIVE[1]}&baseline={FIVE[0]}", timeout=60_000)
    buttons = [page.get_by_role("button", name=name) for name in ("Requests (CSV)", "Requests (Parquet)")]
    buttons[0].wait_for(timeout=60_000)
    page.wait_for_timeout(2000)
    # the run's table as the store reads it: a file of an older schema gains the newer columns as nulls
    requests = load_run(results, FIVE[0]).requests
    expected = [
        (f"{FIVE[0]}-requests.csv", len(requests.to_csv(index=False).encode())),
        (f"{FIVE[0]}-requests.parquet", len(requests.to_parquet(index=False))),
    ]
    got, missing = [], []
    for click in range(10):
        page.wait_for_timeout(100)
        try:
            with page.expect_download(timeout=15_000) as download:
                buttons[click % 2].click()
            assert download.value.failure() is None
            got.append((download.value.suggested_filename, Path(download.value.path()).stat().st_size))
        except PlaywrightTimeout:
            missing.append(click)
    assert not missing, f"{len(missing)} of 10 download clicks started no download (clicks {missing})"
    assert got == expected * 5
    assert page.locator("[data-testid='stDownloadButtonError']").count() == 0
    context.close()
