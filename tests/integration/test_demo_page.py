"""The Demo page under AppTest (issue 15): its "See every metric" link opens the demo's own study
on the Results page, not the newest runs or another study (defect 6); its memory chart is in
percent on a 0-100 axis and its caption states what the shown runs' KV usage measured, never
claiming a cache filled that did not (defect 9)."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np
import pandas as pd
import pytest
from test_app import BUNDLED, open_page

from runners.demo import DEMO_SCHEDULERS, kv_caption, kv_usage
from runners.result_store import RunData


@pytest.fixture
def demo_results(monkeypatch, results_dir: Path) -> Path:
    monkeypatch.setattr("runners.result_store.DEFAULT_RESULTS_DIR", results_dir)
    for folder in sorted(BUNDLED.glob("demo*")):
        shutil.copytree(folder, results_dir / folder.name)
    return results_dir


def _values(encoded) -> np.ndarray:
    """A trace's values as plotly writes them: a list, or ``{dtype, bdata}`` (base64 bytes)."""
    if isinstance(encoded, dict):
        return np.frombuffer(base64.b64decode(encoded["bdata"]), dtype=np.dtype(encoded["dtype"]))
    return np.asarray(encoded, dtype=float)


def _peak_percent(results: Path, run_id: str) -> float:
    """By hand: the largest per-sample mean of kv_usage over instances, in percent."""
    frame = pd.read_parquet(results / run_id / "timeseries.parquet")
    return 100 * float(frame.groupby("t_s")["kv_usage"].mean().max())


def test_the_memory_chart_is_in_percent_and_its_caption_states_the_measured_peaks(demo_results):
    app = open_page("pages/3_Demo.py")
    charts = [chart for chart in app.get("plotly_chart") if "demo-memory" in chart.proto.id]
    assert len(charts) == 1
    figure = json.loads(charts[0].proto.spec)
    assert figure["layout"]["yaxis"]["range"] == [0, 100]
    shown = {trace["legendgroup"]: float(np.nanmax(_values(trace["y"]))) for trace in figure["data"]}
    assert set(shown) == {"demo-fcfs-s0", "demo-mcsf-s0", "demo-static-s0"}
    for run_id, top in shown.items():  # percent (0-100), not a fraction (0-1) on a % axis
        assert top <= 100 and top == pytest.approx(_peak_percent(demo_results, run_id), abs=0.5), run_id
    caption = next(caption.value for caption in app.caption if caption.value.startswith("One seed only"))
    for run_id in shown:
        scheduler = run_id.split("-")[1]
        assert f"**{scheduler}** peaks at {_peak_percent(demo_results, run_id):.1f}%" in caption, caption
    assert "fills and empties it" not in caption  # the claim the old caption made whatever the data


def test_a_cache_never_filled_is_not_said_to_fill():
    """A run whose cache peaked at 1.2% (the issue's demo): the caption says so, and names no
    sawtooth or full cache."""
    series = [0.0, 0.004, 0.012, 0.006, 0.0]
    frame = pd.DataFrame({"t_s": [0.0, 0.25, 0.5, 0.75, 1.0], "instance": [0] * 5, "kv_usage": series})
    run = RunData("big-cache", Path("."), {}, {"scheduler": "static", "preemptions": 0}, pd.DataFrame(), frame)
    assert kv_usage(run).peak == pytest.approx(0.012) and kv_usage(run).full_share == 0.0
    caption = kv_caption([run], 0)
    assert "**static** never fills it: it peaks at 1.2%" in caption
    assert "sawtooth" not in caption and "full" not in caption.split("peaks at")[1].split(".")[0]


def test_see_every_metric_opens_the_demo_study_on_the_results_page(demo_results):
    """With a newer study beside it (listed first on the Results page), the link still opens the
    demo's: its query names the study, and the Results page shows the demo's schedulers."""
    from runners.config import parse_config
    from runners.study import plan_study, run_study

    other = parse_config(
        {
            "run_id": "newer",
            "workload": {"requests": 20},
            "scheduler": {"name": "fcfs"},
            "trials": {"schedulers": ["fcfs", "static"], "seeds": [0]},
        }
    )
    run_study(plan_study(other, "newer"), demo_results)
    app = open_page("pages/3_Demo.py")
    links = [link for link in app.get("page_link") if "Results page" in link.proto.label]
    assert len(links) == 1
    link = links[0].proto
    assert link.page == "Results"
    query = {key: values[0] for key, values in parse_qs(link.query_string).items()}
    assert query == {"study": "demo"}

    results = open_page()
    for key, value in query.items():
        results.query_params[key] = value
    results.switch_page("pages/2_Results.py").run()
    assert not results.exception, results.exception
    assert results.selectbox(key="study").value == "demo"
    shown = " ".join(str(table.value.to_dict()) for table in results.dataframe)
    assert all(scheduler in shown for scheduler in DEMO_SCHEDULERS), shown[:500]
