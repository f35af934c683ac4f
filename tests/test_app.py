"""The home page renders with and without saved runs (streamlit's AppTest, no browser)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]


def test_home_page_lists_engines_schedulers_and_runs(monkeypatch, results_dir):
    from runners.benchmark import execute_run
    from runners.config import parse_config

    execute_run(parse_config({"workload": {"requests": 20}, "run_id": "home-run"}), results_dir)
    monkeypatch.setattr("runners.result_store.DEFAULT_RESULTS_DIR", results_dir)
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=30).run()
    assert not app.exception
    assert app.title[0].value == "schedlab"
    text = " ".join(m.value for m in app.markdown)
    assert "fcfs" in text and "static" in text and "sim" in text
    table = app.dataframe[0].value
    assert list(table["run"]) == ["home-run"] and table["status"].iloc[0] == "done"
