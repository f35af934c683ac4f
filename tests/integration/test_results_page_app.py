"""The Results page's comparison under Streamlit's AppTest (issue 15): run names as column headers
with the id on hover, every metric without an inner scroll, badges that agree with the shown values
(defect 7), a warning naming what differs between workloads, exports with each run's config, seed
and versions, per-run downloads, readable sweep capacity headers."""

from __future__ import annotations

import html
import io
import re

import pandas as pd
import pytest

from runners.metrics.catalog import TABLE_METRICS
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from tests.integration.test_app import bundle, open_page


@pytest.fixture
def results(monkeypatch, results_dir):
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    return results_dir


def comparison(app) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(shown cells, cell colours, html) of the page's comparison table, parsed from its HTML:
    the header row (titles kept as ``name|title``), then per row the metric and each run's cell
    text; colours: the CSS colour of each cell's badge, '' when it has none."""
    page = next(m.value for m in app.markdown if m.value.startswith("<table class='schedlab-comparison'"))
    header = re.findall(r"<th(?: title='([^']*)')?[^>]*>([^<]*)</th>", page)
    columns = [html.unescape(name) for _, name in header]
    rows, colours = [], []
    for row in re.findall(r"<tr>(.*?)</tr>", page)[1:]:
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        rows.append([html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in cells])
        colours.append([(re.findall(r"color: (#[0-9a-f]{6})", cell) or [""])[0] for cell in cells])
    titles = {html.unescape(name): title for title, name in header}
    return (pd.DataFrame(rows, columns=columns), pd.DataFrame(colours, columns=columns), titles)


def run(
    results,
    run_id: str,
    scheduler: str,
    requests: int = 30,
    rate: float = 4.0,
    seed: int = 0,
    sweep_id: str | None = None,
) -> None:
    execute_run(
        parse_config(
            {
                "run_id": run_id,
                "scheduler": {"name": scheduler},
                "sweep_id": sweep_id,
                "workload": {"requests": requests, "seed": seed, "arrival": {"process": "poisson", "rate": rate}},
            }
        ),
        results,
    )


def test_comparison_names_runs_shows_every_metric_and_badges_by_shown_values(results):
    bundle(
        results,
        "demo-overload-fcfs-s0",
        "demo-overload-static-s0",
        "demo-overload-mcsf-s0",
        "demo-overload-slo-sa-s0",
        "demo-overload-dynamic-mem-s0",
    )
    app = open_page("pages/2_Results.py")
    chosen = [
        "demo-overload-fcfs-s0",
        "demo-overload-static-s0",
        "demo-overload-mcsf-s0",
        "demo-overload-slo-sa-s0",
        "demo-overload-dynamic-mem-s0",
    ]
    app.multiselect(key="compare_runs").set_value(chosen).run()
    app.selectbox(key="baseline").set_value("demo-overload-fcfs-s0").run()
    assert not app.exception, app.exception
    table, colours, titles = comparison(app)
    # names, not ids: one seed and one rate, so the scheduler alone; the id is the header's tooltip
    assert list(table.columns) == ["metric", "fcfs (baseline)", "static", "mcsf", "slo-sa", "dynamic-mem"]
    assert (
        titles["static"] == "run demo-overload-static-s0" and titles["fcfs (baseline)"] == "run demo-overload-fcfs-s0"
    )
    # every metric in one HTML table (no dataframe with its ten-row inner scroll)
    assert len(table) == len([m for m in TABLE_METRICS if not m.real_engines_only])
    assert not any("comparison" in frame.proto.id for frame in app.dataframe)
    rows = table.set_index("metric")
    fcfs = load_run(results, "demo-overload-fcfs-s0").summary
    static = load_run(results, "demo-overload-static-s0").summary
    assert rows.loc["SLO attainment (%)", "fcfs (baseline)"] == f"{100 * fcfs.slo_attainment:.1f}"
    shown_change = round(100 * static.slo_attainment, 1) - round(100 * fcfs.slo_attainment, 1)
    assert rows.loc["SLO attainment (%)", "static"] == (f"{100 * static.slo_attainment:.1f} ({shown_change:+.1f} pts)")
    assert rows.loc["completed requests", "static"] == "1000 (=)"  # equal: '=', no colour
    assert rows.loc["TPOT mean (ms)", "fcfs (baseline)"] == f"{1000 * fcfs.tpot_s.mean:.1f}"
    for label in ("TTFT median (s)", "ITL mean (ms)", "queue mean (s)", "input throughput (tok/s)"):
        assert rows.loc[label, "static"] != "-"
    # colours from the shown values and the catalog's direction: equal reads '=' with no colour
    colour = colours.set_index(table["metric"])
    assert colour.loc["completed requests", "static"] == ""
    expected = "#cf222e" if shown_change < 0 else "#1a7f37"  # higher attainment is better
    assert colour.loc["SLO attainment (%)", "static"] == expected
    assert colour.loc["SLO attainment (%)", "fcfs (baseline)"] == ""
    assert all("different workloads" not in w.value for w in app.warning)


