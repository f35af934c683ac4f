"""Fuzz classes of issue 24 ("nothing destroyed, nothing lost, round two"): what ``export -o``
writes to (device nodes, pipes, symbolic links, folders, run files), deleting a run while its
writer is alive, hostile ``/metrics`` pages (non-finite, out-of-range and oversized), deleting a
study one of whose members cannot be deleted, servers that echo the API key into what is written,
and studies killed with SIGKILL, then resumed.

Properties:
- ``export -o`` writes only a regular file outside run folders (or standard output for ``-``);
  anything else is refused in one line and left exactly as it was;
- a run whose writer is alive is never deleted (the CLI and the Results page refuse), and the run
  then ends ``done`` with every row;
- a hostile telemetry page never costs a run its rows or its summary: it ends ``done`` with
  ``timeseries.parquet`` and counts what it dropped;
- a study is deleted all or nothing;
- no file a run writes holds the API key, whatever the server echoes;
- a killed study reads ``interrupted`` and ``run --resume`` finishes it with the same plan:
  its statistics equal an uninterrupted study's.
"""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fuzzing.checks import Failures, digest_changes, outcome_problems, shorten, tree_digest
from tests.fuzzing.harness import case_rng, count
from tests.fuzzing.sandbox import get_sandbox
from tests.fuzzing.seeds import tiny_workload_args, write_dataset

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fuzz sandbox forks")
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def sandbox():
    return get_sandbox()


