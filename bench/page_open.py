"""Pages that open at once (issue 42): seconds from a fresh dashboard server answering its health
check until a page is rendered in a new headless Chromium, the server's first visit counted.

For each page — Home (/), Launch (/Launch), Results with a study of 5 schedulers x 10 seeds
(/Results?study=<id>) and Demo (/Demo) — one measurement is: start headless Chromium (not timed),
start ``streamlit run app.py`` on a free port showing a temporary results folder
(SCHEDLAB_RESULTS_DIR: the bundled demo studies, as a fresh clone's results/ holds them, and the
study the benchmark makes with ``python -m runners``), wait for ``/_stcore/health``, then open the
page: the time runs from health-ok until the page's last element is drawn (its own marker, below)
and the status widget says no script is running. Then the same page again in a new tab of the
same browser (the cached visit: the server's modules and caches warm, the browser's static files
cached), timed from opening it. A fresh server and a fresh browser for each measurement, so every
first visit is a server's first; ``--repeats`` rounds, the pages taken in turn (A B C D A B C D
...) so a drift of the machine's speed spreads over all (the repository's bytecode is written
before the first, so no repeat compiles it). Also the floor: the same measurement of a
one-line Streamlit app (what Streamlit and Chromium cost on this machine before any page code).

Target: Home, Launch and the study's Results page <= 2 s (median) after the server is healthy.

    python -m bench.page_open [--repeats 5] [--quick] [--pages Home,Launch,Results,Demo,floor]
        [--baseline PATH] [--out NAME]

``--baseline PATH``: another checkout of the repository (``git worktree add PATH <commit>``):
each page is served from it right after this checkout's, so a before/after comparison sees the
same machine (a shared 2-core machine's load moves the figures by seconds).

Writes bench/results/page_open.json and .md (``--quick``: a 2 x 2 study, one repeat, nothing
written: the check that the benchmark still runs; tests/e2e/test_page_open_quick.py). Needs
/usr/bin/chromium and playwright.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import ROOT, markdown_table, write_report
from bench.results_page import STUDY_SCHEDULERS, STUDY_SEEDS, make_study

#: The target, seconds from health-ok to the page drawn (medians).
TARGET_S = 2.0
#: Requests per member run of the study (the page reads summaries and request tables: a quick
#: setting keeps the benchmark's setup short; the page's work per member is the same).
STUDY_REQUESTS = 100
#: The status widget's "Running..." icon: present while a script (or a fragment) runs.
RUNNING = '[data-testid="stStatusWidget"] [data-testid="stStatusWidgetRunningIcon"]'
#: How long one page may take before the measurement fails.
PAGE_TIMEOUT_MS = 180_000


@dataclass(frozen=True)
class Page:
    """A page to open: its name, its address after the server's URL (``{study}``: the study's id),
    whether a target applies, and the JavaScript expression that is true once its last element is
    drawn (evaluated with the status widget's running icon absent)."""

    name: str
    path: str
    target: bool
    drawn: str


def _plots(n: int) -> str:
    """True once ``n`` plotly charts have drawn their SVG."""
    return f"[...document.querySelectorAll('.js-plotly-plot')].filter(n => n.querySelector('.main-svg')).length >= {n}"


def _text(text: str) -> str:
    """True once a heading or paragraph of the page's main block shows ``text``."""
    tags = ", ".join(f'[data-testid="stMain"] {tag}' for tag in ("h1", "h2", "h3", "p"))
    return f"[...document.querySelectorAll({tags!r})].some(e => e.textContent.includes({text!r}))"


PAGES: tuple[Page, ...] = (
    # Home: its last section, the latest runs table (the results folder holds runs)
    Page("Home", "", True, _text("Latest runs") + " && !!document.querySelector('[data-testid=\"stDataFrame\"]')"),
    # Launch: the Launch button comes last (after the schedulers, the sweep and the load preview)
    Page("Launch", "Launch", True, "!!document.querySelector('.st-key-launch button')"),
    # Results with the study: its statistics table and its three charts (bars of SLO attainment and
    # G, the pooled CDFs), then the members' table after them
    Page(
        "Results",
        "Results?study={study}",
        True,
        "!!document.querySelector('.st-key-study_table_0 table') && " + _plots(3),
    ),
    # Demo: its headline and its charts
    Page("Demo", "Demo", False, _text("Which scheduler serves more users on time?") + " && " + _plots(3)),
    # the floor: a one-line Streamlit app, served the same way
    Page("floor", "", False, _text("floor: ready")),
)
FLOOR_APP = 'import streamlit as st\n\nst.write("floor: ready")\n'


def _wait_drawn(page: Any, drawn: str) -> None:
    """Until ``drawn`` holds and no script runs (checked together, on every animation frame)."""
    page.wait_for_function(
        f"() => ({drawn}) && !document.querySelector({RUNNING!r})",
        timeout=PAGE_TIMEOUT_MS,
        polling="raf",
    )


def _start_server(app: Path, results: Path, log: Any) -> tuple[subprocess.Popen[bytes], str, float]:
    """``streamlit run APP`` (headless, a free port) showing ``results``; returns the process, its
    URL and the perf_counter time its health check first answered ok (polled every 20 ms)."""
    from runners.engines.launcher import free_port

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port)]
        + ["--server.address", "127.0.0.1", "--server.headless", "true"],
        cwd=app.parent,
        env={**os.environ, "SCHEDLAB_RESULTS_DIR": str(results)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                return server, url, time.perf_counter()
        except OSError:
            time.sleep(0.02)
        if server.poll() is not None:
            break
    server.kill()
    server.wait()
    raise TimeoutError("streamlit did not answer /_stcore/health")


def _stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def measure_once(page: Page, root: Path, results: Path, study: str, floor_app: Path, log: Any) -> dict[str, float]:
    """One fresh server of the checkout ``root`` and a fresh browser: seconds from health-ok to
    ``page`` drawn (``first_s``), when its HTML was served (``served_s``), and the cached visit in a
    new tab (``cached_s``)."""
    from playwright.sync_api import sync_playwright

    from tests.browser.screenshot import launch_chromium

    app = floor_app if page.name == "floor" else root / "app.py"
    address = page.path.format(study=study)
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            tab = context.new_page()
            started = time.perf_counter()
            server, url, healthy = _start_server(app, results, log)
            try:
                startup = healthy - started
                tab.goto(f"{url}/{address}", timeout=PAGE_TIMEOUT_MS)
                served = time.perf_counter() - healthy
                _wait_drawn(tab, page.drawn)
                first = time.perf_counter() - healthy
                exceptions = tab.locator("[data-testid='stException']").count()
                second = context.new_page()
                opened = time.perf_counter()
                second.goto(f"{url}/{address}", timeout=PAGE_TIMEOUT_MS)
                _wait_drawn(second, page.drawn)
                cached = time.perf_counter() - opened
                exceptions += second.locator("[data-testid='stException']").count()
            finally:
                _stop_server(server)
        finally:
            browser.close()
    if exceptions:
        raise RuntimeError(f"{page.name}: the page showed an exception")
    return {"first_s": first, "served_s": served, "cached_s": cached, "server_start_s": startup}


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _range(entry: dict[str, float]) -> str:
    return f"{entry['median']:.2f} ({entry['min']:.2f}-{entry['max']:.2f})"


def measure(
    pages: list[Page],
    repeats: int,
    quick: bool,
    baseline: Path | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every page ``repeats`` times in turn; per page its measurements and their summaries. With
    ``baseline`` (another checkout of the repository, an earlier commit), each page of this one
    is followed by the same page served from the baseline, so both see the machine alike."""
    versions = {"this": ROOT, **({"baseline": baseline} if baseline is not None else {})}
    for root in versions.values():  # bytecode written first: every repeat finds it, not only the later ones
        for name in ("runners", "pages"):
            compileall.compile_dir(root / name, quiet=1)
        compileall.compile_file(root / "app.py", quiet=1)
    schedulers, seeds = (STUDY_SCHEDULERS[:2], 2) if quick else (STUDY_SCHEDULERS, STUDY_SEEDS)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        results = Path(scratch) / "results"
        results.mkdir()
        for folder in (ROOT / "results").glob("demo*"):  # a fresh clone's results/ holds the demo studies
            shutil.copytree(folder, results / folder.name)
        before = {folder.name for folder in results.iterdir()}
        made = time.perf_counter()
        work = Path(scratch) / "study"
        work.mkdir()
        study = make_study(work, schedulers, seeds, STUDY_REQUESTS)
        for folder in work.iterdir():
            shutil.move(str(folder), results / folder.name)
        made = time.perf_counter() - made
        assert study not in before
        floor_app = Path(scratch) / "floor" / "floor_app.py"
        floor_app.parent.mkdir()
        floor_app.write_text(FLOOR_APP)
        runs: dict[tuple[str, str], list[dict[str, float]]] = {}
        with (Path(scratch) / "streamlit.log").open("wb") as log:
            for round_number in range(repeats):
                for page in pages:
                    for version, root in versions.items():
                        if page.name == "floor" and version != "this":
                            continue  # the floor serves no page of either checkout
                        figures = measure_once(page, root, results, study, floor_app, log)
                        runs.setdefault((version, page.name), []).append(figures)
                        say(
                            f"round {round_number + 1} {page.name} ({version}): "
                            + ", ".join(f"{k} {v:.2f}" for k, v in figures.items())
                        )
    report: dict[str, Any] = {
        "repeats": repeats,
        "study": {"schedulers": len(schedulers), "seeds": seeds, "requests_per_run": STUDY_REQUESTS, "make_s": made},
        "target_s": TARGET_S,
        "load_average_1_5_15": {"start": load_before, "end": os.getloadavg()},
        "cpus": os.cpu_count(),
        "baseline": str(baseline) if baseline is not None else None,
        "pages": {},
        "baseline_pages": {},
    }
    for (version, name), entries in runs.items():
        page = next(page for page in pages if page.name == name)
        summary = {key: _summary([entry[key] for entry in entries]) for key in entries[0]}
        met = summary["first_s"]["median"] <= TARGET_S if page.target else None
        key = "pages" if version == "this" else "baseline_pages"
        report[key][name] = {"path": page.path, "runs": entries, **summary, "target_met": met}
    return report


def lines_of(report: dict[str, Any]) -> list[str]:
    """The Markdown summary of ``report``."""
    study = report["study"]
    load = report["load_average_1_5_15"]
    rows = []
    entries = [(name, "", entry) for name, entry in report["pages"].items()]
    if report.get("baseline"):  # each page's baseline row under its own
        entries = [
            row
            for name, _, entry in entries
            for row in [(name, " (this)", entry)]
            + ([(name, " (baseline)", report["baseline_pages"][name])] if name in report["baseline_pages"] else [])
        ]
    for name, version, entry in entries:
        verdict = "—" if entry["target_met"] is None else ("met" if entry["target_met"] else "missed")
        label = ("floor (a one-line Streamlit app)" if name == "floor" else name) + version
        rows.append(
            [
                label,
                _range(entry["first_s"]),
                _range(entry["served_s"]),
                _range(entry["cached_s"]),
                f"<= {TARGET_S:g} s: {verdict}" if entry["target_met"] is not None else "—",
            ]
        )
    return [
        "# Seconds from a fresh server's health-ok until the page is drawn in headless Chromium",
        "",
        f"Median (min-max) of {report['repeats']} fresh servers and browsers a page, pages in turn; the first visit "
        "is the server's first. Cached: the same page again in a new tab, seconds from opening it. Results shows a "
        f"study of {study['schedulers']} schedulers x {study['seeds']} seeds ({study['requests_per_run']} requests a "
        "run); the results folder also holds the bundled demo studies. Machine: "
        f"{report['cpus']} CPUs, load average (1 min) {load['start'][0]:.2f} at the start, {load['end'][0]:.2f} "
        "at the end."
        + (
            f" Baseline: each page was also served from {report['baseline']} right after this checkout's."
            if report.get("baseline")
            else ""
        ),
        "",
        *markdown_table(
            ["page", "first visit (s)", "HTML served (s)", "cached visit (s)", "target (first visit)"],
            rows,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a 2 x 2 study, one repeat, nothing written")
    parser.add_argument(
        "--pages", default=",".join(page.name for page in PAGES), help="comma-separated: Home,Launch,Results,Demo,floor"
    )
    parser.add_argument("--out", default="page_open", help="report name under bench/results (without suffix)")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. a git worktree of an earlier commit): each page served from it too, in turn",
    )
    args = parser.parse_args(argv)
    by_name = {page.name.lower(): page for page in PAGES}
    wanted = [name.strip().lower() for name in args.pages.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in by_name]
    if unknown:
        parser.error(f"unknown page(s): {', '.join(unknown)}")
    report = measure([by_name[name] for name in wanted], 1 if args.quick else args.repeats, args.quick, args.baseline)
    lines = lines_of(report)
    if args.quick:
        print("\n".join(lines))
        return 0
    write_report(args.out, report, lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
