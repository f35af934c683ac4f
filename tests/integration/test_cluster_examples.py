"""Issue 32: the KubeRay example (examples/kuberay/). No Kubernetes or GPU here, so what can be
checked is checked: the study it runs parses into the planned study (5 schedulers x 10 seeds), its
members ask Ray for one GPU each and launch their own vLLM servers, and the RayJob's entrypoint is
a command line `python -m runners` accepts, naming the mounted study."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from runners.app.cli import make_parser
from runners.run.config import parse_config, read_config_file
from runners.study.executors import choose_execution
from runners.study.runner import plan_study

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kuberay"


def test_the_kuberay_study_plans_members_that_each_hold_one_gpu():
    plan = plan_study(parse_config(read_config_file(EXAMPLE / "study.yaml")))
    assert len(plan.members) == 50 and plan.baseline == "static"
    execution = choose_execution(plan, environ={})  # executor: ray in the file
    assert execution.kind == "ray" and execution.resources == {"CPU": 4.0, "GPU": 1.0}
    assert "launching its own servers" in execution.note


def test_the_rayjob_runs_that_study_with_a_command_line_the_cli_accepts():
    job = yaml.safe_load((EXAMPLE / "rayjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "runners"]
    args = make_parser(argv[3:]).parse_args(argv[3:])
    assert (args.config, args.executor, args.out) == ("/config/study.yaml", "ray", "/results")
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    mounts = {mount["mountPath"] for mount in head["containers"][0]["volumeMounts"]}
    assert {"/config", "/results"} <= mounts  # the study file and the results live on the head
    workers = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert workers["resources"]["limits"]["nvidia.com/gpu"] == "1"
