"""Schedulers of a user's own, found without editing schedlab (issue 30, discovery): a file
named by --scheduler-path or SCHEDLAB_SCHEDULER_PATH, and the entry points of installed
packages; a broken source is one line naming it, and never stops the others from listing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from runners.registries import Registry
from runners.registry import _check_policy
from runners.schedulers.discovery import PATH_ENV, discover

ROOT = Path(__file__).resolve().parents[2]
EDF = ROOT / "examples" / "edf_policy.py"


def runners_cli(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "runners", *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_a_users_file_runs_as_a_study_member_on_spawned_workers(tmp_path):
    """--scheduler-path reaches the process pool's spawned workers (through the environment): a
    paired study of the example EDF policy against FCFS at 2 seeds, on 2 worker processes."""
    done = runners_cli(
        *"run --scheduler-path examples/edf_policy.py --scheduler edf,fcfs --baseline fcfs --seeds 2".split(),
        *"--requests 40 --rate 8 --set engine.max_num_seqs=2 --executor process --workers 2 --quiet".split(),
        "--run-id",
        "mine",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "mine" / "study.json").read_text())
    assert record["status"] == "done" and record["execution"] == {"executor": "process", "workers": 2}
    assert sorted(run["run_id"] for run in record["runs"]) == [
        "mine-edf-s0",
        "mine-edf-s1",
        "mine-fcfs-s0",
        "mine-fcfs-s1",
    ]
    summary = json.loads((tmp_path / "mine-edf-s0" / "summary.json").read_text())
    assert summary["scheduler"] == "edf" and summary["completed"] == 40


def test_a_broken_source_is_one_line_and_the_others_still_list(tmp_path):
    broken = tmp_path / "broken_policy.py"
    broken.write_text("def oops(:\n")
    clash = tmp_path / "clash_policy.py"
    clash.write_text(EDF.read_text().replace('name = "edf"', 'name = "fcfs"'))
    env = {PATH_ENV: os.pathsep.join([str(broken), str(clash), str(tmp_path / "missing.py"), str(EDF)])}
    done = runners_cli("schedulers", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("  fcfs ") for line in lines) and any(line.startswith("  edf ") for line in lines)
    assert f"  not added: {broken}: line 1: invalid syntax" in lines
    assert f"  not added: {clash}: scheduler 'fcfs' (EarliestDeadlineFirst) is taken; not added" in lines
    assert f"  not added: {tmp_path / 'missing.py'}: no such file; expected a Python file of scheduler classes" in lines
    # a run of the broken source's (absent) scheduler is refused in one line naming the field
    refused = runners_cli("run", "--scheduler", "nope", "--requests", "5", "--out", str(tmp_path), env=env)
    assert refused.returncode == 2 and "scheduler.name" in refused.stderr and "edf" in refused.stderr


def test_entry_points_are_registered_deferred_and_checked_on_load(monkeypatch):
    """An installed package's ``schedlab.schedulers`` entry point: its name is the scheduler's, its
    class imported on first lookup; a name that clashes is reported, not registered."""
    from importlib import metadata

    points = [
        metadata.EntryPoint("edf-pkg", "runners.schedulers.fcfs:FCFSPolicy", "schedlab.schedulers"),
        metadata.EntryPoint("fcfs", "somewhere:Other", "schedlab.schedulers"),
    ]
    monkeypatch.setattr(metadata, "entry_points", lambda group: points if group == "schedlab.schedulers" else [])
    registry: Registry = Registry("scheduler", "scheduler.name")
    registry.register("fcfs", object)
    problems = discover(registry, _check_policy, environ={})
    assert len(problems) == 1
    assert problems[0].startswith("entry point 'fcfs' (somewhere:Other): two schedulers are named 'fcfs'")
    assert "edf-pkg" in registry
    try:
        registry.lookup("edf-pkg")
    except Exception as exc:  # the class calls itself fcfs: refused on load, naming both
        assert "scheduler 'edf-pkg': the class FCFSPolicy calls itself 'fcfs'" in str(exc)
    else:
        raise AssertionError("a class whose name differs from its entry point was accepted")


def test_a_scheduler_that_does_not_load_is_named_on_the_launch_page_and_left_out(monkeypatch, results_dir):
    """An entry point whose module is broken: the Launch page offers every other scheduler and
    says which one was not added and why (it raised while drawing the list before)."""
    from streamlit.testing.v1 import AppTest

    from runners import registry

    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    monkeypatch.setattr(registry, "SCHEDULER_PROBLEMS", [])
    registry.SCHEDULERS.register_deferred("broken-policy", "runners.no_such_module:Broken", _check_policy)
    try:
        names = registry.usable_schedulers()
        assert "broken-policy" not in names and "fcfs" in names and "edf" not in names
        app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        app.switch_page("pages/1_Launch.py").run()
        assert not app.exception, app.exception
        warnings = [warning.value for warning in app.warning]
        assert any(
            text.startswith("Scheduler not added: scheduler 'broken-policy': cannot load runners.no_such_module:Broken")
            for text in warnings
        ), warnings
        offered = app.multiselect(key="schedulers").options
        assert "broken-policy" not in offered and "fcfs" in offered
    finally:
        del registry.SCHEDULERS["broken-policy"]


def test_a_users_scheduler_is_launched_from_the_launch_page_with_its_own_form(monkeypatch, results_dir, tmp_path):
    """A file outside the repository (a copy of examples/edf_policy.py), named by
    SCHEDLAB_SCHEDULER_PATH as the dashboard's environment would: the Launch page offers its
    schedulers, draws their parameters from their Params, and the job's worker process (which
    inherits the environment) runs the study with the value typed in."""
    import shutil

    from streamlit.testing.v1 import AppTest

    from runners import registry
    from runners.app.jobs import list_jobs
    from runners.schedulers.discovery import load_source
    from tests.integration.test_app import wait_for_job

    mine = tmp_path / "mine" / "edf_policy.py"
    mine.parent.mkdir()
    shutil.copy(EDF, mine)
    monkeypatch.setenv(PATH_ENV, str(mine))
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    added = [cls for cls in load_source(str(mine)) if cls.name not in registry.SCHEDULERS]
    for cls in added:  # this process's registry was filled before the variable was set
        registry.SCHEDULERS.register(cls.name, cls)
    try:
        app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
        app.switch_page("pages/1_Launch.py").run()
        assert "edf" in app.multiselect(key="schedulers").options  # engine-edf: offered with a launched vLLM
        app.multiselect(key="schedulers").set_value(["edf", "fcfs"]).run()
        app.text_input(key="f:workload.requests").input("30").run()
        app.text_input(key="f:trials.seeds").input("2").run()
        app.select_slider(key="ui:pace").set_value("as fast as possible").run()
        field = app.text_input(key="f:scheduler.edf.max_in_flight")
        assert field.value == "8" and "most requests in flight per instance" in (field.help or ""), field.help
        field.input("3").run()
        app.button(key="launch").click().run()
        assert not app.error, [e.value for e in app.error]
        job = wait_for_job(results_dir)
        assert job.state == "done", job
        assert sorted(run.status for run in job.runs) == ["done"] * 4
        folders = [results_dir / run.run_id for run in job.runs if "-edf-" in run.run_id]
        assert len(folders) == 2
        for folder in folders:
            config = json.loads((folder / "config.json").read_text())["config"]
            assert config["scheduler"]["name"] == "edf" and config["scheduler"]["params"] == {"max_in_flight": 3}
        assert list_jobs(results_dir)[0].job_id == job.job_id
    finally:
        for cls in added:
            del registry.SCHEDULERS[cls.name]


def test_a_study_of_a_users_scheduler_shows_on_the_results_page_without_its_file(monkeypatch, results_dir):
    """The Results page reads saved runs by name: a study of a user's scheduler shows there even in
    a dashboard that was not given the user's file (no registry lookup on the way)."""
    from streamlit.testing.v1 import AppTest

    made = runners_cli(
        *f"run --scheduler-path {EDF} --scheduler edf,fcfs --seeds 2 --requests 30 --rate 4 --run-id mine".split(),
        "--out",
        str(results_dir),
        "--quiet",
        env={PATH_ENV: ""},
    )
    assert made.returncode == 0, made.stderr
    monkeypatch.setenv(PATH_ENV, "")
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    app.switch_page("pages/2_Results.py").run()
    assert not app.exception, app.exception
    shown = [m.value for m in app.markdown] + [frame.value.to_string() for frame in app.dataframe]
    shown += [str(option) for box in [*app.selectbox, *app.multiselect] for option in box.options]
    assert any("mine-edf-s0" in text or "edf" in text.split() for text in shown), shown[:20]
