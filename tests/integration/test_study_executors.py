"""Study execution (runners/study/executors.py, run_study, `run --workers/--executor`): identical results
one at a time, on 2 worker processes and on a local Ray; a member that raises or whose worker
process dies is a failed run and the rest go on; a stop cancels the running runs and skips the
rest; workers are spawned (nothing of the parent leaks in, no streamlit); real engines run one at
a time; Ray missing or a bad worker count is one line. Tiny simulator runs."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from runners.app.cli import main
from runners.errors import ConfigError
from runners.run.config import parse_config
from runners.store.models import StudyExecution, StudyRecord
from runners.store.result_store import inspect_run
from runners.study.executors import Execution, choose_execution, estimate_seconds
from runners.study.runner import execute_member, plan_study, read_study, run_study

ROOT = Path(__file__).resolve().parents[2]
#: Summary fields that record wall-clock time or the writing process, not what was measured.
WALL_CLOCK = {"writer", "started_at", "finished_at", "started_at_unix_s", "wall_time_s"}


def small_plan(study_id: str, seeds=(0, 1), requests: int = 40, **trials):
    """fcfs and slo-sa (numba kernels) at one slot and 6 req/s: a queue forms, decisions differ."""
    return plan_study(
        parse_config(
            {
                "engine": {"kind": "sim", "max_num_seqs": 1},
                "run_id": study_id,
                "workload": {"requests": requests, "arrival": {"rate": 6}},
                "trials": {"seeds": list(seeds), "schedulers": ["fcfs", "slo-sa"], **trials},
            }
        )
    )


def measured(results: Path, record: StudyRecord) -> dict:
    """Per member: its summary without wall-clock fields, and its request and time-series rows."""
    out = {}
    for run in record.runs:
        folder = results / str(run.run_id)
        summary = json.loads((folder / "summary.json").read_text())
        out[run.run_id] = (
            {key: value for key, value in summary.items() if key not in WALL_CLOCK},
            pd.read_parquet(folder / "requests.parquet"),
            pd.read_parquet(folder / "timeseries.parquet"),
        )
    return out


def assert_same(one: dict, other: dict) -> None:
    assert one.keys() == other.keys()
    for run_id, (summary, requests, timeseries) in one.items():
        assert other[run_id][0] == summary, run_id
        pd.testing.assert_frame_equal(other[run_id][1], requests, check_exact=True)
        pd.testing.assert_frame_equal(other[run_id][2], timeseries, check_exact=True)


@pytest.fixture(scope="module")
def serial_study(tmp_path_factory):
    """The reference: the small study run one at a time in this process."""
    results = tmp_path_factory.mktemp("serial")
    plan = small_plan("st")
    result = run_study(plan, results, execution=choose_execution(plan, workers=1))
    assert result.record.execution == StudyExecution(executor="serial", workers=1)
    return results, result.record


def test_two_workers_give_identical_results(serial_study, results_dir, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    results, record = serial_study
    assert (
        main(
            [
                *"run --engine sim --scheduler fcfs,slo-sa --seeds 2 --requests 40 --rate 6 --set engine.max_num_seqs=1 --quiet --run-id st --workers 2 --executor process --out".split(),
                str(results_dir),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("study st: 4 runs; runs on 2 worker processes\n") and "4 runs: 4 done" in out
    parallel = json.loads((results_dir / "st" / "study.json").read_text())
    assert parallel["status"] == "done" and parallel["execution"] == {"executor": "process", "workers": 2}
    # slo-sa differs from fcfs here, so equal files mean equal decisions, not an idle engine
    reference = measured(results, record)
    assert not reference["st-fcfs-s0"][1]["finish_s"].equals(reference["st-slo-sa-s0"][1]["finish_s"])
    assert_same(reference, measured(results_dir, read_study(results_dir / "st")))
    assert parallel["statistics"] == json.loads((results / "st" / "study.json").read_text())["statistics"]


@pytest.mark.e2e
def test_ray_gives_identical_results(serial_study, results_dir):
    ray = pytest.importorskip("ray")
    results, record = serial_study
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        plan = small_plan("st")
        execution = choose_execution(plan, executor="ray", environ={})
        assert execution.kind == "ray" and "a local Ray" in execution.note
        seen: dict[str, int] = {}
        result = run_study(
            plan, results_dir, progress=lambda done, total, m: seen.__setitem__(m.run_id, done), execution=execution
        )
    finally:
        ray.shutdown()
    assert result.record.status == "done" and result.record.execution == StudyExecution(executor="ray", workers=None)
    assert seen == {run.run_id: 40 for run in record.runs}
    assert_same(measured(results, record), measured(results_dir, result.record))


@pytest.mark.e2e
def test_ray_ships_a_users_scheduler_file_to_its_workers(results_dir, tmp_path, monkeypatch):
    """Issue 30: a user's scheduler file reaches Ray workers that cannot read it (here their
    environment names no file, as on another node): its text travels with each task."""
    ray = pytest.importorskip("ray")
    import shutil

    from runners import registry
    from runners.schedulers.discovery import PATH_ENV, load_source

    mine = tmp_path / "mine" / "edf_policy.py"
    mine.parent.mkdir()
    shutil.copy(ROOT / "examples" / "edf_policy.py", mine)
    monkeypatch.setenv(PATH_ENV, str(mine))
    added = [cls for cls in load_source(str(mine)) if cls.name not in registry.SCHEDULERS]
    for cls in added:
        registry.SCHEDULERS.register(cls.name, cls)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {PATH_ENV: ""}})
    try:
        plan = plan_study(
            parse_config(
                {
                    "engine": {"kind": "sim", "max_num_seqs": 4},
                    "run_id": "shipped",
                    "workload": {"requests": 30, "arrival": {"rate": 6}},
                    "trials": {"seeds": [0, 1], "schedulers": ["edf", "fcfs"]},
                }
            )
        )
        result = run_study(plan, results_dir, execution=choose_execution(plan, executor="ray", environ={}))
    finally:
        ray.shutdown()
        for cls in added:
            del registry.SCHEDULERS[cls.name]
    assert {run.run_id: run.status for run in result.record.runs} == {
        "shipped-edf-s0": "done",
        "shipped-edf-s1": "done",
        "shipped-fcfs-s0": "done",
        "shipped-fcfs-s1": "done",
    }, [run.error for run in result.record.runs]
    assert json.loads((results_dir / "shipped-edf-s0" / "summary.json").read_text())["completed"] == 30


# -- tasks the worker processes import from here ----------------------------------------------------
def crashing_task(member, results_root, progress, should_stop):
    """slo-sa at seed 0 raises; fcfs at seed 1 kills its worker process after 10 requests; the
    others run, and note beside the results folder which of some modules their worker holds."""
    (Path(results_root).parent / f"{member.run_id}.modules").write_text(
        " ".join(
            sorted(name for name in sys.modules if name.split(".")[0] in ("streamlit", "plotly", "parent_only_marker"))
        )
    )
    if member.run_id.endswith("slo-sa-s0"):
        raise RuntimeError("engine exploded")
    if member.run_id.endswith("fcfs-s1"):

        def dying(done, total):
            if done >= 10:
                os._exit(3)

        return execute_member(member, results_root, dying, should_stop)
    return execute_member(member, results_root, progress, should_stop)


def test_a_member_that_raises_or_kills_its_worker_fails_alone(results_dir):
    plan = small_plan("cr", seeds=(0, 1))
    sys.modules["parent_only_marker"] = types.ModuleType("parent_only_marker")  # a fork would carry it over
    try:
        result = run_study(
            plan, results_dir, execution=choose_execution(plan, workers=2, executor="process"), task=crashing_task
        )
    finally:
        del sys.modules["parent_only_marker"]
    record = json.loads((results_dir / "cr" / "study.json").read_text())
    assert record == result.record.model_dump(mode="json", exclude_unset=True) and record["status"] == "failed"
    runs = {run["run_id"]: (run["status"], run["error"]) for run in record["runs"]}
    assert runs["cr-slo-sa-s0"] == ("failed", "RuntimeError: engine exploded")
    status, error = runs["cr-fcfs-s1"]
    assert status == "failed" and error.startswith("its worker process (pid ") and "died (exit code 3: crashed" in error
    # with two workers at most one other run is in flight beside the dying one: which one (fcfs-s0
    # or slo-sa-s1) depends on how fast each ran; it ended before the crash or was stopped with it,
    # and says so. Every other run is done, the later ones in a new pool.
    beside = (
        "stopped when the worker process of ",
        "died (the process pool stops all its workers then); what it measured is in its folder",
    )
    others = {run_id: outcome for run_id, outcome in runs.items() if run_id not in ("cr-slo-sa-s0", "cr-fcfs-s1")}
    stopped = [run_id for run_id, (status, error) in others.items() if status != "done"]
    assert len(stopped) <= 1 and all(
        others[run_id][0] == "failed"
        and others[run_id][1].startswith(beside[0])
        and others[run_id][1].endswith(beside[1])
        for run_id in stopped
    ), runs
    assert all(error is None for status, error in others.values() if status == "done"), runs
    # what the dead worker's run measured stays in its folder, marked interrupted
    assert inspect_run(results_dir / "cr-fcfs-s1").status == "interrupted"
    # statistics count the done runs only
    attainment = record["statistics"]["slo_attainment"]["schedulers"]
    assert attainment["slo-sa"]["n"] == (runs["cr-slo-sa-s1"][0] == "done")
    assert attainment["fcfs"]["n"] == (runs["cr-fcfs-s0"][0] == "done")
    # the workers were spawned: nothing of this process (streamlit, plotly, the marker) is in them
    assert {path.stem: path.read_text() for path in results_dir.parent.glob("*.modules")} == {
        run_id: "" for run_id in runs
    }


def test_stop_cancels_running_runs_and_skips_the_rest(results_dir):
    plan = small_plan("sp", seeds=(0, 1, 2), requests=2000)
    seen: set[str] = set()  # members whose requests were reported to this process
    run_study(
        plan,
        results_dir,
        progress=lambda done, total, m: seen.add(m.run_id),
        should_stop=lambda: len(seen) >= 2,
        execution=choose_execution(plan, workers=2, executor="process"),
    )
    record = json.loads((results_dir / "sp" / "study.json").read_text())
    assert record["status"] == "cancelled"
    assert [run["status"] for run in record["runs"]] == ["cancelled", "cancelled"] + ["skipped"] * 4
    for run in record["runs"][:2]:  # the two running runs kept what they measured
        summary = inspect_run(results_dir / run["run_id"])
        assert summary.status == "cancelled" and summary.rows == 2000
    assert not any((results_dir / run["run_id"]).exists() for run in record["runs"][2:])


def test_execution_choice():
    plan = small_plan("ch", seeds=(0, 1, 2))
    assert choose_execution(plan, workers=1).kind == "serial"
    assert choose_execution(plan, executor="serial", environ={}) == Execution(
        "serial", 1, "runs one at a time in this process"
    )
    assert choose_execution(plan, workers=64, executor="process", environ={}) == Execution(
        "process", 6, "runs on 6 worker processes"
    )
    assert choose_execution(plan, executor="process", environ={}).workers == min(os.cpu_count() or 1, 6)
    assert choose_execution(small_plan("ch", workers=3, executor="process"), environ={}).workers == 3  # trials.*
    if importlib.util.find_spec("ray") is not None:
        assert (
            choose_execution(plan, environ={"RAY_ADDRESS": "ray://head:10001"}).note
            == "runs as Ray tasks on the Ray cluster at ray://head:10001, as many at once as it has CPUs"
        )
        assert choose_execution(plan, executor="process", environ={"RAY_ADDRESS": "x"}).kind == "process"
    real = plan_study(
        parse_config(
            {
                "engine": {"kind": "openai", "urls": ["http://127.0.0.1:9"]},
                "trials": {"seeds": [0, 1], "schedulers": ["fcfs", "slo-sa"]},
            }
        )
    )
    assert choose_execution(real, workers=4, executor="ray") == Execution(
        "serial",
        1,
        "real engine (openai): runs one at a time against its servers (--workers and --executor do not apply; "
        "--servers-per-member N deals its servers out as a pool)",
    )
    assert choose_execution(real).note == "real engine (openai): runs one at a time against its servers"
    pool = plan_study(
        parse_config(
            {
                "engine": {"kind": "openai", "urls": ["http://a:1", "http://b:1", "http://c:1", "http://d:1"]},
                "trials": {"seeds": [0, 1], "schedulers": ["fcfs", "slo-sa"], "servers_per_member": 2},
            }
        )
    )
    chosen = choose_execution(pool)
    assert (chosen.kind, chosen.workers, chosen.groups) == (
        "pool",
        2,
        [["http://a:1", "http://b:1"], ["http://c:1", "http://d:1"]],
    )
    assert chosen.record() == {"executor": "pool", "workers": 2, "servers_per_member": 2}
    assert choose_execution(pool, workers=1).groups == [["http://a:1", "http://b:1"]]
    with pytest.raises(ConfigError, match="ray and a pool"):
        choose_execution(pool, executor="ray")
    uneven = parse_config(
        {
            "engine": {"kind": "openai", "urls": ["http://a:1", "http://b:1", "http://c:1"]},
            "trials": {"seeds": [0, 1], "servers_per_member": 2},
        }
    )
    with pytest.raises(ConfigError, match="2 does not divide the 3 servers"):
        choose_execution(plan_study(uneven))
    if importlib.util.find_spec("ray") is not None:
        launched = plan_study(
            parse_config(
                {
                    "engine": {"kind": "vllm", "model": "m", "instances": 2},
                    "trials": {"seeds": [0, 1], "schedulers": ["fcfs", "slo-sa"]},
                }
            )
        )
        on_ray = choose_execution(launched, executor="ray", environ={})
        assert (on_ray.kind, on_ray.resources) == ("ray", {"CPU": 1.0, "GPU": 2.0})
        assert "each member a Ray task on a local Ray launching its own servers, holding CPU=1, GPU=2" in on_ray.note
        custom = launched.config.model_copy(
            update={"trials": launched.config.trials.model_copy(update={"member_resources": {"gpu": 1, "CPU": 0}})}
        )
        assert choose_execution(plan_study(custom), environ={"RAY_ADDRESS": "auto"}).resources == {
            "CPU": 0.0,
            "gpu": 1.0,
        }
        fixed = launched.config.model_copy(
            update={"engine": launched.config.engine.model_copy(update={"ports": [8000, 8001]})}
        )
        with pytest.raises(ConfigError, match="leave ports unset on Ray"):
            choose_execution(plan_study(fixed), executor="ray", environ={})
        assert choose_execution(launched).kind == "serial"


SMALL = [
    *"run --engine sim --scheduler fcfs,slo-sa --seeds 2 --requests 10 --rate 6 --quiet --run-id cl".split(),
]


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--workers", "0"], "error: --workers: 0; expected a whole number of runs at once, 1 to 1024\n"),
        (["--executor", "threads"], "error: --executor: 'threads'; expected one of: serial, process, ray\n"),
        (
            ["--executor", "ray"],
            "error: --executor: --executor ray but ray is not installed; pip install ray (the "
            "optional Ray executor), or run with --executor process\n",
        ),
    ],
)
def test_bad_execution_flags_are_one_line(flags, expected, results_dir, capsys, monkeypatch):
    monkeypatch.setattr("runners.study.executors.ray_installed", lambda: False)
    assert main([*SMALL, *flags, "--out", str(results_dir)]) == 2
    captured = capsys.readouterr()
    assert captured.err == expected and captured.out == "" and list(results_dir.iterdir()) == []


def test_ray_address_without_ray_is_one_line(results_dir, capsys, monkeypatch):
    monkeypatch.setattr("runners.study.executors.ray_installed", lambda: False)
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert main([*SMALL, "--out", str(results_dir)]) == 2
    assert capsys.readouterr().err == (
        "error: --executor: RAY_ADDRESS is set but ray is not installed; pip install "
        "ray (the optional Ray executor), or run with --executor process\n"
    )


def test_study_speed_bench_at_tiny_scale(tmp_path, capsys):
    from bench import study_speed as bench

    out = tmp_path / "study_speed.json"
    assert (
        bench.main(
            [
                *"--seeds 1 --requests 10 --rates 4,6 --schedulers fcfs --executors serial,process --small-repeats 0 --out".split(),
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["runs"] == 2 and report["statuses"] == ["done"] and report["identical_results"] is True
    assert report["serial_workers"] == 1 and report["process_workers"] == min(os.cpu_count() or 1, 2)
    assert report["process_speedup"] == round(report["serial_wall_s"] / report["process_wall_s"], 2)
    assert f"written to {out}" in capsys.readouterr().out


def test_a_study_that_names_no_executor_runs_serially_when_workers_would_cost_more():
    """The cost model (seconds): 6 runs of 40 requests are 6 x (0.15 + 0.008) = 0.948 s one after
    the other; on 2 workers 1.5 + 0.948 / 2 = 1.974 s, so serial. 6 runs of 10,000 requests are
    6 x 2.15 = 12.9 s serially against 1.5 + 6.45 = 7.95 s on 2 workers: the pool."""
    small = small_plan("sz", seeds=(0, 1, 2))
    assert estimate_seconds(small, 1) == pytest.approx(0.948)
    assert estimate_seconds(small, 2) == pytest.approx(1.974)
    chosen = choose_execution(small, workers=2, environ={})
    assert chosen.kind == "serial" and chosen.workers == 1
    assert chosen.note == (
        "runs one at a time in this process: a small study (about 0.9 s of runs) ends sooner than on 2 worker "
        "processes (about 2.0 s with their start; --executor process to use them anyway)"
    )
    assert choose_execution(small, workers=2, executor="process", environ={}).kind == "process"  # named: honoured
    big = small_plan("bg", seeds=(0, 1, 2), requests=10_000)
    assert estimate_seconds(big, 1) == pytest.approx(12.9)
    assert estimate_seconds(big, 2) == pytest.approx(7.95)
    assert choose_execution(big, workers=2, environ={}) == Execution("process", 2, "runs on 2 worker processes")
    # one run longer than the rest bounds the pool's time from below
    assert estimate_seconds(big, 64) == pytest.approx(1.5 + 2.15)


def test_a_paced_study_counts_its_wall_time_not_its_cpu():
    """A simulator paced at 100x waits: 6 runs of 40 requests at 6 req/s each last 40 / 6 / 100 =
    0.0667 s of wall time at least; at 1x, 6.67 s each, so 40 s serially against 1.5 + 20 on 2
    workers: the pool, though the CPU estimate alone (0.948 s) says serial."""
    paced = plan_study(
        parse_config(
            {
                "engine": {"kind": "sim", "max_num_seqs": 1, "pace": 1.0},
                "run_id": "pc",
                "workload": {"requests": 40, "arrival": {"rate": 6}},
                "trials": {"seeds": [0, 1, 2], "schedulers": ["fcfs", "slo-sa"]},
            }
        )
    )
    assert estimate_seconds(paced, 1) == pytest.approx(6 * 40 / 6)
    assert estimate_seconds(paced, 2) == pytest.approx(1.5 + 3 * 40 / 6)
    assert choose_execution(paced, workers=2, environ={}).kind == "process"


def test_a_start_read_after_the_members_end_leaves_it_done(tmp_path, monkeypatch):
    """A worker's "start" message and its result travel through different pipes: a start read
    after its member ended must not mark it running again (the study then ended "cancelled",
    its member "skipped", though every member was done)."""
    from runners.study import executors

    held: list = []
    read = executors._ProcessBackend.placements

    def late(self):  # every start handed over only once no member is left in flight
        held.extend(read(self))
        if self.futures:
            return []
        out, held[:] = list(held), []
        return out

    monkeypatch.setattr(executors._ProcessBackend, "placements", late)
    plan = small_plan("late", seeds=(0, 1, 2), requests=20)
    result = run_study(plan, tmp_path, execution=Execution("process", 2, "test"))
    assert [run.status for run in result.record.runs] == ["done"] * 6
    assert result.record.status == "done"
    assert read_study(tmp_path / "late").status == "done"
