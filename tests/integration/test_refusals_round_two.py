"""Issue 24, items 7-10: bounded warm-up that reconciles with the server's counters, one-line
errors where tracebacks reached the user, study input refused before anything is written, and the
smaller defects (demo --out, a linear GuideLLM import, a token kept beside a malformed usage,
errors that quote long input, SIGTERM while starting, a study listing 50,000 runs)."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.app.cli import main
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from tests.fuzzing.checks import Failures, expect_refused, outcome_problems, run_folders, shorten
from tests.fuzzing.sandbox import get_sandbox
from tests.fuzzing.seeds import tiny_workload_args, write_dataset
from tests.integration.test_client_faults import config_for
from tests.integration.test_fuzz_round_two import runners_cli

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "data" / "peer_results"
WAVES = [1, 2, 4, 8, 16, 32]


# -- 7. warm-up --------------------------------------------------------------------------------------
def test_warm_up_against_a_server_that_never_answers_stops_at_the_first_wave(server_factory, tmp_path):
    server = server_factory(behaviour="hang")
    data = config_for(server, "w", requests=2, warmup_concurrency=WAVES, warmup_timeout_s=0.5, request_timeout_s=1)
    started = time.monotonic()
    outcome = execute_run(parse_config(data), tmp_path)
    elapsed = time.monotonic() - started
    warmup = outcome.summary.warmup
    assert warmup is not None and warmup.stopped is not None and warmup.duration_s is not None
    assert elapsed < 15, elapsed  # was 63 waves' worth of request timeouts
    assert warmup.waves == 1 and warmup.requests == 1 and warmup.failed == 1, warmup
    assert warmup.waves_planned == 6 and "warm-up stopped at wave 1 of 6" in warmup.stopped
    assert "each allowed 0.5 s" in warmup.stopped and warmup.duration_s < 5
    assert load_run(tmp_path, "w").summary.warmup == warmup  # in the saved summary too


def test_warm_up_is_recorded_so_the_servers_counters_reconcile(server_factory, tmp_path):
    server = server_factory()
    outcome = execute_run(parse_config(config_for(server, "ok", requests=4, warmup_concurrency=WAVES)), tmp_path)
    warmup = outcome.summary.warmup
    assert warmup is not None and warmup.requests is not None
    assert outcome.status == "done" and warmup.stopped is None and warmup.waves == 6
    assert warmup.requests == sum(WAVES) == 63 and warmup.failed == 0
    assert warmup.output_tokens == 16 * 63 == 1008  # the tokens the engine counted that the run did not
    assert server.posts == warmup.requests + outcome.summary.server_requests  # every request accounted for


def test_the_cli_says_when_warm_up_stopped(server_factory, tmp_path, capsys):
    server = server_factory(behaviour="hang")
    argv = ["run", "--engine", "openai", "--url", server.url, "--requests", "1", "--out", str(tmp_path), "--quiet"]
    argv += ["--set", "engine.warmup_timeout_s=0.3", "--set", "engine.request_timeout_s=0.6"]
    main(argv)
    assert "warm-up stopped at wave 1 of 6" in capsys.readouterr().out


# -- 8. tracebacks that reached the user -------------------------------------------------------------
def test_an_aiperf_aggregate_with_a_field_of_another_shape_is_read_or_refused_in_one_line(tmp_path):
    original = json.loads((PEERS / "profile_export_aiperf.json").read_text())
    failures = Failures("AIPerf aggregate fields of unexpected shapes")
    shapes = [[], [1, 2], "text", 5, None, {"mean": "x"}, {"mean": [1]}, True]
    where = [
        ("input_config", "datasets", 0, "prompts", "isl"),
        ("input_config", "datasets", 0, "prompts"),
        ("input_config", "datasets", 0),
        ("input_config", "datasets"),
        ("input_config", "models", "items"),
        ("input_config", "endpoint", "urls"),
    ]
    sandbox = get_sandbox()
    for path in where:
        for shape in shapes:
            data = copy.deepcopy(original)
            target = data
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = shape
            source = tmp_path / f"agg-{len(failures.classes)}-{failures.cases}.json"
            source.write_text(json.dumps(data))
            results = tmp_path / f"res-{failures.cases}"
            outcome = sandbox.cli(["import", source, "--out", results], timeout_s=30)
            failures.case()
            failures.extend(outcome_problems(outcome, (0, 2)), f"{'.'.join(map(str, path))} = {shape!r}")
    assert not failures, failures.message()


def test_profile_repeats_out_of_range_is_one_line(capsys):
    for repeats in ("-1", "0", "100000"):
        code = main(
            [
                "profile",
                "--engine",
                "openai",
                "--url",
                "http://127.0.0.1:9",
                "--out",
                "/tmp/x.yaml",
                "--repeats",
                repeats,
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error: --repeats:") and err.count("\n") == 1, err


def test_a_model_card_with_an_impossible_context_length_is_one_line(server_factory, tmp_path, capsys):
    server = server_factory(models={"data": [{"id": "m", "max_model_len": 10**30}]})
    argv = ["run", "--engine", "openai", "--url", server.url, "--requests", "2", "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: engine.urls:") and "max_model_len" in err and err.count("\n") == 1, err
    assert not run_folders(tmp_path)
    # with the user's own limit, the card's is not believed and the run goes on
    assert main([*argv, "--set", "engine.context_tokens=4096", "--set", "engine.warmup_concurrency=[]"]) == 0


@pytest.mark.parametrize("study_id", ["../x", "/abs", "..", ".jobs", "a/b", ""])
def test_a_job_whose_study_id_is_a_path_is_refused_in_one_line(study_id, tmp_path, capsys):
    from runners.app.jobs import StudySpec, new_job_spec

    spec = new_job_spec(
        [parse_config({"engine": {"kind": "sim"}, "workload": {"requests": 3}, "run_id": "x-fcfs-s0"})],
        study=StudySpec(study_id="x", baseline="fcfs", schedulers=["fcfs"], seeds=[0]),
    )
    data = json.loads(spec.model_dump_json())
    data["study"]["study_id"] = study_id
    folder = tmp_path / "results" / ".jobs" / "j"
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps(data))
    before = sorted(str(path) for path in tmp_path.rglob("*"))
    assert main(["worker", str(folder), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "study.study_id" in err and err.count("\n") == 1, err
    assert sorted(str(path) for path in tmp_path.rglob("*")) == before  # nothing written anywhere


# -- 9. study input that must be refused ---------------------------------------------------------------
REFUSED_STUDIES = [
    (["--set", "trials.rates=[true]"], "trials.rates"),
    (["--set", "trials.rates=['4']"], "trials.rates"),
    (["--set", "trials.seeds=[true,false]"], "trials.seeds"),
    (["--set", "trials.seeds=[1,'2']"], "trials.seeds"),
    (["--set", "trials.seeds=[1.5]"], "trials.seeds"),
    (["--set", "trials.seeds=[]"], "trials.seeds"),
    (["--set", "trials.schedulers=[]"], "trials.schedulers"),
    (["--set", "trials.rates=[]"], "trials.rates"),
    (["--set", "trials.schedulers=[fcfs, 3]"], "trials.schedulers"),
    (["--set", "trials.baseline=''"], "trials.baseline"),
    (["--scheduler", "fcfs,slo-sa", "--baseline", ""], "--baseline"),
    (["--scheduler", "fcfs,slo-sa", "--executor", ""], "--executor"),
    (["--scheduler", "fcfs,slo-sa", "--executor", " "], "--executor"),
    (["--scheduler", "fcfs,engine-mcsf"], "trials.schedulers"),
    (["--scheduler", "engine-dynamic-mem,fcfs", "--seeds", "2"], "trials.schedulers"),
]


def test_study_input_is_refused_before_anything_is_written(tmp_path):
    sandbox = get_sandbox()
    dataset = write_dataset(tmp_path)
    failures = Failures("study inputs that must be refused")
    for number, (flags, field) in enumerate(REFUSED_STUDIES):
        results = tmp_path / f"r{number}"
        argv = ["run", "--engine", "sim", "--requests", "3", "--out", results, "--quiet", *flags]
        outcome = sandbox.cli([*argv, *tiny_workload_args(dataset)], timeout_s=30)
        problems = outcome_problems(outcome) + expect_refused(outcome, field)
        if results.exists() and any(results.iterdir()):
            problems.append(("something was written", ", ".join(path.name for path in results.iterdir())))
        failures.case()
        failures.extend(problems, " ".join(flags))
    assert not failures, failures.message()


# -- 10. the smaller ones ---------------------------------------------------------------------------------
def test_demo_refuses_an_out_that_is_not_a_results_folder_at_once(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for out in ("/dev/null", str(tmp_path / "no" / "such" / "x"), str(a_file)):
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "runners", "demo", "--out", out],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert time.monotonic() - started < 20
    assert a_file.read_text() == "x" and not (tmp_path / "no").exists()


def test_a_file_of_many_benchmarks_is_copied_once_and_linked_into_each_run(tmp_path):
    from runners.imports import import_file

    data = json.loads((PEERS / "guidellm-benchmarks.json").read_text())
    data["benchmarks"] = [copy.deepcopy(data["benchmarks"][0]) for _ in range(6)]
    source = tmp_path / "six.json"
    source.write_text(json.dumps(data))
    folders = import_file(source, tmp_path / "results")
    copies = [folder / "source-six.json" for folder in folders]
    assert len(folders) == 6 and all(path.read_bytes() == source.read_bytes() for path in copies)
    assert len({path.stat().st_ino for path in copies}) == 1 and copies[0].stat().st_nlink == 6
    from runners.store.result_store import delete_run

    delete_run(tmp_path / "results", folders[0].name)  # the others keep their copy
    assert copies[1].read_bytes() == source.read_bytes()


def test_a_token_whose_chunk_has_a_malformed_usage_is_kept(server_factory, tmp_path):
    bad = json.dumps(
        {"object": "text_completion", "choices": [{"index": 0, "text": "x "}], "usage": {"completion_tokens": "abc"}}
    )
    server = server_factory(behaviour="malformed", chunk=bad, good_tokens=5)
    outcome = execute_run(parse_config(config_for(server, "u", requests=2)), tmp_path)
    rows = load_run(tmp_path, "u").requests
    assert outcome.summary.failed == 2
    assert list(rows["output_tokens"]) == [6, 6]  # the 5 good tokens and the one beside the bad usage
    assert all("usage.completion_tokens is not a count" in error for error in rows["error"])


def test_errors_quote_long_input_cut_to_a_sensible_length(capsys):
    huge = "x" * 200_000
    for argv in (
        ["run", "--engine", "sim", "--set", f"engine.kv_capacity_tokens={huge}"],
        ["run", "--engine", "sim", "--ratio", huge],
        ["run", "--engine", "sim", "--set", f"workload.arrival.process={huge}"],
    ):
        assert main([*argv, "--out", "/tmp/never-written"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err) < 2_200 and err.count("\n") == 1, (len(err), err[:200])
    assert not os.path.exists("/tmp/never-written")


@pytest.mark.parametrize("after_s", [0.6, 1.5])  # after the interpreter itself has started
def test_sigterm_while_starting_exits_130(after_s, tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runners",
            "run",
            "--engine",
            "sim",
            "--requests",
            "100000",  # seconds of simulation: the signal lands while starting or running, never at exit
            "--out",
            str(tmp_path),
            "--quiet",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(after_s)
    process.send_signal(signal.SIGTERM)
    code = process.wait(timeout=60)
    assert code == 130, (code, process.stderr.read() if process.stderr else "")


def test_a_study_listing_50000_runs_shows_fast_and_lists_a_bounded_number(tmp_path):
    from runners.study.runner import LISTED_PROBLEMS

    dataset = write_dataset(tmp_path)
    assert main(["run", "--engine", "sim", "--requests", "3", "--scheduler", "fcfs,slo-sa", "--seeds", "2",
                 "--run-id", "B", "--out", str(tmp_path), "--quiet", "--workers", "1", *tiny_workload_args(dataset)]) == 0  # fmt: skip
    record = json.loads((tmp_path / "B" / "study.json").read_text())
    seeds = list(range(25_000))
    record["seeds"] = seeds
    record["runs"] = [
        {"run_id": f"B-{name}-s{seed}", "scheduler": name, "seed": seed, "rate": 4.0,
         "status": "failed" if seed % 2 else "done", "error": "boom " * 40 if seed % 2 else None}
        for name in ("fcfs", "slo-sa") for seed in seeds
    ]  # fmt: skip
    (tmp_path / "B" / "study.json").write_text(json.dumps(record))
    started = time.monotonic()
    shown = runners_cli("show", "B", "--out", tmp_path, timeout_s=120)
    elapsed = time.monotonic() - started
    assert shown.returncode == 0 and elapsed < 30, (elapsed, shown.stderr[-300:])
    listed = [line for line in shown.stdout.splitlines() if line.startswith("  B-")]
    assert len(listed) == LISTED_PROBLEMS and "24,980 more runs" in shown.stdout, shorten(shown.stdout[-400:])
