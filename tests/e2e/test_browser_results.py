"""The Results page's comparison table in headless Chromium at 1,024 px (issue 15): five runs of
the bundled demo study compared, every metric shown without an inner scroll and without a
horizontal one, run names (not ids) in the headers. Reuses tests/e2e/test_browser.py's server and
browser fixtures; skipped as it is when Chromium or playwright is missing."""

from __future__ import annotations

from runners.metrics.catalog import TABLE_METRICS
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
