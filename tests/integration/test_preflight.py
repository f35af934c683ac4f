"""Issue 27 defect 4: launches that cannot succeed are refused before anything starts, each under
its field (the engine not installed in the chosen Python, a model folder that does not exist or a
hub id the offline hub cannot serve, a busy port, a malformed server URL; runners.app.preflight),
and a study stops at its first member that fails for a reason of this machine instead of failing
every member the same way (runners.study.runner.environment_failure)."""

from __future__ import annotations

import importlib.util
import socket
import stat
import sys
from pathlib import Path

import pytest

from runners.app import preflight
from runners.app.jobs import list_jobs
from runners.app.launch_form import build_job, default_form_values
from runners.engines.adapters.vllm import VLLMAdapter
from runners.errors import EnvironmentProblem
from runners.run.config import parse_config
from runners.study.executors import Execution
from runners.study.runner import environment_failure, plan_study, run_study

ROOT = Path(__file__).resolve().parents[2]
no_vllm_here = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")


def python_with(tmp_path: Path, package: str) -> str:
    """A 'python' (a script running this interpreter) that can import an empty ``package``."""
    site = tmp_path / "site"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    script = tmp_path / "bin" / "python"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def launch_values(kind: str, **fields: str) -> dict:
    values = default_form_values(["fcfs"])
    values.update({"engine.kind": kind, "trials.seeds": "", **{f"engine.{k}": v for k, v in fields.items()}})
    return values


@no_vllm_here
def test_an_engine_missing_from_the_chosen_python_is_refused_under_the_python_field(tmp_path, monkeypatch):
    monkeypatch.setattr(VLLMAdapter, "known_pythons", classmethod(lambda cls: []))  # no vLLM environment to name
    result = build_job(launch_values("vllm", model=str(tmp_path), python=sys.executable), ["fcfs"])
    assert result.spec is None
    assert result.errors == {
        "engine.python": f"vllm is not installed in {sys.executable}; expected the Python of its environment "
        "(not installed here: install it in its own environment (docs/engines.md) or attach to a running server)"
    }
    sglang = build_job(launch_values("sglang", model=str(tmp_path)), ["fcfs"]).errors
    assert sglang["engine.python"].startswith(f"sglang is not installed in {sys.executable};")
    lmdeploy = build_job(launch_values("lmdeploy", model=str(tmp_path)), ["fcfs"]).errors
    assert lmdeploy["engine.kind"].startswith("'lmdeploy' is not found on this machine (PATH)")
    # a Python that has the package passes: asked in a subprocess, as the launch would run it
    assert build_job(launch_values("vllm", model=str(tmp_path), python=python_with(tmp_path, "vllm")), ["fcfs"]).ok


@no_vllm_here
def test_the_refusal_names_a_vllm_environment_that_has_it(tmp_path, monkeypatch):
    other = python_with(tmp_path, "vllm")
    monkeypatch.setenv("SCHEDLAB_VLLM_PYTHON", other)
    errors = build_job(launch_values("vllm", model=str(tmp_path)), ["fcfs"]).errors
    assert errors["engine.python"].endswith(f"expected the Python of its environment: {other} has it")


def test_a_model_folder_that_does_not_exist_is_refused_and_a_hub_id_only_when_the_hub_is_off(tmp_path):
    missing = str(tmp_path / "no-such-model")
    assert preflight.model_problem(missing, {}) == (
        f"no folder {missing!r} on this machine; expected the folder of a model (or a hub id such as org/name)"
    )
    assert preflight.model_problem(str(tmp_path), {}) is None  # a folder that exists
    offline = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    assert preflight.model_problem("Qwen/Qwen2.5-0.5B", {}) is None  # the hub may serve it
    refused = preflight.model_problem("Qwen/Qwen2.5-0.5B", offline)
    assert refused is not None and "not in the hub cache" in refused and "HF_HUB_OFFLINE=1" in refused
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    assert preflight.model_problem("Qwen/Qwen2.5-0.5B", offline) is None  # in the cache: loads offline


def test_a_busy_port_and_a_malformed_url_are_refused(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = parse_config(
            {"engine": {"kind": "lmdeploy", "model": str(tmp_path), "command": [sys.executable], "ports": [port]}}
        )
        assert preflight.refusals(config) == {
            "engine.ports": f"port {port} on 127.0.0.1 is in use; expected free ports "
            "(or none given: schedlab then picks free ones)"
        }
        with pytest.raises(EnvironmentProblem, match=f"engine.ports: port {port} on 127.0.0.1 is in use"):
            preflight.check(config)
    assert preflight.refusals(config) == {}  # freed
    errors = build_job(launch_values("openai", urls="http://gpu-box:80800"), ["fcfs"]).errors
    assert errors == {
        "engine.urls": "'http://gpu-box:80800' has no valid port; expected a URL such as http://gpu-box:8000"
    }
    assert build_job(launch_values("openai", urls="http://gpu-box:8000"), ["fcfs"], check_workload=False).ok


def test_the_simulator_needs_no_check():
    assert preflight.refusals(parse_config({"engine": {"kind": "sim"}})) == {}


@no_vllm_here
def test_the_launch_page_refuses_under_the_fields_and_starts_nothing(monkeypatch, results_dir, tmp_path):
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results_dir)
    monkeypatch.setenv("SCHEDLAB_VLLM_PYTHON", str(tmp_path / "none"))
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    app.switch_page("pages/1_Launch.py").run()
    app.radio(key="f:engine.kind").set_value("vllm").run()
    app.text_input(key="f:engine.model").input(str(tmp_path / "missing-model")).run()
    app.button(key="launch").click().run()
    assert not app.exception, app.exception
    shown = {box.value for box in app.error}
    assert (
        f"**Model folder**: no folder {str(tmp_path / 'missing-model')!r} on this machine; expected the folder "
        "of a model (or a hub id such as org/name)" in shown
    )
    assert any(value.startswith("**Python of the vLLM environment**: vllm is not installed in") for value in shown)
    assert "2 field(s) need attention; each error is shown under its field." in shown
    assert not list_jobs(results_dir), "nothing may start when the machine cannot run the launch"


