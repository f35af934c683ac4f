"""The Launch page's studies (runners.app.launch_form, runners.app.jobs, runners.app.worker): the Seeds
field makes one study of every scheduler at every seed, run through runners.study.runner in the
background worker (study.json as the CLI writes it, cancel skips what has not started); bad
seeds, a baseline outside the study and an unconfirmed huge study are errors under their fields;
the default form is a setting where fcfs and slo-sa make different decisions at every seed, and
the old default (never a queue) is warned about before launch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from runners.app.jobs import JobSpec, cancel_job, list_jobs, read_job, start_job
from runners.app.launch_form import DEFAULT_SCHEDULERS, build_job, default_form_values, preview_load, results_link
from runners.metrics.contention import identical_decisions
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.study.runner import MAX_RUNS_UNCONFIRMED, STUDY_FILE, read_study
from runners.views.live import live_cards, read_study_progress
from tests.job_waiting import wait_for_job_folder as wait
from tests.job_waiting import wait_for_streamed_rows


def requests_of(results: Path, run_id: str) -> pd.DataFrame:
    return pd.read_parquet(results / run_id / "requests.parquet")


def test_the_default_form_is_a_study_whose_schedulers_differ_at_every_seed(results_dir):
    values = default_form_values()
    assert values["engine.pace"] == 100.0  # the page's default speed; measured values do not depend on it
    values["engine.pace"] = None  # as fast as possible here
    result = build_job(values, list(DEFAULT_SCHEDULERS))
    assert result.ok, result.errors
    study = result.spec.study
    assert study.schedulers == ["fcfs", "slo-sa"] and study.baseline == "fcfs" and study.seeds == [0, 1, 2, 3, 4]
    assert len(result.spec.runs) == 10
    assert [run.run_id for run in result.spec.runs[:2]] == [f"{study.study_id}-fcfs-s0", f"{study.study_id}-fcfs-s1"]
    assert {run.engine.max_num_seqs for run in result.spec.runs} == {16}
    [load] = preview_load(values)
    assert not load.low and load.share > 1.0  # offered above the estimated capacity: requests queue

    job = wait(start_job(result.spec, results_dir))
    assert job.state == "done", job
    assert [run.status for run in job.runs] == ["done"] * 10
    record = read_study(results_dir / study.study_id)  # written as the CLI writes it
    assert record.status == "done" and record.baseline == "fcfs" and record.seeds == [0, 1, 2, 3, 4]
    assert record.statistics["slo_attainment"].vs_baseline["slo-sa"].n_pairs == 5
    for seed in study.seeds:
        tables = [requests_of(results_dir, f"{study.study_id}-{name}-s{seed}") for name in study.schedulers]
        assert not identical_decisions(tables), f"fcfs and slo-sa made identical decisions at seed {seed}"
    progress = read_study_progress(results_dir, study.study_id)
    assert progress.finished == progress.total == 10 and progress.fraction() == 1.0
    assert progress.text() == f"study {study.study_id}: 10 of 10 runs finished (10 done)"


def test_the_old_default_never_queues_and_is_warned_about_before_launch(results_dir):
    old = {"engine.kind": "sim", "workload.requests": 300, "workload.arrival.rate": 4.0}  # 256 slots
    [load] = preview_load(old)
    assert load.low and 0.7 < load.share < 0.85
    tables = []
    for name in DEFAULT_SCHEDULERS:
        outcome = execute_run(
            parse_config(
                {
                    "run_id": f"old-{name}",
                    "scheduler": {"name": name},
                    "workload": {"requests": 300, "arrival": {"rate": 4.0}},
                }
            ),
            results_dir,
        )
        tables.append(requests_of(results_dir, outcome.run_id))
    assert identical_decisions(tables)  # what the warning predicted


@pytest.mark.parametrize(
    "seeds, expected",
    [
        ("3,x", "'3,x' is not a number"),
        ("0", "a count must be 1 to"),
        ("3, 3", "seed 3 is listed twice"),
    ],
)
def test_a_bad_seed_list_is_an_error_under_the_seeds_field(seeds, expected):
    errors = build_job({"trials.seeds": seeds}, ["fcfs", "slo-sa"], check_workload=False).errors
    assert list(errors) == ["trials.seeds"] and expected in errors["trials.seeds"]


def test_seeds_as_a_list_a_baseline_and_the_confirmation_of_a_huge_study():
    result = build_job(
        {"trials.seeds": "3, 7, 11", "trials.baseline": "slo-sa"}, ["fcfs", "slo-sa"], check_workload=False
    )
    assert result.ok, result.errors
    assert result.spec.study.seeds == [3, 7, 11] and result.spec.study.baseline == "slo-sa"
    assert result.spec.study.schedulers == ["slo-sa", "fcfs"]  # baseline first
    assert sorted(run.workload.seed for run in result.spec.runs) == [3, 3, 7, 7, 11, 11]

    errors = build_job(
        {"trials.seeds": "2", "trials.baseline": "static"}, ["fcfs", "slo-sa"], check_workload=False
    ).errors
    assert list(errors) == ["trials.baseline"]
    assert "'static' is not a scheduler of the study; expected one of: fcfs, slo-sa" in errors["trials.baseline"]

    seeds = MAX_RUNS_UNCONFIRMED // 2 + 1  # x 2 schedulers: just over the limit
    errors = build_job({"trials.seeds": str(seeds)}, ["fcfs", "static"], check_workload=False).errors
    assert list(errors) == ["trials.confirm"]
    assert f"{2 * seeds:,} runs (2 schedulers x {seeds} seeds x 1 rates), more than 1,000" in errors["trials.confirm"]
    assert build_job({"trials.seeds": str(seeds), "trials.confirm": True}, ["fcfs", "static"], check_workload=False).ok


def test_each_scheduler_keeps_its_own_parameters_and_a_sweep_is_one_study():
    result = build_job(
        {
            "trials.seeds": "2",
            "sweep.enabled": True,
            "sweep.rates": "1, 2",
            "scheduler.static.batch_size": 4,
            "scheduler.slo-sa.max_batch": 2,
        },
        ["static", "slo-sa"],
        check_workload=False,
    )
    assert result.ok, result.errors
    study = result.spec.study
    assert study.rates == [1.0, 2.0] and len(result.spec.runs) == 8
    assert f"{study.study_id}-static-r2-s1" in {run.run_id for run in result.spec.runs}
    params = {run.scheduler.name: run.scheduler.params for run in result.spec.runs}
    assert params["static"] == {"batch_size": 4} and params["slo-sa"] == {"max_batch": 2}
    assert len({run.sweep_id for run in result.spec.runs}) == 1  # the Results page's sweep view still groups them


def test_the_tpot_limit_is_given_in_milliseconds():
    values = {"slo.preset": "custom", "slo.chat.tpot_ms": 40.0, "slo.chat.ttft_s": 5.0}
    run = build_job(values, ["fcfs"], check_workload=False).spec.runs[0]
    assert run.slo.chat.tpot_s == pytest.approx(0.040)
    errors = build_job({**values, "slo.chat.tpot_ms": -5.0}, ["fcfs"], check_workload=False).errors
    assert list(errors) == ["slo.chat.tpot_ms"]


def test_cancel_stops_the_running_members_keeps_their_rows_and_skips_the_rest(results_dir):
    seeds = (os.cpu_count() or 1) + 1  # more members than runs at once (a pool of all cores): some never start
    values = {
        "engine.kind": "sim",
        "engine.pace": 10.0,
        "engine.max_num_seqs": 16,
        "workload.requests": 200,
        "workload.arrival.rate": 2.5,
        "trials.seeds": str(seeds),
    }
    spec = build_job(values, ["fcfs", "static"], check_workload=False).spec
    folder = start_job(spec, results_dir)
    first = spec.runs[0].run_id
    wait_for_streamed_rows(results_dir / first)
    cancel_job(folder)
    job = wait(folder, 30)
    assert job.state == "cancelled"
    statuses = [run.status for run in job.runs]
    assert statuses[0] == "cancelled" and set(statuses) == {"cancelled", "skipped"}, statuses
    record = read_study(results_dir / spec.study.study_id)
    assert record.status == "cancelled" and [run.status for run in record.runs] == statuses
    for run, status in zip(spec.runs, statuses):
        if status == "skipped":
            assert not (results_dir / run.run_id).exists()
        else:  # measured rows kept, the rest recorded as cancelled
            assert len(requests_of(results_dir, run.run_id)) == 200
    assert requests_of(results_dir, first)["error"].isna().sum() >= 3


def test_a_job_spec_without_a_study_still_reads(results_dir):
    spec = build_job({"workload.requests": 5}, ["fcfs"], check_workload=False).spec
    assert spec.study is None
    data = json.loads(spec.model_dump_json())
    del data["study"]  # as a job.json written before studies
    folder = results_dir / ".jobs" / spec.job_id
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps(data))
    job = read_job(folder)
    assert isinstance(job.spec, JobSpec) and job.spec.study is None and job.run_ids == [spec.runs[0].run_id]
    assert STUDY_FILE == "study.json"


def test_the_live_view_shows_tpot_in_ms_with_catalog_labels():
    cards = dict(
        live_cards(
            {"slo_attainment": 0.5, "G": 0.0123, "tpot_s": {"mean": 0.0423}, "e2e_s": {"mean": 12.5}, "failed": 2}
        )
    )
    assert cards == {
        "SLO attainment (%)": "50.0",
        "G (1/s)": "0.0123",
        "TPOT mean (ms)": "42.3",
        "E2E mean (s)": "12.500",
        "failed requests": "2",
    }
    assert dict(live_cards({}))["TPOT mean (ms)"] == "-"


def test_the_launch_page_shows_the_offered_load_and_puts_seed_errors_under_the_seeds_field(monkeypatch, results_dir):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    root = Path(__file__).resolve().parents[2]
    app = AppTest.from_file(str(root / "app.py"), default_timeout=60).run()
    app.switch_page("pages/1_Launch.py").run()
    assert not app.exception, app.exception
    assert any("129% of the engine's estimated capacity of 1.94 req/s" in box.value for box in app.info)
    assert not app.warning
    app.text_input(key="f:workload.arrival.rate").input("0.5").run()  # 26% of the capacity
    assert "will likely make identical decisions" in app.warning[0].value
    app.text_input(key="f:trials.seeds").set_value("2, two").run()
    app.button[0].click().run()
    leaves = []
    stack = [app.main]
    while stack:  # the page's elements in display order, columns flattened
        node = stack.pop(0)
        children = getattr(node, "children", None)
        if children:
            stack[:0] = [children[index] for index in sorted(children)]
        else:
            leaves.append(node)
    after = leaves[next(i for i, leaf in enumerate(leaves) if getattr(leaf, "key", None) == "f:trials.seeds") + 1]
    assert after.type == "error" and "'2, two' is not a number" in after.value
    assert not (results_dir / ".jobs").exists(), "nothing may start while the form has errors"


def test_an_in_engine_scheduler_on_the_simulator_is_an_error_under_the_schedulers_field():
    # issue 14: engine-dynamic-mem runs inside vLLM; listed like any scheduler, refused before launch elsewhere
    values = default_form_values(["fcfs", "engine-dynamic-mem"])
    result = build_job(values, ["fcfs", "engine-dynamic-mem"])
    assert not result.ok
    assert "engine-dynamic-mem runs inside vLLM" in result.errors["schedulers"]
    assert "--scheduler-cls runners.schedulers.vllm.dynamic_mem.DynamicMemoryScheduler" in result.errors["schedulers"]


def test_blank_seeds_are_warned_about_before_launch(monkeypatch, results_dir):
    """Single runs (Seeds blank) carry no interval: the page says so before the Launch button is
    pressed, and says nothing of the kind for a study."""
    from streamlit.testing.v1 import AppTest

    from runners.app.launch_form import SINGLE_RUNS_WARNING, single_runs_warning

    assert single_runs_warning({"trials.seeds": " "}) == SINGLE_RUNS_WARNING
    assert single_runs_warning({"trials.seeds": "5"}) is None
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    root = Path(__file__).resolve().parents[2]
    app = AppTest.from_file(str(root / "app.py"), default_timeout=60).run()
    app.switch_page("pages/1_Launch.py").run()
    assert not any("Seeds is blank" in box.value for box in app.warning)  # the default is a study
    app.text_input(key="f:trials.seeds").set_value("").run()
    assert any(box.value == SINGLE_RUNS_WARNING for box in app.warning)
    assert not list_jobs(results_dir)  # nothing launched: said before launch


def test_single_runs_open_against_the_chosen_baseline():
    """Blank Seeds, baseline slo-sa: "Compare these runs" opens with the slo-sa run as the baseline
    (it opened with the first scheduler's whatever was chosen); a baseline not chosen is refused."""
    result = build_job({"trials.seeds": "", "trials.baseline": "slo-sa"}, ["fcfs", "slo-sa"], check_workload=False)
    assert result.ok and result.spec is not None and result.spec.study is None
    fcfs, slo_sa = (str(run.run_id) for run in result.spec.runs)
    assert results_link(result.spec) == {"runs": f"{fcfs},{slo_sa}", "baseline": slo_sa, "label": result.spec.label}
    blank = build_job({"trials.seeds": ""}, ["fcfs", "slo-sa"], check_workload=False).spec
    assert blank is not None and results_link(blank)["baseline"] == str(blank.runs[0].run_id)
    errors = build_job({"trials.seeds": "", "trials.baseline": "mcsf"}, ["fcfs", "slo-sa"], check_workload=False).errors
    assert errors == {"trials.baseline": "'mcsf' is not one of the chosen schedulers (fcfs, slo-sa)"}
