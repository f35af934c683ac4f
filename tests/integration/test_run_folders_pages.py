"""The pages with damaged runs among good ones (issue 9, items 2 and 3), under Streamlit's AppTest:
the Results and Home pages open, list every run (damaged ones as damaged, with the reason),
compare the good ones, and delete a damaged run by its folder's name, never by an id written in
its summary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runners.app.cli import main
from runners.views.demo import DEMO_SCHEDULERS
from tests.integration.test_app import open_page

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "results"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("base") / "res"
    assert main(["run", "--engine", "sim", "--requests", "8", "--run-id", "x", "--out", str(out), "--quiet"]) == 0
    return out / "x"


def set_summary(folder: Path, **fields) -> None:
    path = folder / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


@pytest.fixture
def results(monkeypatch, tmp_path, real_run) -> Path:
    """good-a, good-b, and one run for each kind of damage; the newest has its requests cut in half."""
    folder = tmp_path / "res"
    folder.mkdir()
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", folder)
    shutil.copytree(real_run, tmp_path / "outside-run")
    names = [
        "good-a",
        "good-b",
        "bad-list",
        "bad-utf8",
        "bad-deep",
        "bad-started",
        "bad-engine",
        "bad-id",
        "evil",
        "bad-newest",
        "bad-folder",
    ]
    for day, name in enumerate(names, start=1):
        shutil.copytree(real_run, folder / name)
        set_summary(folder / name, started_at=f"2026-01-{day:02d}T00:00:00Z")
    (folder / "bad-list" / "summary.json").write_text("[]")
    (folder / "bad-utf8" / "summary.json").write_bytes(b'{"status": "\xff"}')
    (folder / "bad-deep" / "summary.json").write_text("[" * 10_000 + "]" * 10_000)
    set_summary(folder / "bad-started", started_at=5)
    set_summary(folder / "bad-engine", engine={})
    set_summary(folder / "bad-id", run_id={"nested": True})
    set_summary(folder / "evil", run_id="../outside-run")
    requests = folder / "bad-newest" / "requests.parquet"
    requests.write_bytes(requests.read_bytes()[: requests.stat().st_size // 2])
    (folder / "bad-folder" / "summary.json").unlink()
    (folder / "bad-folder" / "summary.json").mkdir()
    return folder


def test_results_page_lists_damaged_runs_and_compares_the_good_ones(results):
    app = open_page("pages/2_Results.py")
    listing = app.dataframe[0].value
    statuses = dict(zip(listing["run"], listing["status"]))
    assert statuses.pop("good-a") == statuses.pop("good-b") == "done"
    assert set(statuses.values()) == {"damaged"} and len(statuses) == 9
    problems = dict(zip(listing["run"], listing["problem"]))
    assert "started_at is 5" in problems["bad-started"] and "not a readable table" in problems["bad-newest"]
    assert "'../outside-run' is not a run id" in problems["evil"]
    assert "damaged" in app.warning[0].value
    assert set(app.multiselect(key="compare_runs").value) == {"good-a", "good-b"}
    assert set(app.multiselect(key="compare_runs").options) == {"good-a", "good-b"}
    from tests.integration.test_results_page_app import comparison

    _, _, titles = comparison(app)  # headers are display names, each run's id in its tooltip
    assert {"good-a", "good-b"} <= {title.removeprefix("run ") for title in titles.values() if title}
    assert len(app.get("plotly_chart")) > 0


def test_results_page_deletes_a_damaged_run_by_its_folder_name(results):
    outside = results.parent / "outside-run"
    app = open_page("pages/2_Results.py")
    for name in ("evil", "bad-started", "bad-newest"):
        app.selectbox(key="manage_run").set_value(name).run()
        assert not app.exception, app.exception
        assert any(name in error.value and "damaged" in error.value for error in app.error)
        assert app.button(key="rename").disabled
        app.checkbox(key="confirm_delete").check().run()
        app.button(key="delete").click().run()
        assert not app.exception, app.exception
        assert not (results / name).exists()
    assert (outside / "summary.json").exists() and (outside / "requests.parquet").exists()
    assert (results / "good-a").exists() and (results / "good-b").exists()


def test_home_page_lists_damaged_runs(results):
    app = open_page()
    table = app.dataframe[0].value
    statuses = dict(zip(table["run"], table["status"]))
    assert statuses["good-a"] == "done" and statuses["bad-list"] == "damaged" and len(statuses) == 11
    assert "not an object" in dict(zip(table["run"], table["problem"]))["bad-list"]


def test_demo_page_leaves_out_a_damaged_bundled_run(monkeypatch, results_dir):
    """The study's numbers come from study.json; a member whose files are damaged is left out of
    the charts and named."""
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    for folder in BUNDLED.glob("demo*"):
        shutil.copytree(folder, results_dir / folder.name)
    (results_dir / "demo-overload-static-s3" / "summary.json").write_text('"oops"')
    timeseries = results_dir / "demo-overload-slo-sa-s0" / "timeseries.parquet"
    timeseries.write_bytes(timeseries.read_bytes()[:100])
    app = open_page("pages/3_Demo.py")
    labels = [metric.label for metric in app.metric]
    assert labels == list(DEMO_SCHEDULERS) * 4  # attainment and G, in each of the two regimes
    warnings = " | ".join(warning.value for warning in app.warning)
    assert "demo-overload-static-s3" in warnings and "demo-overload-slo-sa-s0" in warnings
    assert len(app.get("plotly_chart")) == 6


def test_demo_page_with_a_damaged_study_record_says_how_to_remake_it(monkeypatch, results_dir):
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    for folder in BUNDLED.glob("demo*"):
        shutil.copytree(folder, results_dir / folder.name)
    for study in ("demo-below", "demo-overload"):
        (results_dir / study / "study.json").write_text(f'{{"study_id": "{study}", "runs": 5}}')
    app = open_page("pages/3_Demo.py")
    assert not app.exception
    assert "damaged" in app.warning[0].value and "python -m runners demo" in app.warning[0].value
    assert not app.metric and not app.get("plotly_chart")
    assert app.button[0].label.startswith("Run seed 0 again")  # the live rerun still works