def failing_lmdeploy_study(tmp_path: Path, seeds: int = 3):
    """A study of ``seeds`` LMDeploy members whose server dies at start-up, as one without the engine does."""
    dies = [sys.executable, "-c", "import sys; print(\"No module named 'lmdeploy'\"); sys.exit(1)"]
    config = parse_config(
        {
            "engine": {"kind": "lmdeploy", "model": str(tmp_path), "command": dies, "use_gpus": False},
            "workload": {"requests": 3},
            "trials": {"seeds": list(range(seeds))},
        }
    )
    return plan_study(config)


def test_a_study_stops_at_the_first_member_whose_engine_cannot_start(tmp_path):
    plan = failing_lmdeploy_study(tmp_path)
    result = run_study(plan, tmp_path / "results")
    first, *rest = result.record.runs
    assert first.status == "failed" and str(first.error).startswith("EngineStartError: server on port")
    assert "No module named 'lmdeploy'" in str(first.error)
    assert [run.status for run in rest] == ["skipped", "skipped"]
    for run in rest:
        assert str(run.error).startswith(
            f"not run: {first.run_id} failed for a reason of this machine, which every run of the study would meet "
            "(EngineStartError: server on port"
        )
        assert not (tmp_path / "results" / str(run.run_id)).exists()  # no server started for it
    assert result.record.status == "failed"


def failing_task(member, results_root, progress, should_stop):
    """A member task whose first member fails for a reason of its own (not of the machine)."""
    if member.seed == 0:
        return "failed", None, "PolicyStalled: the scheduler held every request"
    return "failed", None, "EngineStartError: server on port 1 exited with code 1 during start-up"


def test_a_failure_of_the_run_itself_keeps_the_study_going(tmp_path):
    plan = failing_lmdeploy_study(tmp_path)
    result = run_study(plan, tmp_path / "results", execution=Execution("serial", 1, "test"), task=failing_task)
    assert [run.status for run in result.record.runs] == ["failed", "failed", "skipped"]  # stops at seed 1, not 0
    assert environment_failure(("failed", None, "PolicyStalled: x")) is None
    assert environment_failure(
        ("failed", None, "SchedlabError: engine.urls: http://h:1 did not answer GET /v1/models (x)")
    )
    assert environment_failure(("done", None, None)) is None


def test_single_runs_stop_at_the_first_that_fails_for_this_machine_and_the_job_reads_failed(tmp_path):
    """A job of single runs (blank Seeds) stops as a study does: the first run's engine dies at
    start-up, the other two are skipped with the reason, and the job's state is failed."""
    from runners.app.jobs import new_job_spec, read_job
    from runners.app.worker import run_job
    from runners.store.result_store import write_json_atomic

    configs = [member.config for member in failing_lmdeploy_study(tmp_path).members]
    spec = new_job_spec(configs, label="three single runs")
    folder = tmp_path / "results" / ".jobs" / spec.job_id
    folder.mkdir(parents=True)
    write_json_atomic(folder / "job.json", spec.model_dump(mode="json"))
    assert run_job(folder, tmp_path / "results") == "failed"
    job = read_job(folder)
    assert job is not None and job.state == "failed"
    first, *rest = job.runs
    assert first.status == "failed" and "EngineStartError" in str(first.error)
    assert [run.status for run in rest] == ["skipped", "skipped"]
    assert all(f"not run: {first.run_id} failed for a reason of this machine" in str(run.error) for run in rest)
    assert not any((tmp_path / "results" / str(run.run_id)).exists() for run in rest)


def test_a_launch_by_a_command_of_its_own_is_not_refused_for_its_model_name(tmp_path):
    """With ``engine.command`` the config's own program decides what ``model`` means (a fake
    server, a wrapper script): only that program must exist, not a folder by the model's name."""
    config = parse_config(
        {"engine": {"kind": "lmdeploy", "model": "internlm-fake-7b", "command": [sys.executable, "-c", "pass"]}}
    )
    assert "engine.model" not in preflight.refusals(config, {"HF_HUB_OFFLINE": "1"})
    missing = parse_config(
        {"engine": {"kind": "lmdeploy", "model": "internlm-fake-7b", "command": ["no-such-program-x"]}}
    )
    assert "no-such-program-x" in preflight.refusals(missing, {"HF_HUB_OFFLINE": "1"}).get("engine.kind", "")