def cli_process(*argv: object) -> subprocess.Popen:
    """``python -m runners ARGV`` as a process of its own (a writer another command can see alive)."""
    return subprocess.Popen(
        [sys.executable, "-m", "runners", *map(str, argv)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def runners_cli(*argv: object, timeout_s: float = 300) -> subprocess.CompletedProcess:
    """``python -m runners ARGV`` to its end, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "runners", *map(str, argv)], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
    )


def paced_writer(results: Path, run_id: str, dataset: Path) -> subprocess.Popen:
    """A run of 8 requests at half real time, in its own process, once its summary says running."""
    writer = cli_process(
        "run", "--engine", "sim", "--requests", "8", "--set", "engine.pace=0.5", "--run-id", run_id,
        "--out", results, "--quiet", *tiny_workload_args(dataset),
    )  # fmt: skip
    assert wait_for(lambda: summary_of(results / run_id).get("status") == "running"), "the run never started"
    return writer


def wait_for(predicate, timeout_s: float = 60.0, every_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return False


def summary_of(folder: Path) -> dict:
    try:
        return json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def make_run(results: Path, run_id: str, dataset: Path, *extra: str) -> None:
    from runners.app.cli import main

    argv = ["run", "--engine", "sim", "--requests", "4", "--run-id", run_id, "--out", str(results), "--quiet"]
    assert main([*argv, *tiny_workload_args(dataset), *extra]) == 0


# -- 1. what export -o writes to ---------------------------------------------------------------------
def _identity(path: Path) -> tuple | None:
    """What a path is, without following it or reading a special file: (kind, inode, size, content
    hash or link target); None when nothing is there."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return ("link", info.st_ino, os.readlink(path))
    if stat.S_ISREG(info.st_mode):
        return ("file", info.st_ino, path.read_bytes())
    return (stat.S_IFMT(info.st_mode), info.st_ino, info.st_rdev)


def _output_targets(base: Path, run_folder: Path) -> list[tuple[str, str, bool]]:
    """(label, -o value, may be written) for every kind of output target; made under ``base``."""
    targets: list[tuple[str, str, bool]] = []
    outside = base / "outside.txt"
    outside.write_text("precious\n")
    (base / "link-to-file").symlink_to(outside)
    targets.append(("symlink to a regular file", str(base / "link-to-file"), False))
    (base / "link-to-stdout").symlink_to("/proc/self/fd/1")
    targets.append(("symlink to /proc/self/fd/1", str(base / "link-to-stdout"), False))
    (base / "dangling").symlink_to(base / "nowhere.json")
    targets.append(("dangling symlink", str(base / "dangling"), False))
    os.mkfifo(base / "pipe")
    targets.append(("named pipe", str(base / "pipe"), False))
    try:  # a character device like /dev/full, made here so nothing of the machine's is at risk
        os.mknod(base / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        targets.append(("character device (mknod)", str(base / "full"), False))
    except (PermissionError, OSError):
        pass
    (base / "a-folder").mkdir()
    targets.append(("a folder", str(base / "a-folder"), False))
    targets.append(("empty name", "", False))
    targets.append(("blank name", "   ", False))
    targets.append(("missing folder", str(base / "no" / "such" / "x.json"), False))
    targets.append(("the run's summary.json", str(run_folder / "summary.json"), False))
    targets.append(("a new file inside the run folder", str(run_folder / "export.json"), False))
    targets.append(("a file inside another folder of the results", str(run_folder.parent / "other" / "x.json"), False))
    regular = base / "regular.json"
    regular.write_text("{}")
    targets.append(("an existing regular file", str(regular), True))
    targets.append(("a new file in an existing folder", str(base / "new.json"), True))
    return targets


def test_export_writes_only_a_regular_file_outside_run_folders(sandbox, tmp_path):
    failures = Failures("export -o targets")
    dataset = write_dataset(tmp_path)
    results = tmp_path / "results"
    make_run(results, "x", dataset)
    (results / "other").mkdir()
    (results / "other" / "summary.json").write_text("{}")
    targets = _output_targets(tmp_path, results / "x")
    for label, target, allowed in targets:
        before_results = tree_digest(results)
        before = _identity(Path(target)) if target.strip() else None
        outcome = sandbox.cli(["export", "x", "--out", results, "-o", target], cwd=tmp_path, timeout_s=TIMEOUT_S)
        problems = outcome_problems(outcome)
        changes = digest_changes(before_results, tree_digest(results))
        if changes:
            problems.append(("the results folder changed", "; ".join(changes[:3])))
        if allowed:
            written = Path(target)
            if outcome.rc != 0 or not written.is_file() or json.loads(written.read_text()).get("completed") is None:
                problems.append(("a regular file was not written", shorten(outcome.err or outcome.out, 200)))
        else:
            if outcome.rc != 2 or "-o" not in outcome.err:
                problems.append(("not refused with one line naming -o", shorten(outcome.err or outcome.out, 200)))
            after = _identity(Path(target)) if target.strip() else None
            if after != before:
                problems.append(("the target was replaced or created", f"{before!r:.80} -> {after!r:.80}"))
        failures.case()
        failures.extend(problems, f"export x -o <{label}>")
    stdout = sandbox.cli(["export", "x", "--out", results, "-o", "-"], cwd=tmp_path, timeout_s=TIMEOUT_S)
    failures.case()
    if stdout.rc != 0 or json.loads(stdout.out).get("completed") != 4:
        failures.add("-o - does not print the JSON alone on standard output", "export x -o -", stdout.out[:200])
    assert not failures, failures.message()


# -- 2. deleting a run that is being written -------------------------------------------------------
def test_a_run_being_written_is_never_deleted(tmp_path):
    from runners.errors import SchedlabError
    from runners.store.result_store import delete_run, load_run

    results = tmp_path / "results"
    dataset = write_dataset(tmp_path)
    writer = paced_writer(results, "r", dataset)
    try:
        deleted = runners_cli("delete", "r", "--out", results, timeout_s=60)
        assert deleted.returncode == 2 and "still being written" in deleted.stderr, deleted.stderr
        assert deleted.stderr.count("\n") == 1 and (results / "r" / "summary.json").is_file()
        with pytest.raises(SchedlabError, match="still being written"):
            delete_run(results, "r")
        assert writer.wait(timeout=120) == 0, writer.stderr.read() if writer.stderr else ""
    finally:
        if writer.poll() is None:
            writer.kill()
    run = load_run(results, "r")
    assert run.summary.status == "done" and len(run.requests) == 8  # every row kept
    assert delete_run(results, "r") == results / "r" and not (results / "r").exists()  # once it has ended


def test_the_results_page_refuses_to_delete_a_run_being_written(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    results = tmp_path / "results"
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results)
    dataset = write_dataset(tmp_path)
    writer = paced_writer(results, "live", dataset)
    try:
        app = AppTest.from_file(str(ROOT / "pages" / "2_Results.py"), default_timeout=60).run()
        app.selectbox(key="manage_run").set_value("live").run()
        app.checkbox(key="confirm_delete").check().run()
        app.button(key="delete").click().run()
        assert not app.exception, app.exception
        assert any("still being written" in error.value for error in app.error), [e.value for e in app.error]
        assert (results / "live" / "summary.json").is_file()
    finally:
        writer.wait(timeout=120) if writer.poll() is None else None
    assert summary_of(results / "live")["status"] == "done"


# -- 3. hostile /metrics ---------------------------------------------------------------------------
HOSTILE_VALUES = ["NaN", "+Inf", "-Inf", "-1e308", "1e308", "-1", "1e300", str(2**64), "9007199254740993", "1.5e19"]
METRIC_LINES = [
    ("gauge", "vllm:num_requests_running"),
    ("gauge", "vllm:num_requests_waiting"),
    ("gauge", "vllm:kv_cache_usage_perc"),
    ("counter", "vllm:num_preemptions_total"),
    ("histogram", "vllm:inter_token_latency_seconds_sum"),
    ("histogram", "vllm:inter_token_latency_seconds_count"),
    ("histogram", "vllm:time_to_first_token_seconds_sum"),
    ("histogram", "vllm:time_to_first_token_seconds_count"),
]


def hostile_page(rng) -> str:
    """A vLLM-named page whose samples are drawn from :data:`HOSTILE_VALUES` and sane values."""
    lines = []
    for kind, name in METRIC_LINES:
        base = name.removesuffix("_sum").removesuffix("_count").removesuffix("_total")
        lines.append(f"# TYPE {base} {kind}")
        value = rng.choice(HOSTILE_VALUES + ["3", "0.5"])
        lines.append(f'{name}{{model_name="m"}} {value}')
    blocks = rng.choice(["16", str(2**62), "-4", "1e30", "x"])
    lines.append("# TYPE vllm:cache_config_info gauge")
    lines.append(f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{blocks}"}} 1')
    return "\n".join(lines) + "\n"


def test_parse_metrics_keeps_only_finite_in_range_values_and_counts_the_rest():
    from runners.engines.telemetry import MAX_REQUESTS, MAX_SAMPLE_VALUE, parse_metrics

    failures = Failures("hostile /metrics pages")
    for index in range(count(300)):
        rng = case_rng("metrics-page", index)
        page = hostile_page(rng)
        snapshot = parse_metrics(page)
        problems = []
        for field in ("preemptions", "ttft_sum_s", "ttft_count", "itl_sum_s", "itl_count", "kv_capacity_tokens"):
            value = getattr(snapshot, field)
            if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_SAMPLE_VALUE):
                problems.append((f"{field} out of range", repr(value)))
        for field in ("running", "waiting"):
            value = getattr(snapshot, field)
            if value is not None and not 0 <= value <= MAX_REQUESTS:
                problems.append((f"{field} out of range", repr(value)))
        if snapshot.kv_usage is not None and not 0 <= snapshot.kv_usage <= 1:
            problems.append(("kv_usage out of 0-1", repr(snapshot.kv_usage)))
        bad = sum(
            1
            for line in page.splitlines()
            if not line.startswith("#") and line.rsplit(" ", 1)[1] not in ("3", "0.5", "1", "16")
        )
        if bad and not snapshot.dropped:
            problems.append(("hostile samples present but none counted as dropped", page[:200]))
        failures.case()
        failures.extend(problems, page)
    assert not failures, failures.message()


def test_a_hostile_metrics_page_never_costs_the_run_its_rows(tmp_path):
    from runners.engines.telemetry import METRICS_MAX_BYTES
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config
    from runners.store.result_store import load_run
    from tests.fakes.fault_server import FaultServer
    from tests.integration.test_client_faults import config_for

    pages = {
        "non-finite and huge": 'vllm:num_requests_running{m="a"} NaN\nvllm:num_requests_waiting{m="a"} -1e308\n'
        'vllm:kv_cache_usage_perc{m="a"} +Inf\nvllm:num_preemptions_total{m="a"} 1e300\n',
        "larger than the cap": b"vllm:num_requests_running 1\n" + b"x_filler 1\n" * (METRICS_MAX_BYTES // 11 + 10),
    }
    for number, (label, page) in enumerate(pages.items()):
        server = FaultServer(metrics_body=page).start()
        try:
            started = time.monotonic()
            run_id = f"h{number}"
            outcome = execute_run(parse_config(config_for(server, run_id, requests=6)), tmp_path)
            elapsed = time.monotonic() - started
        finally:
            server.stop()
        run = load_run(tmp_path, run_id)
        assert outcome.status == "done" and run.summary.status == "done", (label, outcome.error)
        assert len(run.requests) == 6 and (tmp_path / run_id / "timeseries.parquet").is_file(), label
        telemetry = run.summary.telemetry
        assert telemetry is not None and telemetry.scrapes and elapsed < 60, (label, telemetry, elapsed)
        if label == "larger than the cap":
            assert telemetry.too_large == telemetry.scrapes, telemetry
        else:
            assert telemetry.samples_dropped is not None and telemetry.samples_dropped >= 4 * telemetry.scrapes, (
                telemetry
            )
            assert run.timeseries["running"].isna().all() and run.timeseries["kv_usage"].isna().all()


def test_a_row_no_column_can_hold_is_left_out_and_counted_and_the_summary_written(tmp_path):
    from runners.store.result_store import TIMESERIES_COLUMNS, RunWriter, load_run

    writer = RunWriter(tmp_path, "w", {"config": {}}, {"engine": "sim", "scheduler": "fcfs"})
    good = dict.fromkeys(TIMESERIES_COLUMNS) | {"t_s": 0.5, "instance": 0, "running": 3}
    writer.add_sample(good)
    writer.add_sample(good | {"t_s": 0.75, "running": -(2**70)})
    writer.add_sample(good | {"t_s": 1.0, "running": 4})
    writer.close("done", {"requests": 0})
    run = load_run(tmp_path, "w")
    assert run.summary.status == "done" and run.summary.rows_rejected == {"timeseries": 1}
    assert list(run.timeseries["running"]) == [3, 4] and "out of range" in run.summary.error


# -- 4. deleting a study, all or nothing -----------------------------------------------------------
def _study(results: Path, dataset: Path, study_id: str) -> list[str]:
    from runners.app.cli import main

    argv = ["run", "--engine", "sim", "--requests", "3", "--scheduler", "fcfs,slo-sa", "--seeds", "2"]
    argv += ["--run-id", study_id, "--out", str(results), "--quiet", "--workers", "1", *tiny_workload_args(dataset)]
    assert main(argv) == 0
    record = json.loads((results / study_id / "study.json").read_text())
    return [run["run_id"] for run in record["runs"]]


def test_a_study_is_deleted_all_or_nothing(sandbox, tmp_path):
    failures = Failures("delete a study with one member that cannot be deleted")
    dataset = write_dataset(tmp_path)
    template = tmp_path / "template"
    members = _study(template, dataset, "st")
    breakers = {
        "symlink": lambda folder, results: (
            os.rename(folder, results / "moved"),
            folder.symlink_to(results / "moved"),
        ),
        "a live writer": lambda folder, results: (folder / "summary.json").write_text(
            json.dumps({**summary_of(folder), "status": "running", "writer": _this_writer()})
        ),
        "a file, not a folder": lambda folder, results: (
            __import__("shutil").rmtree(folder),
            folder.write_text("x"),
        ),
    }
    import shutil

    for label, breaker in breakers.items():
        for position in (len(members) - 1, len(members) // 2):
            results = tmp_path / f"{label.replace(' ', '-')}-{position}"
            shutil.copytree(template, results, symlinks=True)
            breaker(results / members[position], results)
            before = tree_digest(results)
            for via in ("cli", "function"):
                if via == "cli":
                    outcome = sandbox.cli(["delete", "st", "--out", results], timeout_s=TIMEOUT_S)
                    problems = outcome_problems(outcome)
                    if outcome.rc != 2:
                        problems.append(("not refused", shorten(outcome.out or outcome.err, 200)))
                else:
                    outcome = sandbox.call("runners.study.runner:delete_study", str(results), "st", timeout_s=TIMEOUT_S)
                    problems = (
                        []
                        if outcome.raised and outcome.raised["type"] == "SchedlabError"
                        else [("delete_study did not raise SchedlabError", str(outcome.raised or outcome.value)[:200])]
                    )
                changes = digest_changes(before, tree_digest(results))
                if changes:
                    problems.append(("something was deleted before the refusal", "; ".join(changes[:3])))
                failures.case()
                failures.extend(problems, f"{via}: member {position} is {label}")
    assert not failures, failures.message()


def _this_writer() -> dict:
    from runners.store.result_store import writer_identity

    return writer_identity()


def test_the_results_page_deletes_a_study_all_or_nothing(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    results = tmp_path / "results"
    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results)
    members = _study(results, write_dataset(tmp_path), "st")
    os.rename(results / members[-1], tmp_path / "moved")
    (results / members[-1]).symlink_to(tmp_path / "moved")
    before = tree_digest(results)
    app = AppTest.from_file(str(ROOT / "pages" / "2_Results.py"), default_timeout=60).run()
    app.selectbox(key="manage_study").set_value("st").run()
    app.checkbox(key="confirm_delete_study").check().run()
    app.button(key="delete_study").click().run()
    assert not app.exception, app.exception
    assert any("nothing deleted" in error.value for error in app.error), [e.value for e in app.error]
    assert digest_changes(before, tree_digest(results)) == []


# -- 5. server-echoed secrets -------------------------------------------------------------------------
KEYS = ["sk-fuzz-0123456789abcdef", "plainkey-7d2f9c41e8", "Zq9xv3T7mK2pL8wN"]


def test_no_written_file_holds_the_api_key_whatever_the_server_echoes(tmp_path, monkeypatch):
    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config
    from tests.fakes.fault_server import FaultServer
    from tests.integration.test_client_faults import config_for

    failures = Failures("servers that echo the Authorization header")
    servers = {
        "model id": FaultServer(models_echo_auth=True).start(),
        "model id, errors too": FaultServer(models_echo_auth=True, behaviour="echo-auth").start(),
    }
    try:
        for number, key in enumerate(KEYS):
            monkeypatch.setenv("SCHEDLAB_FUZZ_KEY", key)
            for label, server in servers.items():
                run_id = f"k{number}-{len(label)}"
                execute_run(
                    parse_config(config_for(server, run_id, requests=2, api_key_env="SCHEDLAB_FUZZ_KEY")), tmp_path
                )
                leaked = [
                    path.name
                    for path in (tmp_path / run_id).rglob("*")
                    if path.is_file() and key.encode() in path.read_bytes()
                ]
                failures.case()
                if leaked:
                    failures.add("the API key was written", f"{label}, key {key[:6]}...", ", ".join(leaked))
    finally:
        for server in servers.values():
            server.stop()
    assert not failures, failures.message()


# -- 6. killed studies, resumed ------------------------------------------------------------------------
def test_a_killed_study_reads_interrupted_and_resumes_to_the_same_statistics(tmp_path):
    from runners.study.runner import read_study

    results = tmp_path / "results"
    dataset = write_dataset(tmp_path)
    study_args = ["--engine", "sim", "--requests", "6", "--scheduler", "fcfs,slo-sa", "--seeds", "3", "--quiet"]
    study_args += ["--workers", "1", *tiny_workload_args(dataset)]
    process = cli_process("run", *study_args, "--set", "engine.pace=3", "--run-id", "k", "--out", results)
    first = results / "k-fcfs-s0"
    assert wait_for(lambda: summary_of(first).get("status") == "done", 120), "the first member never finished"
    assert wait_for(lambda: summary_of(results / "k-fcfs-s1").get("status") == "running", 60)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    kept_started = summary_of(first)["started_at_unix_s"]

    record = read_study(results / "k")
    statuses = {run.run_id: run.status for run in record.runs}
    assert record.status == "interrupted" and "--resume k" in str(getattr(record, "error", None))
    assert statuses["k-fcfs-s0"] == "done" and statuses["k-fcfs-s1"] == "interrupted"
    assert statuses["k-slo-sa-s2"] == "pending"
    shown = runners_cli("show", "k", "--out", results)
    assert "(interrupted)" in shown.stdout.splitlines()[0] and "interrupted" in shown.stdout
    again = runners_cli("run", *study_args, "--run-id", "k", "--out", results)
    assert again.returncode == 2 and "--resume k" in again.stderr

    resumed = runners_cli("run", "--resume", "k", "--out", results, "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert "1 kept" in resumed.stdout.splitlines()[0] or "kept" in resumed.stdout.splitlines()[0]
    record = read_study(results / "k")
    assert record.status == "done" and record.resumed_at is not None and len(record.resumed_at) == 1
    assert [run.status for run in record.runs] == ["done"] * 6
    assert summary_of(first)["started_at_unix_s"] == kept_started  # the finished member was kept, not rerun
    fresh = runners_cli("run", *study_args, "--run-id", "f", "--out", results)
    assert fresh.returncode == 0, fresh.stderr
    assert read_study(results / "f").statistics == record.statistics  # same plan, same seeds, same numbers
    refused = runners_cli("run", "--resume", "k", "--out", results)
    assert refused.returncode == 2 and "nothing to resume" in refused.stderr
