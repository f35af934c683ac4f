"""The prefix-cache hit rate over time on the dashboard (issue 31 items 4 and 7): the Results page
draws it in the over-time group for runs with the counters (its y values those of
runners.views.prefix_view.hit_rate_over_time), names the runs without them and draws nothing for a
comparison where none has them; the Launch page's live view draws it for the running job's run,
and the chart follows the rows as they arrive."""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runners.metrics.catalog import metric
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from runners.store.timeseries import PREFIX_CACHE_NAMES
from runners.views.charts import (
    CHART_VIEWS,
    PREFIX_HIT_RATE_CHART,
    PREFIX_HIT_RATE_TITLE,
    PREFIX_HIT_RATE_VIEWS,
    live_prefix_hit_rate,
)
from runners.views.compare import run_display_names
from runners.views.live import read_live
from runners.views.prefix_view import hit_rate_over_time
from tests.integration.test_app import open_page, wait_for_job

MULTI_TURN = {"max_turns": 4, "think_time": {"mean_s": 1}}


@pytest.fixture
def results(monkeypatch, results_dir: Path) -> Path:
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    return results_dir


def sim_run(results: Path, run_id: str, scheduler: str = "fcfs", pace: float | None = None) -> None:
    """A multi-turn simulator run (sessions share their conversation's prefix)."""
    workload = {"requests": 20, "arrival": {"process": "poisson", "rate": 2}, "multi_turn": MULTI_TURN}
    data = {"run_id": run_id, "scheduler": {"name": scheduler}, "workload": workload, "engine": {"pace": pace}}
    execute_run(parse_config(data), results)


def strip_counters(folder: Path) -> None:
    """The run's timeseries.parquet with its prefix-cache counters null (an engine that does not
    report them: SGLang, LMDeploy, a fake server), schema kept."""
    path = folder / "timeseries.parquet"
    table = pq.read_table(path)
    for column in PREFIX_CACHE_NAMES:
        index = table.schema.get_field_index(column)
        table = table.set_column(index, table.schema.field(index), pa.nulls(len(table), table.schema.field(index).type))
    pq.write_table(table, path)


def chart_spec(app, key: str) -> dict | None:
    charts = [chart for chart in app.get("plotly_chart") if key in chart.proto.id]
    assert len(charts) <= 1
    return json.loads(charts[0].proto.spec) if charts else None


def comparison_charts(app) -> set[str]:
    """The comparison charts the page draws (keys ``chart-<name>``; the multi-turn TTFT-by-turn chart aside)."""
    keys = {chart.proto.id.split("chart-", 1)[1] for chart in app.get("plotly_chart") if "chart-" in chart.proto.id}
    return keys - {"turn-ttft"}


def values(encoded) -> list[float]:
    """A trace's values as plotly writes them (a list with None for a gap, or ``{dtype, bdata}``:
    base64 bytes), NaN for a gap."""
    if isinstance(encoded, dict):
        return list(np.frombuffer(base64.b64decode(encoded["bdata"]), dtype=np.dtype(encoded["dtype"])))
    return [math.nan if value is None else float(value) for value in encoded]


def same(encoded, series) -> bool:
    """Whether a trace's values equal ``series`` (NaN, a gap, where it has NaN)."""
    return values(encoded) == pytest.approx(list(series), nan_ok=True)


