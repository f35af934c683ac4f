"""Every dashboard page under streamlit's AppTest (no browser): home, Launch (form errors under
their fields, a simulator launch that completes and streams into the live view), Results (the
compare view with two bundled runs, rename, delete, sweeps) and Demo (bundled comparison)."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from runners.app.jobs import list_jobs
from runners.views.demo import DEMO_SCHEDULERS

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "results"


def open_page(page: str | None = None) -> AppTest:
    """Start from app.py (so page links resolve, as under `streamlit run`) and switch page."""
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    if page:
        app.switch_page(page).run()
    assert not app.exception, app.exception
    return app


@pytest.fixture
def results(monkeypatch, results_dir: Path) -> Path:
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    return results_dir


def bundle(results: Path, *names: str) -> None:
    for name in names:
        shutil.copytree(BUNDLED / name, results / name)


def flat_elements(node) -> list:
    """Every element of the page in display order (columns and expanders flattened)."""
    children = getattr(node, "children", None)
    if not children:
        return [node]
    return [leaf for index in sorted(children) for leaf in flat_elements(children[index])]


def element_after(app: AppTest, widget_key: str):
    elements = flat_elements(app.main)
    index = next(i for i, element in enumerate(elements) if getattr(element, "key", None) == widget_key)
    return elements[index + 1]


def errors_text(app: AppTest) -> str:
    return " | ".join(error.value for error in app.error)


def test_home_page_lists_engines_schedulers_and_runs(results):
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    execute_run(parse_config({"workload": {"requests": 20}, "run_id": "home-run"}), results)
    app = open_page()
    assert app.title[0].value == "schedlab"
    text = " ".join(m.value for m in app.markdown)
    assert "**sim**" in text and "fcfs" in text and "static" in text and "slo-sa" in text
    table = app.dataframe[0].value
    assert list(table["run"]) == ["home-run"] and table["status"].iloc[0] == "done"


def test_launch_form_shows_each_error_under_its_field(results, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversations": []}\nthis is not json\n')
    app = open_page("pages/1_Launch.py")
    app.checkbox(key="f:sweep.enabled").check().run()
    app.text_input(key="f:sweep.rates").set_value("1, fast").run()
    app.text_input(key="f:scheduler.slo-sa.decay").input("1.5").run()
    app.button[0].click().run()
    text = errors_text(app)
    assert "**Rates (req/s)**: 'fast' is not a number" in text  # each error named by its field's label
    assert "**temperature decay**: expected a number > 0 and < 1, got '1.5'" in text
    assert not list_jobs(results), "nothing may start while the form has errors"
    # each error sits right under its own widget
    assert element_after(app, "f:sweep.rates").type == "error"
    assert "Rates (req/s)" in element_after(app, "f:sweep.rates").value
    assert "temperature decay" in element_after(app, "f:scheduler.slo-sa.decay").value

    app.checkbox(key="f:sweep.enabled").uncheck().run()
    app.text_input(key="f:scheduler.slo-sa.decay").input("0.95").run()
    app.selectbox(key="f:workload.chat.kind").set_value("file").run()
    app.text_input(key="f:workload.chat.path").set_value(str(bad)).run()
    app.button[0].click().run()
    text = errors_text(app)
    assert "Local .json / .jsonl (.gz) path" in text and "line 2 is not valid JSON" in text
    assert "line 2 is not valid JSON" in element_after(app, "f:workload.chat.path").value
    assert not list_jobs(results)

    app.selectbox(key="f:workload.chat.kind").set_value("synthetic").run()
    app.radio(key="f:slo.preset").set_value("custom").run()
    app.button[0].click().run()
    assert "slo" in errors_text(app) and "needs limits" in errors_text(app)


def launch_five_requests_without_gpus(app, results: Path):
    """Launch 5 requests with fcfs on the page's engine, on no GPU, and wait for the job's end
    (a real-engine launch on a machine without that engine: the job fails with its log)."""
    app.checkbox(key="f:engine.use_gpus").uncheck().run()
    app.text_input(key="f:workload.requests").input("5").run()
    app.multiselect(key="schedulers").set_value(["fcfs"]).run()
    app.button[0].click().run()
    assert not app.error, errors_text(app)
    return wait_for_job(results, timeout_s=180)


def wait_for_job(results: Path, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = list_jobs(results)
        if jobs and not jobs[0].active:
            return jobs[0]
        time.sleep(0.5)
    raise AssertionError(f"job did not finish in {timeout_s} s: {list_jobs(results)}")


def test_launch_on_the_simulator_completes_and_appears_in_results(results):
    app = open_page("pages/1_Launch.py")
    app.text_input(key="f:workload.requests").input("60").run()
    app.multiselect(key="schedulers").set_value(["fcfs", "static"]).run()
    app.select_slider(key="ui:pace").set_value("as fast as possible").run()
    app.button[0].click().run()
    assert not app.error, errors_text(app)
    assert "Started job" in app.success[0].value
    job = wait_for_job(results)
    assert job.state == "done", job
    assert [run.status for run in job.runs] == ["done"] * 10  # one study: 2 schedulers x the default 5 seeds
    app.run()  # the live view re-attaches from the job folder
    assert not app.exception
    progress = app.get("progress")
    assert progress and all(bar.proto.value == 100 for bar in progress)
    assert "10 of 10 runs finished" in progress[0].proto.text and "60 / 60 requests" in progress[1].proto.text
    labels = [metric.label for metric in app.metric]
    assert "SLO attainment (%)" in labels and "G (1/s)" in labels and "TPOT mean (ms)" in labels
    assert app.selectbox(key="job_select").value == job.job_id
    select = app.selectbox(key="job_select")
    assert select.options[select.index].endswith(" · done")  # the label follows the job's state

    # issue 15 defect 4: the ended run shows the summary's output throughput, labelled as the run's
    # mean (not the last instantaneous telemetry sample); the elapsed time is on the charts' clock,
    # simulated seconds, labelled so
    from runners.metrics.catalog import metric
    from runners.store.result_store import load_run

    shown = load_run(results, job.run_ids[-1])  # the live view shows the job's last run once it ended
    cards = {card.label: card.value for card in app.metric}
    assert "output now (tok/s)" not in cards
    mean = shown.summary.output_throughput_tps
    assert cards["output tok/s, run mean"] == f"{mean:.1f}"
    latest = shown.timeseries[shown.timeseries["t_s"] == shown.timeseries["t_s"].max()]
    assert f"{latest['tokens_per_s'].sum():.1f}" != f"{mean:.1f}"  # the instantaneous sample is another number
    clock = max(shown.timeseries["t_s"].max(), shown.requests["finish_s"].max())
    assert cards["elapsed, simulated (s)"] == f"{clock:,.1f}"

    # every run of the job with its results once it ended (issue 15: finished runs beside the running one)
    runs = app.dataframe[0].value
    assert list(runs["run"]) == job.run_ids and list(runs["status"]) == ["done"] * 10
    for run_id, attainment, g in zip(runs["run"], runs["SLO attainment (%)"], runs["G (1/s)"]):
        summary = load_run(results, run_id).summary
        assert attainment == f"{100 * summary.slo_attainment:.1f}" and g == metric("G").format(summary.G)

    # issue 15 defect 6: the Results link opens this job's study (its baseline: the first scheduler)
    [link] = [link for link in app.get("page_link") if "Results page" in link.proto.label]
    from urllib.parse import parse_qs

    assert parse_qs(link.proto.query_string) == {"study": [job.spec.study.study_id], "label": [job.spec.label]}
    assert job.spec.study.baseline == "fcfs"

    app.switch_page("pages/2_Results.py").run()
    listed = set(app.dataframe[0].value["run"])
    assert set(job.run_ids) <= listed


def launch_clicked(app: AppTest) -> str:
    """Click Launch; the id of the job it started (from the page's message)."""
    app.button(key="launch").click().run()
    assert not app.exception, app.exception
    assert app.success, errors_text(app)
    return app.success[0].value.split("Started job ", 1)[1].split(" ", 1)[0]


def test_a_launch_selects_the_new_job_with_its_cancel_button(results):
    """Issue 15 defect 1: after a second launch the Jobs panel showed the previous job, and the new
    one had no Cancel button until picked by hand."""
    from runners.app.jobs import cancel_job, jobs_root, read_job

    app = open_page("pages/1_Launch.py")
    app.text_input(key="f:workload.requests").input("2000").run()  # 800 s at 2.5 req/s: still running below
    app.text_input(key="f:trials.seeds").input("1").run()
    app.multiselect(key="schedulers").set_value(["fcfs"]).run()
    app.select_slider(key="ui:pace").set_value("real time").run()
    first = launch_clicked(app)
    second = None
    try:
        assert app.selectbox(key="job_select").value == first
        second = launch_clicked(app)
        assert second != first
        assert app.selectbox(key="job_select").value == second
        assert app.button(key=f"cancel-{second}").label == "Cancel job"
        assert f"**{read_job(jobs_root(results) / second).spec.label}**" in " ".join(m.value for m in app.markdown)
        app.button(key=f"cancel-{second}").click().run()
        assert read_job(jobs_root(results) / second) is not None
        assert (jobs_root(results) / second / "cancel").exists() and not (
            jobs_root(results) / first / "cancel"
        ).exists()
    finally:
        for job_id in (first, second):
            if job_id:
                cancel_job(jobs_root(results) / job_id)
        deadline = time.monotonic() + 60
        while any(job.active for job in list_jobs(results)) and time.monotonic() < deadline:
            time.sleep(0.3)


def test_an_invalid_number_field_starts_nothing_and_says_why_under_it(results):
    """Issue 15 defect 3: a number field is launched as it shows: 0 requests or text that is no
    number is an error under its field, never replaced by the previous value."""
    app = open_page("pages/1_Launch.py")
    app.text_input(key="f:workload.requests").input("0").run()
    app.button(key="launch").click().run()
    assert not app.success
    assert element_after(app, "f:workload.requests").type == "error"
    requests = element_after(app, "f:workload.requests").value
    assert requests == "**Requests**: expected a whole number from 1 to 1,000,000, got '0'"
    app.text_input(key="f:workload.requests").input("20").run()
    app.text_input(key="f:engine.instances").input("two").run()
    app.button(key="launch").click().run()
    instances = element_after(app, "f:engine.instances").value
    assert instances == "**Instances**: expected a whole number from 1 to 64, got 'two'"
    assert not list_jobs(results), "nothing may start while a field is invalid"


def test_the_results_link_of_a_job_of_runs_makes_its_first_scheduler_the_baseline(results):
    """Issue 15 defect 6: the Launch -> Results link made the second scheduler the baseline. A job
    without seeds (two runs) links its runs with the first scheduler's as the baseline, and every
    run records the job's label (config.json's config.notes and summary.json's notes)."""
    import json
    from urllib.parse import parse_qs

    app = open_page("pages/1_Launch.py")
    app.text_input(key="f:workload.requests").input("30").run()
    app.text_input(key="f:trials.seeds").input("").run()
    app.multiselect(key="schedulers").set_value(["static", "fcfs"]).run()
    app.select_slider(key="ui:pace").set_value("as fast as possible").run()
    app.text_input(key="f:job.label").input("first look").run()
    launch_clicked(app)
    job = wait_for_job(results)
    assert job.state == "done" and job.spec.study is None and job.spec.label == "first look"
    static_run, fcfs_run = job.run_ids
    assert [run.scheduler.name for run in job.spec.runs] == ["static", "fcfs"]
    for run_id in job.run_ids:
        assert json.loads((results / run_id / "summary.json").read_text())["notes"] == "first look"
        assert json.loads((results / run_id / "config.json").read_text())["config"]["notes"] == "first look"
    app.run()
    [link] = [link for link in app.get("page_link") if "Results page" in link.proto.label]
    query = parse_qs(link.proto.query_string)
    assert query == {"runs": [f"{static_run},{fcfs_run}"], "baseline": [static_run], "label": ["first look"]}
    app.query_params.update({name: values[0] for name, values in query.items()})
    app.switch_page("pages/2_Results.py").run()
    assert not app.exception, app.exception
    assert app.selectbox(key="baseline").value == static_run  # the job's first scheduler


def test_scheduler_parameters_are_labelled_by_their_title_with_their_description_as_help(results, monkeypatch):
    from runners.registry import parameter_specs, scheduler_class

    fields = scheduler_class("slo-sa").Params.model_fields
    monkeypatch.setattr(fields["iterations"], "title", "moves tried per temperature level")
    app = open_page("pages/1_Launch.py")  # slo-sa is a default scheduler
    for spec in parameter_specs("slo-sa"):
        widget = app.get("text_input") + app.get("selectbox") + app.get("checkbox")
        [drawn] = [item for item in widget if getattr(item, "key", None) == f"f:scheduler.slo-sa.{spec.name}"]
        assert drawn.label == (fields[spec.name].title or spec.name)
        assert (fields[spec.name].description or "") in drawn.help and f"`{spec.name}`" in drawn.help
    iterations = app.text_input(key="f:scheduler.slo-sa.iterations")
    assert iterations.label == "moves tried per temperature level" and iterations.value == "100"


def test_a_results_folder_that_cannot_hold_the_job_is_one_error_on_the_page(monkeypatch, tmp_path):
    not_a_folder = tmp_path / "results"
    not_a_folder.write_text("a file where the results folder should be")
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", not_a_folder)
    app = open_page("pages/1_Launch.py")
    app.text_input(key="f:workload.requests").input("5").run()
    app.button[0].click().run()
    assert not app.exception, app.exception
    assert "Could not start the job" in errors_text(app)
    assert not app.success
    assert not_a_folder.read_text() == "a file where the results folder should be"


def test_results_page_compares_two_bundled_runs_with_every_chart(results):
    bundle(results, "demo-overload-fcfs-s0", "demo-overload-static-s0")
    app = open_page("pages/2_Results.py")
    assert set(app.multiselect(key="compare_runs").value) == {"demo-overload-fcfs-s0", "demo-overload-static-s0"}
    app.selectbox(key="baseline").set_value("demo-overload-fcfs-s0").run()
    from runners.store.result_store import load_run
    from tests.integration.test_results_page_app import comparison

    table, _, titles = comparison(app)  # headers: display names, run ids in their tooltips
    column = {title.removeprefix("run "): name for name, title in titles.items() if title.startswith("run ")}
    row = table.set_index(table.columns[0]).loc["SLO attainment (%)"]
    fcfs = load_run(results, "demo-overload-fcfs-s0").summary.slo_attainment
    static = load_run(results, "demo-overload-static-s0").summary.slo_attainment
    assert row[column["demo-overload-fcfs-s0"]] == f"{100 * fcfs:.1f}"  # a share: one decimal, its change in points
    assert row[column["demo-overload-static-s0"]] == f"{100 * static:.1f} ({100 * (static - fcfs):+.1f} pts)"
    from runners.views.charts import CHART_VIEWS, COMPARISON_CHARTS, PREFIX_HIT_RATE_CHART, PREFIX_HIT_RATE_VIEWS
    from runners.views.prefix_view import has_prefix_counters

    # the bundled runs (schema 7) carry the simulator's prefix-cache counters: the views with the
    # over-time charts add the hit rate over time
    assert has_prefix_counters(load_run(results, "demo-overload-fcfs-s0").timeseries)
    assert len(app.get("plotly_chart")) == len(CHART_VIEWS["Overview"])
    drawn = 0
    for view, names in CHART_VIEWS.items():
        app.get("button_group")[0].set_value(view).run()
        assert not app.exception
        hit_rate = view in PREFIX_HIT_RATE_VIEWS
        charts = app.get("plotly_chart")
        assert len(charts) == len(names) + hit_rate, view
        assert (f"chart-{PREFIX_HIT_RATE_CHART}" in {chart.key for chart in charts}) == hit_rate, view
        drawn += len(names) if view != "All charts" else 0
    assert drawn == len(COMPARISON_CHARTS) == 9
    downloads = app.get("download_button")
    assert downloads, "the CSV export button is missing"


def test_results_page_renames_and_deletes(results):
    bundle(results, "demo-overload-fcfs-s0", "demo-overload-static-s0")
    app = open_page("pages/2_Results.py")
    app.selectbox(key="manage_run").set_value("demo-overload-static-s0").run()
    app.text_input(key="rename_to").set_value("bad name!").run()
    app.button(key="rename").click().run()
    assert "not allowed" in errors_text(app)
    app.text_input(key="rename_to").set_value("static-b16").run()
    app.button(key="rename").click().run()
    assert (results / "static-b16" / "summary.json").exists() and not (results / "demo-overload-static-s0").exists()
    app.selectbox(key="manage_run").set_value("static-b16").run()
    app.checkbox(key="confirm_delete").check().run()
    app.button(key="delete").click().run()
    assert not (results / "static-b16").exists()
    assert (results / "demo-overload-fcfs-s0").exists()


def test_results_page_draws_a_sweep_with_capacity(results):
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config

    for rate in (1.0, 4.0):
        for scheduler in ("fcfs", "static"):
            execute_run(
                parse_config(
                    {
                        "run_id": f"sw-{scheduler}-{rate:g}",
                        "sweep_id": "sweep-t",
                        "scheduler": {"name": scheduler},
                        "workload": {"requests": 40, "arrival": {"process": "poisson", "rate": rate}},
                    }
                ),
                results,
            )
    app = open_page("pages/2_Results.py")
    assert app.selectbox(key="sweep").value == "sweep-t"
    capacity = app.dataframe[-1].value
    assert set(capacity["scheduler"]) == {"fcfs", "static"}
    sweep_charts = [chart for chart in app.get("plotly_chart") if "sweep" in chart.proto.id]
    assert len(sweep_charts) == 2


def test_demo_page_presents_the_bundled_study(results):
    """Both regimes' cards, one per scheduler for attainment and for G in each (numbers:
    test_demo_page.py)."""
    bundle(results, *sorted(folder.name for folder in BUNDLED.glob("demo*")))
    app = open_page("pages/3_Demo.py")
    schedulers = list(DEMO_SCHEDULERS)  # fcfs, static, slo-sa, dynamic-mem, dynamic-sla, mcsf
    assert [metric.label for metric in app.metric] == schedulers * 4
    assert sum(caption.value.startswith("± ") for caption in app.caption) == 4 * len(schedulers)  # intervals
    assert len(app.get("plotly_chart")) == 6
    assert len(app.caption) >= 3


def test_demo_page_without_bundled_results_says_how_to_make_them(results):
    app = open_page("pages/3_Demo.py")
    assert "python -m runners demo" in app.warning[0].value


def python_with(tmp_path: Path, package: str) -> str:
    """A 'python' (this interpreter) that finds an empty ``package``: the Launch form's check that
    the engine is installed passes, and its server module is missing, so the server dies at start-up."""
    site = tmp_path / "site"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_an_engine_that_fails_to_start_shows_its_log(results, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    app = open_page("pages/1_Launch.py")
    app.radio(key="f:engine.kind").set_value("vllm").run()
    app.text_input(key="f:engine.model").set_value(str(model)).run()
    # a Python whose vllm has no server (one without vllm is refused before launch): the server dies
    app.text_input(key="f:engine.python").set_value(python_with(tmp_path, "vllm")).run()
    job = launch_five_requests_without_gpus(app, results)
    assert job.runs[0].status == "failed"
    app.run()
    assert not app.exception
    shown = errors_text(app)
    assert "Run failed" in shown
    logs = [block.value for block in app.code]
    assert any("vllm" in text.lower() for text in logs), logs


def test_launch_page_draws_an_engine_from_its_adapter_alone(results, tmp_path):
    """SGLang's inputs come from its adapter's form_fields: they reach the job's config, and a
    machine without SGLang shows the failed launch with its log."""
    app = open_page("pages/1_Launch.py")
    app.radio(key="f:engine.kind").set_value("sglang").run()
    (tmp_path / "model").mkdir()  # a model folder that does not exist is refused before launch
    app.text_input(key="f:engine.model").set_value(str(tmp_path / "model")).run()
    app.text_input(key="f:engine.python").set_value(python_with(tmp_path, "sglang")).run()
    app.text_input(key="f:engine.max_running_requests").input("12").run()
    app.text_input(key="f:engine.context_length").input("2048").run()
    app.checkbox(key="ui:flag:engine.scheduling_policy").check().run()
    job = launch_five_requests_without_gpus(app, results)
    engine = job.spec.runs[0].engine
    assert (engine.kind, engine.max_running_requests, engine.context_length) == ("sglang", 12, 2048)
    assert engine.scheduling_policy == "priority" and engine.use_gpus is False
    assert job.runs[0].status == "failed"  # no SGLang server here: python -m sglang.launch_server dies
    app.run()
    assert any("sglang" in block.value for block in app.code)


def test_the_dashboard_binds_to_localhost_unless_configured():
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "localhost"
    assert config["server"]["headless"] is True


def test_launch_and_results_pages_say_how_far_a_simulated_run_can_be_trusted(results):
    # issue 13 section 3: the profile's fidelity report beside any simulated run
    app = open_page("pages/1_Launch.py")
    captions = " | ".join(caption.value for caption in app.caption)
    assert "Fidelity: simulated with profile qwen2.5-7b-2xv100-vllm: paper coefficients, not validated here" in captions
    app.text_input(key="f:engine.profile").set_value("bench/results/tiny-cpu-vllm.profile.yaml").run()
    assert not app.exception, app.exception
    captions = " | ".join(caption.value for caption in app.caption)
    assert "Fidelity: simulated with profile tiny-cpu-vllm: mean TTFT within" in captions
    assert "of its capacity" in captions and "3 seeds" in captions
    bundle(results, "demo-overload-fcfs-s0", "demo-overload-static-s0")
    app.switch_page("pages/2_Results.py").run()
    captions = " | ".join(caption.value for caption in app.caption)
    assert "simulated with profile qwen2.5-7b-2xv100-vllm: paper coefficients, not validated here" in captions
    assert (
        "Fidelity (demo-overload-static-s0, demo-overload-fcfs-s0)" in captions
        or "Fidelity (demo-overload-fcfs-s0, demo-overload-static-s0)" in captions
    )


def test_the_launch_page_offers_in_engine_schedulers_only_with_a_launched_vllm(results):
    from runners.registry import ENGINES, SCHEDULERS
    from runners.schedulers.vllm import attach_instructions

    in_engine = [name for name, cls in SCHEDULERS.items() if cls.in_engine]
    assert in_engine

    app = open_page("pages/1_Launch.py")
    for kind in ENGINES:
        app.radio(key="f:engine.kind").set_value(kind).run()
        assert not app.exception, app.exception
        options = app.multiselect(key="schedulers").options
        baselines = app.selectbox(key="f:trials.baseline").options
        assert "fcfs" in options and "dynamic-mem" in options, kind
        for name in in_engine:
            if kind == "vllm":
                assert f"{name} (inside vLLM)" in options and name in baselines
            else:  # not offered; the page says why, in the words the CLI refuses it with
                assert not any(option.startswith(name) for option in options), (kind, options)
                assert name not in baselines, (kind, baselines)
                note = [box for box in app.caption if box.value.startswith(f"Not offered with engine {kind}:")]
                assert len(note) == 1 and name in note[0].value, kind  # said once; the full reasons: its tooltip
                assert attach_instructions(SCHEDULERS[name]) in note[0].proto.help, kind


def test_an_in_engine_scheduler_chosen_for_vllm_is_dropped_when_the_engine_changes(results):
    app = open_page("pages/1_Launch.py")
    app.radio(key="f:engine.kind").set_value("vllm").run()
    app.multiselect(key="schedulers").set_value(["fcfs", "engine-dynamic-mem"]).run()
    app.selectbox(key="f:trials.baseline").set_value("engine-dynamic-mem").run()
    assert app.multiselect(key="schedulers").value == ["fcfs", "engine-dynamic-mem"]
    app.radio(key="f:engine.kind").set_value("openai").run()
    assert not app.exception, app.exception
    assert app.multiselect(key="schedulers").value == ["fcfs"]
    assert app.selectbox(key="f:trials.baseline").value == ""


def test_the_launch_page_replays_a_production_trace_and_offers_a_shared_system_prompt(results):
    """Issue 31: the Traffic choice. A trace hides the datasets, mix and arrival fields (a trace
    brings its own) and its run records arrival process "trace"; a shared system prompt shows its
    three fields; the values of the shape not chosen never reach the config."""
    from runners.app.launch_form import for_traffic

    values = {"workload.arrival.rate": "4", "workload.trace.path": "t.jsonl", "workload.system_prompt.tokens": "64"}
    assert for_traffic(values, "trace") == {"workload.trace.path": "t.jsonl"}
    assert for_traffic(values, "datasets") == {"workload.arrival.rate": "4"}
    assert for_traffic(values, "system-prompt") == {"workload.arrival.rate": "4", "workload.system_prompt.tokens": "64"}

    app = open_page("pages/1_Launch.py")
    app.selectbox(key="ui:traffic").set_value("system-prompt").run()
    assert {"f:workload.system_prompt.tokens", "f:workload.system_prompt.share"} <= {t.key for t in app.text_input}
    app.selectbox(key="ui:traffic").set_value("trace").run()
    assert not app.exception, app.exception
    keys = {widget.key for widget in [*app.text_input, *app.selectbox]}
    assert "f:workload.trace.path" in keys and "f:workload.trace.speedup" in keys
    assert not {"f:workload.arrival.process", "f:workload.ratio.chat", "f:workload.chat.kind"} & keys
    app.text_input(key="f:workload.requests").input("30").run()
    app.text_input(key="f:workload.trace.speedup").input("4").run()
    app.text_input(key="f:trials.seeds").input("").run()
    app.multiselect(key="schedulers").set_value(["fcfs"]).run()
    app.select_slider(key="ui:pace").set_value("as fast as possible").run()
    app.button(key="launch").click().run()
    assert not app.error and not app.exception, ([error.value for error in app.error], app.exception)
    job = wait_for_job(results)
    assert job.state == "done", job
    summary = json.loads((results / job.runs[0].run_id / "summary.json").read_text())
    assert summary["arrival_process"] == "trace" and summary["completed"] == 30
    assert summary["workload"] == "first 30 req of trace mooncake_synthetic.jsonl x4 (synthetic)"
