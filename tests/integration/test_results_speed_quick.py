"""Issue 28, the Results page and ``list`` / ``show`` fast: what makes them fast is checked here by
what it does, not by timings (noisy on a shared machine): importing the result store loads neither
pandas nor pyarrow (a refusal of ``show`` waited 0.4 s for them); ``list`` reads each table's row
count from its footer through the reader that ``pyarrow.parquet.read_metadata`` wraps, with the
same count and the same error text; a rerun of the Results page reads no run's tables again (the
'Manage a run' expander read the first run's tables on every rerun). And the two benchmarks
(bench/list_speed.py, bench/results_page.py) still run in their quick mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runners.errors import SchedlabError
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store import result_store
from tests.integration.test_results_study import made, open_study, results, statistics_tables  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[2]


def small_run(folder: Path, run_id: str, requests: int = 12) -> Path:
    execute_run(
        parse_config(
            {
                "run_id": run_id,
                "scheduler": {"name": "fcfs"},
                "workload": {"requests": requests, "seed": 0, "arrival": {"process": "poisson", "rate": 4.0}},
            }
        ),
        folder,
    )
    return folder / run_id


def test_importing_the_result_store_loads_neither_pandas_nor_pyarrow():
    code = (
        "import sys; import runners.store.result_store as store; "
        "print(sorted(name for name in ('pandas', 'pyarrow') if name in sys.modules)); "
        "store.REQUEST_COLUMNS; print('pyarrow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "True"], done.stdout  # the columns still come on demand


def test_request_columns_are_the_same_mapping_with_the_file_contract_types():
    from runners.store.result_store import REQUEST_COLUMNS, TIMESERIES_COLUMNS
    from runners.store.timeseries import TIMESERIES_COLUMNS as ROW_COLUMNS

    assert REQUEST_COLUMNS is result_store.request_columns() and TIMESERIES_COLUMNS is ROW_COLUMNS
    assert list(REQUEST_COLUMNS)[:3] == ["request_id", "task", "arrival_s"] and len(REQUEST_COLUMNS) == 22
    assert REQUEST_COLUMNS["slo_met"] == pa.bool_() and REQUEST_COLUMNS["output_tokens"] == pa.int64()
    assert REQUEST_COLUMNS["ttft_s"] == pa.float64() and REQUEST_COLUMNS["error"] == pa.string()


def test_list_counts_rows_from_the_footers_as_read_metadata_did(results_dir, monkeypatch):
    folder = small_run(results_dir, "counted", requests=12)
    expected = pq.read_metadata(folder / "requests.parquet").num_rows

    def refused(*args, **kwargs):
        raise AssertionError("read_metadata called: the slower path")

    monkeypatch.setattr(pq, "read_metadata", refused)
    monkeypatch.setattr(result_store, "_ROW_COUNTS", {})
    (entry,) = result_store.list_runs(results_dir)
    assert entry.status == "done" and entry.rows == expected == 12


def test_a_cut_table_is_damaged_with_pyarrows_own_words(results_dir):
    folder = small_run(results_dir, "cut", requests=12)
    table = folder / "timeseries.parquet"
    data = table.read_bytes()
    table.write_bytes(data[: len(data) // 2])
    with pytest.raises(pa.ArrowInvalid) as raised:
        pq.read_metadata(table)
    words = str(raised.value).splitlines()[0]
    (entry,) = result_store.list_runs(results_dir)
    assert entry.status == "damaged" and entry.problem == f"timeseries.parquet: not a readable table ({words})"
    with pytest.raises(SchedlabError, match="is damaged: timeseries.parquet: not a readable table"):
        result_store.load_run(results_dir, "cut")


def test_a_rerun_of_the_results_page_reads_no_run_table_again(results_dir, monkeypatch):
    from tests.integration.test_app import open_page

    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    for name in ("first", "second"):
        small_run(results_dir, name)
    app = open_page("pages/2_Results.py")
    assert [element.value for element in app.selectbox if element.key == "manage_run"]  # a run to manage
    reads: list[str] = []
    real = result_store.read_table

    def counted(folder, stem, *args, **kwargs):
        reads.append(f"{Path(folder).name}/{stem}")
        return real(folder, stem, *args, **kwargs)

    monkeypatch.setattr(result_store, "read_table", counted)
    app.run()
    assert not app.exception, app.exception
    assert reads == [], f"a rerun read {reads}"
    assert any('"run_id"' in element.value for element in app.json), "the managed run's config is shown"


@pytest.mark.e2e
def test_the_list_benchmark_runs_in_quick_mode():
    done = subprocess.run(
        [sys.executable, "-m", "bench.list_speed", "--quick"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| list |" in done.stdout and "| refusal: show no-such-run |" in done.stdout


@pytest.mark.e2e
def test_the_results_page_benchmark_runs_in_quick_mode():
    from tests.browser.screenshot import CHROMIUM

    if not Path(CHROMIUM).exists() and os.environ.get("SCHEDLAB_REQUIRE_BROWSER") != "1":
        pytest.skip("Chromium not installed")
    done = subprocess.run(
        [sys.executable, "-m", "bench.results_page", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| first open (page modules loaded) |" in done.stdout and "cached opens (1)" in done.stdout


def test_a_rerun_of_a_study_makes_neither_its_tables_nor_its_bars_again(results, monkeypatch):  # noqa: F811
    import runners.views.study_charts as study_charts
    import runners.views.study_view as study_view

    app = open_study("st")
    before = statistics_tables(app)
    assert before and len(app.get("plotly_chart")) == 3  # two bar charts, the pooled CDFs
    made_again: list[str] = []
    real_html, real_bars = study_view.statistics_html, study_charts.metric_bars

    def html_again(*args, **kwargs):
        made_again.append("statistics table")
        return real_html(*args, **kwargs)

    def bars_again(*args, **kwargs):
        made_again.append("bars")
        return real_bars(*args, **kwargs)

    monkeypatch.setattr(study_view, "statistics_html", html_again)
    monkeypatch.setattr(study_charts, "metric_bars", bars_again)
    app.run()
    assert not app.exception, app.exception
    assert made_again == [], f"a rerun made again: {made_again}"
    after = statistics_tables(app)
    assert len(after) == len(before) and all(a.equals(b) for a, b in zip(after, before))
    assert len(app.get("plotly_chart")) == 3