def test_the_results_page_draws_the_hit_rate_over_time_for_runs_with_counters_only(results):
    sim_run(results, "mt-fcfs", "fcfs")
    sim_run(results, "mt-slo-sa", "slo-sa")
    sim_run(results, "no-counters", "fcfs")
    strip_counters(results / "no-counters")
    loaded = {run_id: load_run(results, run_id) for run_id in ("mt-fcfs", "mt-slo-sa", "no-counters")}
    names = run_display_names(list(loaded.values()))
    expected = {run_id: hit_rate_over_time(loaded[run_id].timeseries) for run_id in ("mt-fcfs", "mt-slo-sa")}
    assert all(series.notna().any() and series.max() > 0 for series in expected.values())  # sharing: hits
    app = open_page("pages/2_Results.py")
    app.multiselect(key="compare_runs").set_value(["mt-fcfs", "mt-slo-sa", "no-counters"]).run()
    assert not app.exception, app.exception
    assert chart_spec(app, f"chart-{PREFIX_HIT_RATE_CHART}") is None  # Overview: not an over-time view
    app.get("button_group")[0].set_value("Memory & batch").run()
    assert not app.exception, app.exception
    assert comparison_charts(app) == {*CHART_VIEWS["Memory & batch"], PREFIX_HIT_RATE_CHART}
    spec = chart_spec(app, f"chart-{PREFIX_HIT_RATE_CHART}")
    assert spec is not None and spec["layout"]["title"]["text"] == PREFIX_HIT_RATE_TITLE
    # one line per run with counters, none for the run without them
    assert [trace["name"] for trace in spec["data"]] == [names["mt-fcfs"], names["mt-slo-sa"]]
    for trace, run_id in zip(spec["data"], ("mt-fcfs", "mt-slo-sa")):
        assert same(trace["x"], expected[run_id].index) and same(trace["y"], expected[run_id])
    assert spec["layout"]["yaxis"]["title"]["text"] == metric("prefix_cache_hit_rate").label
    assert spec["layout"]["yaxis"]["range"] == [0, 100]
    notes = [caption.value for caption in app.caption if "No prefix-cache counters" in caption.value]
    assert len(notes) == 1 and notes[0].endswith(f"or an imported or older run): {names['no-counters']}."), notes
    app.get("button_group")[0].set_value("All charts").run()
    assert chart_spec(app, f"chart-{PREFIX_HIT_RATE_CHART}") is not None
    app.button(key="make_html").click().run()  # the HTML export of all charts holds it too
    assert f'id="chart-{PREFIX_HIT_RATE_CHART}"' in app.session_state["export_html"]

    # a comparison where no run has the counters: no chart, the view as before
    app.multiselect(key="compare_runs").set_value(["no-counters"]).run()
    for view in PREFIX_HIT_RATE_VIEWS:
        app.get("button_group")[0].set_value(view).run()
        assert not app.exception, app.exception
        assert chart_spec(app, f"chart-{PREFIX_HIT_RATE_CHART}") is None
        assert comparison_charts(app) == set(CHART_VIEWS[view])


def test_the_live_view_draws_the_running_runs_hit_rate(results):
    app = open_page("pages/1_Launch.py")
    app.selectbox(key="ui:traffic").set_value("sessions").run()
    app.text_input(key="f:workload.requests").input("12").run()
    app.text_input(key="f:trials.seeds").input("").run()
    app.multiselect(key="schedulers").set_value(["fcfs"]).run()
    app.select_slider(key="ui:pace").set_value("as fast as possible").run()
    app.button(key="launch").click().run()
    assert not app.error and not app.exception, ([error.value for error in app.error], app.exception)
    job = wait_for_job(results)
    assert job.state == "done", job
    run_id = job.runs[0].run_id
    app.run()
    assert not app.exception, app.exception
    spec = chart_spec(app, f"live-prefix-{run_id}")
    assert spec is not None and spec["layout"]["title"]["text"] == PREFIX_HIT_RATE_TITLE
    expected = hit_rate_over_time(read_live(results / run_id).timeseries)
    (trace,) = spec["data"]
    assert same(trace["x"], expected.index) and same(trace["y"], expected)
    assert np.nanmax(values(trace["y"])) > 0
    assert spec["layout"]["xaxis"]["title"]["text"] == "run time, simulated (s)"


def test_the_live_chart_follows_the_samples_as_they_arrive(results):
    """Read while the run goes (as the live view's one-second redraw reads it): the chart drawn from
    each look ends at that look's last sample, and later looks reach further."""
    run = threading.Thread(target=sim_run, args=(results, "live-mt", "fcfs", 20.0))  # ~2.5 s of wall time
    run.start()
    ends = []
    while run.is_alive():
        snapshot = read_live(results / "live-mt")
        if snapshot is not None and len(snapshot.timeseries):
            figure = live_prefix_hit_rate(snapshot.timeseries, simulated=True)
            ends.append((float(figure.data[0].x[-1]), float(snapshot.timeseries["t_s"].max())))
        time.sleep(0.05)
    run.join()
    assert all(chart_end == sample_end for chart_end, sample_end in ends)
    assert len({end for end, _ in ends}) >= 2, ends  # the chart grew while the run went
    final = live_prefix_hit_rate(read_live(results / "live-mt").timeseries, simulated=True)
    assert final.data[0].x[-1] > ends[0][0]
