"""The dashboard for multi-turn sessions (issue 31 item 7): the Launch page's "sessions" traffic
shape (its multi-turn fields, the Requests field named Sessions, a launched run whose config holds
workload.multi_turn with the typed values), and the Results page's sessions table and TTFT-by-turn
chart for a multi-turn run (its data equal to summary.turns), one line per run in a comparison,
and nothing new for a single-turn run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runners.app.launch_form import SESSION_FIELDS, build_job, for_traffic
from runners.metrics.catalog import SESSION_METRICS, TURN_LABEL, turn_metric
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from runners.views.charts import TURN_TTFT_TITLE, turn_ttft_chart
from runners.views.session_view import session_table
from tests.integration.test_app import open_page, wait_for_job

MULTI_TURN = {"max_turns": 4, "think_time": {"mean_s": 1}}


@pytest.fixture
def results(monkeypatch, results_dir: Path) -> Path:
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    return results_dir


def sim_run(results: Path, run_id: str, scheduler: str = "fcfs", multi_turn: dict | None = None) -> None:
    workload: dict = {"requests": 20, "arrival": {"process": "poisson", "rate": 4}}
    if multi_turn is not None:
        workload["multi_turn"] = multi_turn
    execute_run(parse_config({"run_id": run_id, "scheduler": {"name": scheduler}, "workload": workload}), results)


def chart_spec(app, key: str) -> dict | None:
    charts = [chart for chart in app.get("plotly_chart") if key in chart.proto.id]
    assert len(charts) <= 1
    return json.loads(charts[0].proto.spec) if charts else None


def sessions_frame(app):
    label = SESSION_METRICS[0].label
    frames = [frame for frame in app.dataframe if label in frame.value.columns and "run id" in frame.value.columns]
    return frames[0].value if frames else None


def test_only_the_sessions_traffic_keeps_the_multi_turn_fields_and_it_always_makes_a_multi_turn_run():
    values = {
        "workload.requests": "12",
        "workload.arrival.rate": "2",
        "workload.trace.path": "t.jsonl",
        "workload.system_prompt.tokens": "64",
        "workload.multi_turn.max_turns": "3",
    }
    assert for_traffic(values, "sessions") == {
        "workload.requests": "12",
        "workload.arrival.rate": "2",
        "workload.multi_turn.max_turns": "3",
    }
    for shape in ("datasets", "system-prompt", "trace"):
        assert not any(key.startswith("workload.multi_turn.") for key in for_traffic(values, shape)), shape
    # every multi-turn field blank: still sessions, at the model's defaults
    blank = {"workload.requests": "12", **{path: "" for path in SESSION_FIELDS}}
    job = build_job(for_traffic(blank, "sessions"), ["fcfs"], check_workload=False, check_machine=False)
    assert job.ok, job.errors
    multi = job.spec.runs[0].workload.multi_turn
    assert multi is not None and (multi.max_turns, multi.think_time.mean_s, multi.context_tokens) == (8, 5.0, 4096)
    job = build_job(for_traffic(blank, "datasets"), ["fcfs"], check_workload=False, check_machine=False)
    assert job.spec.runs[0].workload.multi_turn is None


def test_the_launch_page_launches_sessions_with_the_typed_multi_turn_values(results):
    app = open_page("pages/1_Launch.py")
    assert app.text_input(key="f:workload.requests").label == "Requests"
    assert app.text_input(key="f:workload.arrival.rate").label == "Rate (req/s)"
    assert "f:workload.multi_turn.max_turns" not in {t.key for t in app.text_input}
    app.selectbox(key="ui:traffic").set_value("sessions").run()
    assert not app.exception, app.exception
    keys = {widget.key for widget in [*app.text_input, *app.selectbox]}
    assert {f"f:{path}" for path in SESSION_FIELDS} <= keys
    assert {"f:workload.arrival.process", "f:workload.ratio.chat", "f:workload.chat.kind"} <= keys  # datasets, arrivals
    assert not {"f:workload.trace.path", "f:workload.system_prompt.tokens"} & keys
    requests = app.text_input(key="f:workload.requests")
    assert requests.label == "Sessions" and "counts sessions" in requests.help
    assert app.text_input(key="f:workload.multi_turn.max_turns").label == "Max turns per session"
    assert app.text_input(key="f:workload.arrival.rate").label == "Rate (sessions/s)"
    assert app.text_input(key="f:workload.multi_turn.max_turns").value == "8"  # the model's default
    assert any("estimate counts first turns only" in info.value for info in app.info)
    app.text_input(key="f:workload.multi_turn.max_turns").input("3").run()
    app.selectbox(key="f:workload.multi_turn.think_time.distribution").set_value("constant").run()
    app.text_input(key="f:workload.multi_turn.think_time.mean_s").input("0.5").run()
    app.text_input(key="f:workload.multi_turn.context_tokens").input("2048").run()
    app.text_input(key="f:workload.requests").input("12").run()
    app.text_input(key="f:trials.seeds").input("").run()
    app.multiselect(key="schedulers").set_value(["fcfs"]).run()
    app.select_slider(key="ui:pace").set_value("as fast as possible").run()
    app.button(key="launch").click().run()
    assert not app.error and not app.exception, ([error.value for error in app.error], app.exception)
    job = wait_for_job(results)
    assert job.state == "done", job
    run_id = job.runs[0].run_id
    config = json.loads((results / run_id / "config.json").read_text())["config"]
    assert config["workload"]["multi_turn"] == {
        "max_turns": 3,
        "think_time": {"distribution": "constant", "mean_s": 0.5},
        "context_tokens": 2048,
    }
    assert config["workload"]["requests"] == 12 and config["workload"].get("trace") is None
    summary = load_run(results, run_id).summary
    assert summary.sessions.sessions == 12 and max(turn.turn for turn in summary.turns) <= 3


def test_a_bad_multi_turn_value_is_named_under_its_field(results):
    app = open_page("pages/1_Launch.py")
    app.selectbox(key="ui:traffic").set_value("sessions").run()
    app.text_input(key="f:workload.multi_turn.max_turns").input("0").run()
    app.button(key="launch").click().run()
    assert not app.exception, app.exception
    assert any(
        error.value.startswith("**Max turns per session**: expected a whole number from 1 to 1,000")
        for error in app.error
    ), [error.value for error in app.error]


def test_the_results_page_shows_sessions_and_ttft_by_turn_for_a_multi_turn_run_only(results):
    sim_run(results, "mt-fcfs", "fcfs", MULTI_TURN)
    sim_run(results, "mt-slo-sa", "slo-sa", MULTI_TURN)
    sim_run(results, "single", "fcfs")
    summary = load_run(results, "mt-fcfs").summary
    app = open_page("pages/2_Results.py")

    app.multiselect(key="compare_runs").set_value(["single"]).run()
    assert not app.exception, app.exception
    assert chart_spec(app, "chart-turn-ttft") is None and sessions_frame(app) is None
    assert not any(h.value == "Multi-turn sessions" for h in app.subheader)

    app.multiselect(key="compare_runs").set_value(["mt-fcfs"]).run()
    assert not app.exception, app.exception
    assert any(h.value == "Multi-turn sessions" for h in app.subheader)
    spec = chart_spec(app, "chart-turn-ttft")
    assert spec is not None and spec["layout"]["title"]["text"] == TURN_TTFT_TITLE
    mean, p99 = spec["data"]
    turns = [turn.turn for turn in summary.turns]
    assert len(turns) >= 2 and mean["x"] == turns == p99["x"]
    assert mean["y"] == pytest.approx([turn.ttft_mean_s for turn in summary.turns])
    assert p99["y"] == pytest.approx([turn.ttft_p99_s for turn in summary.turns])
    assert p99["xaxis"] == "x2" and spec["layout"]["yaxis2"]["title"]["text"] == "TTFT p99 (s)"
    assert spec["layout"]["yaxis"]["title"]["text"] == "TTFT mean (s)"
    assert spec["layout"]["xaxis"]["title"]["text"] == TURN_LABEL
    table = sessions_frame(app)
    row = table.set_index("run id").loc["mt-fcfs"]
    assert row["sessions"] == "20" and row["sessions"] == str(summary.sessions.sessions)
    assert row["sessions completed"] == str(summary.sessions.completed)
    assert row["sessions within SLO"] == str(summary.sessions.all_turns_met)
    assert row["sessions within SLO (%)"] == f"{100 * summary.sessions.slo_attainment:.1f}"
    assert row["turns per session, mean"] == f"{summary.sessions.turns_per_session_mean:.2f}"

    # a comparison: one line per multi-turn run in each panel; the single-turn run is named, not drawn
    app.multiselect(key="compare_runs").set_value(["mt-fcfs", "mt-slo-sa", "single"]).run()
    assert not app.exception, app.exception
    spec = chart_spec(app, "chart-turn-ttft")
    legend = [trace["name"] for trace in spec["data"] if trace.get("showlegend", True)]
    assert legend == ["fcfs", "slo-sa"] and len(spec["data"]) == 4
    other = load_run(results, "mt-slo-sa").summary
    slo_sa_mean = next(t for t in spec["data"] if t["name"] == "slo-sa" and t.get("xaxis", "x") == "x")
    assert slo_sa_mean["y"] == pytest.approx([turn.ttft_mean_s for turn in other.turns])
    assert list(sessions_frame(app)["run id"]) == ["mt-fcfs", "mt-slo-sa"]
    assert any("Not multi-turn, so not shown here: " in caption.value for caption in app.caption)
    app.button(key="make_html").click().run()  # the HTML export of all charts holds it too
    assert 'id="chart-turn-ttft"' in app.session_state["export_html"]


def test_the_turn_chart_leaves_a_gap_where_a_turn_has_no_ttft_and_the_table_reads_the_catalog():
    from runners.store.models import RunSummary

    summary = RunSummary.model_validate(
        {
            "schema_version": 7,
            "run_id": "r1",
            "scheduler": "fcfs",
            "sessions": {
                "sessions": 3,
                "turns": 5,
                "turns_per_session_mean": 5 / 3,
                "completed": 2,
                "all_turns_met": 1,
                "slo_attainment": 1 / 3,
            },
            "turns": [
                {"turn": 1, "requests": 3, "completed": 3, "ttft_mean_s": 0.25, "ttft_p99_s": 0.5},
                {"turn": 2, "requests": 2, "completed": 0, "ttft_mean_s": None, "ttft_p99_s": None},
            ],
        }
    )
    figure = turn_ttft_chart(
        [summary, RunSummary.model_validate({"schema_version": 7, "run_id": "r2", "scheduler": "static"})]
    )
    assert [trace.name for trace in figure.data] == ["fcfs", "fcfs"]  # the run without turns is left out
    assert list(figure.data[0].y) == [0.25, None] and list(figure.data[1].y) == [0.5, None]
    assert figure.layout.yaxis.title.text == turn_metric("ttft_mean_s").label == "TTFT mean (s)"
    table = session_table([summary], {"r1": "fcfs"})
    assert list(table.columns) == ["run", "run id", *(entry.label for entry in SESSION_METRICS)]
    assert table.iloc[0].tolist() == ["fcfs", "r1", "3", "1.67", "2", "1", "33.3"]


@pytest.mark.browser
def test_in_a_browser_the_results_page_draws_ttft_by_turn(tmp_path_factory):
    """The per-turn chart as headless Chromium draws it (plotly.js, not only the figure's JSON):
    the Results page opened on a multi-turn run shows the chart with the summary's turns and TTFT
    means, and no exception (skipped without Chromium, unless SCHEDLAB_REQUIRE_BROWSER=1)."""
    from tests.e2e.test_browser import _requirements

    _requirements()
    from playwright.sync_api import sync_playwright

    from tests.browser.screenshot import launch_chromium
    from tests.dashboard_server import start_dashboard, stop_dashboard

    results = tmp_path_factory.mktemp("results")
    sim_run(results, "mt-fcfs", "fcfs", MULTI_TURN)
    summary = load_run(results, "mt-fcfs").summary
    server, url = start_dashboard(results, timeout_s=90)
    try:
        with sync_playwright() as playwright:
            chromium = launch_chromium(playwright)
            page = chromium.new_page(viewport={"width": 1024, "height": 1000})
            page.goto(f"{url}/Results?runs=mt-fcfs", timeout=60_000)
            page.get_by_text(TURN_TTFT_TITLE).first.wait_for(timeout=60_000)
            assert page.locator("[data-testid='stException']").count() == 0
            drawn = page.evaluate(
                """title => {  // Streamlit's frontend sets the title in bold: <b>...</b>
                    const plot = [...document.querySelectorAll('.js-plotly-plot')]
                        .find(node => String(((node.layout || {}).title || {}).text || '').includes(title));
                    return plot ? plot.data.map(trace => [Array.from(trace.x), Array.from(trace.y)]) : null;
                }""",
                TURN_TTFT_TITLE,
            )
            chromium.close()
    finally:
        stop_dashboard(server, timeout_s=20)
    assert drawn is not None and len(drawn) == 2
    (mean_x, mean_y), (p99_x, _) = drawn
    assert mean_x == p99_x == [turn.turn for turn in summary.turns]
    assert mean_y == pytest.approx([turn.ttft_mean_s for turn in summary.turns])