def test_comparing_different_workloads_warns_naming_what_differs(results):
    run(results, "small-fcfs", "fcfs", requests=20, rate=2.0)
    run(results, "big-slo-sa", "slo-sa", requests=40, rate=2.0)
    app = open_page("pages/2_Results.py")
    app.multiselect(key="compare_runs").set_value(["small-fcfs", "big-slo-sa"]).run()
    assert not app.exception, app.exception
    warning = next(w.value for w in app.warning if "different workloads" in w.value)
    assert "requests differ: 20 (fcfs); 40 (slo-sa)" in warning


def test_exports_carry_config_seed_versions_and_per_run_downloads(results):
    run(results, "a-fcfs", "fcfs", seed=4)
    run(results, "b-fcfs", "fcfs", seed=5)
    app = open_page("pages/2_Results.py")
    app.multiselect(key="compare_runs").set_value(["a-fcfs", "b-fcfs"]).run()
    # the baseline is picked, not left to the default (the first run listed, whose order between
    # two runs started within the same second is not defined)
    app.selectbox(key="baseline").set_value("a-fcfs").run()
    assert not app.exception, app.exception
    table, _, _ = comparison(app)
    assert list(table.columns) == ["metric", "fcfs · seed 4 (baseline)", "fcfs · seed 5"]  # the seed differs
    keys = {button.proto.id for button in app.get("download_button")}
    for key in ("csv", "export_requests_csv", "export_requests_parquet", "export_summary", "export_config"):
        assert any(key in proto_id for proto_id in keys), key
    from runners.views.compare import comparison_table, csv_with_provenance

    loaded = [load_run(results, "a-fcfs"), load_run(results, "b-fcfs")]
    text = csv_with_provenance(comparison_table([r.summary for r in loaded], "a-fcfs"), loaded)
    assert '"seed": 4' in text and '"schedlab":' in text
    back = pd.read_csv(io.StringIO(text), comment="#")
    # headed as the page heads them (issue 27: they were raw run ids); the comment lines map names to ids
    assert list(back.columns) == ["metric", "fcfs · seed 4", "fcfs · seed 5", "change fcfs · seed 5", "change unit"]
    assert '"name": "fcfs · seed 4"' in text and '"run_id": "a-fcfs"' in text


def test_sweep_capacity_table_has_readable_headers(results):
    for rate in (1.0, 4.0):
        run(results, f"sw-fcfs-{rate:g}", "fcfs", requests=20, rate=rate, sweep_id="sweep-t")
    app = open_page("pages/2_Results.py")
    # the capacity table: the one with the schedulers and the number of rates (an un-keyed
    # st.dataframe has no id to find it by)
    capacity = next(
        frame.value
        for frame in app.dataframe
        if "scheduler" in frame.value.columns and any(str(column).startswith("rates") for column in frame.value.columns)
    )
    assert list(capacity.columns) == ["scheduler", "capacity at ≥ 90% attainment (req/s)", "lower bound", "rates swept"]


def test_downloads_never_rerun_the_page(results):
    """Issue 27 defect 10: a download click reran the page (Streamlit's default), leaving the other
    download buttons stale while it ran; a click on one of them sent the id of a deferred file
    that the rerun had dropped, and no download started (reproduced in headless Chromium: 6 to 8
    of 16 alternating per-run CSV / Parquet clicks). Every download on the page now leaves the
    page as it is (on_click='ignore'), and the per-run requests are files the page holds (a URL),
    not callables whose file Streamlit drops at the end of any session's run."""
    run(results, "a-fcfs", "fcfs", seed=4)
    run(results, "b-fcfs", "fcfs", seed=5)
    app = open_page("pages/2_Results.py")
    app.multiselect(key="compare_runs").set_value(["a-fcfs", "b-fcfs"]).run()
    app.button(key="make_html").click().run()
    assert not app.exception, app.exception
    buttons = {button.proto.id: button.proto for button in app.get("download_button")}
    for key in ("-csv", "-html", "export_requests_csv", "export_requests_parquet", "export_summary", "export_config"):
        assert any(proto_id.endswith(key) for proto_id in buttons), (key, list(buttons))
    assert {proto_id: proto.ignore_rerun for proto_id, proto in buttons.items()} == dict.fromkeys(buttons, True)
    per_run = [proto for proto_id, proto in buttons.items() if "export_requests" in proto_id]
    assert len(per_run) == 2 and all(proto.url and not proto.deferred_file_id for proto in per_run)
