"""Results page speed (issue 5 target: with 20 saved runs of 1,000 requests each, the comparison
renders in under 2 s after the first load, cached).

Makes 20 simulator runs of 1,000 requests (5 schedulers x 4 seeds), then measures:
  - script time of the Results page comparing all 20 (streamlit AppTest): first load and the
    cached reloads that follow (median of 5);
  - in headless Chromium against `streamlit run app.py` (software rendering, no GPU): seconds from
    opening the page (all 20 runs chosen by the ?runs= link) until the table and every chart of
    each chart view are drawn: first load, then cached (median and max of 3), when Chromium is
    available.
Writes bench/results/results_page.json and prints it.

Usage: python -m bench.results_page
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import RESULTS, ROOT

OUT = RESULTS / "results_page.json"


def make_runs(results: Path) -> list[str]:
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    ids = []
    for seed in range(4):
        for name, params in (
            ("fcfs", {}),
            ("static", {"batch_size": 16}),
            ("slo-sa", {}),
            ("dynamic-mem", {}),
            ("dynamic-sla", {}),
        ):
            run_id = f"bench-{name}-{seed}"
            execute_run(
                parse_config(
                    {
                        "run_id": run_id,
                        "engine": {"kind": "sim", "max_num_seqs": 16},
                        "workload": {"requests": 1000, "seed": seed, "arrival": {"process": "poisson", "rate": 2.0}},
                        "scheduler": {"name": name, "params": params},
                    }
                ),
                results,
            )
            ids.append(run_id)
    return ids


def apptest_times(results: Path, ids: list[str]) -> dict:
    from streamlit.testing.v1 import AppTest

    import runners.store.result_store as store

    store.DEFAULT_RESULTS_DIR = results
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    app.switch_page("pages/2_Results.py").run()
    started = time.perf_counter()
    app.multiselect(key="compare_runs").set_value(ids).run()
    first = time.perf_counter() - started
    assert not app.exception, app.exception
    charts = len(app.get("plotly_chart"))
    cached = []
    for _ in range(5):
        started = time.perf_counter()
        app.run()
        cached.append(time.perf_counter() - started)
    return {
        "first_s": first,
        "cached_median_s": statistics.median(cached),
        "cached_max_s": max(cached),
        "charts": charts,
    }


def browser_times(results: Path, ids: list[str]) -> dict | None:
    from tests.browser.screenshot import CHROMIUM, launch_chromium
    from tests.dashboard_server import start_dashboard, stop_dashboard

    if not Path(CHROMIUM).exists():
        return None
    from playwright.sync_api import sync_playwright

    server, url = start_dashboard(results)
    try:
        from urllib.parse import quote

        from runners.views.charts import CHART_VIEWS

        report: dict[str, Any] = {}
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for view, names in CHART_VIEWS.items():
                address = f"{url}/Results?runs={','.join(ids)}&view={quote(view)}"
                times = []
                for _ in range(4):  # the first load fills the cache; the next three are cached
                    page.goto("about:blank")
                    started = time.perf_counter()
                    page.goto(address, timeout=300_000)
                    page.locator(".js-plotly-plot").nth(len(names) - 1).wait_for(timeout=300_000)
                    page.locator("[data-testid='stDataFrame']").nth(1).wait_for(timeout=300_000)  # the table
                    times.append(time.perf_counter() - started)
                report[view] = {
                    "charts": len(names),
                    "first_s": times[0],
                    "cached_median_s": statistics.median(times[1:]),
                    "cached_max_s": max(times[1:]),
                }
                print(view, report[view], flush=True)
            # interactive: the page is open and cached; click another chart view (a rerun over
            # the open connection, as when a user changes the comparison) until it is drawn
            page.goto(f"{url}/Results?runs={','.join(ids)}&view=Overview", timeout=300_000)
            page.locator(".js-plotly-plot").nth(1).wait_for(timeout=300_000)
            switches = {}
            for view in ("Latency CDFs", "Memory & batch", "TTFT vs TPOT", "Overview"):
                names = CHART_VIEWS[view]
                page.wait_for_timeout(1500)
                started = time.perf_counter()
                page.get_by_role("radio", name=view, exact=True).click()
                page.wait_for_function(
                    "n => document.querySelectorAll('.js-plotly-plot').length === n && "
                    '!document.querySelector(\'[data-testid="stStatusWidget"] [data-testid="stStatusWidgetRunningIcon"]\')',
                    arg=len(names),
                    timeout=120_000,
                )
                page.locator(".js-plotly-plot").nth(len(names) - 1).locator(".main-svg").first.wait_for(timeout=120_000)
                switches[view] = time.perf_counter() - started
            report["switch_view_s"] = switches
            print("switch", switches, flush=True)
            browser.close()
        return report
    finally:
        stop_dashboard(server)


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch)
        started = time.perf_counter()
        ids = make_runs(results)
        made = time.perf_counter() - started
        report = {  # type: dict[str, Any]
            "runs": len(ids),
            "requests_per_run": 1000,
            "make_runs_s": made,
            "apptest": apptest_times(results, ids),
            "chromium": browser_times(results, ids),
        }
    report["target"] = "cached comparison of 20 runs < 2 s"
    report["met_server"] = report["apptest"]["cached_max_s"] < 2.0
    if report["chromium"]:
        report["met_in_chromium"] = {
            "page_load": {
                view: value["cached_max_s"] < 2.0
                for view, value in report["chromium"].items()
                if view != "switch_view_s"
            },
            "switch_view": {view: seconds < 2.0 for view, seconds in report["chromium"]["switch_view_s"].items()},
        }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
