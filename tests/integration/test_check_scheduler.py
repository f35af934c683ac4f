"""``python -m runners check-scheduler``: every built-in scheduler passes the conformance check,
each planted fault is caught with its contract named (exit 1), bad input is one line (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.app.cli import main
from runners.registry import usable_schedulers
from runners.run import conformance

ROOT = Path(__file__).resolve().parents[2]
PLANTED = ROOT / "tests" / "data" / "planted_policies"


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check-scheduler", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _row(out: str, scheduler: str, contract: str) -> str:
    """The table line of ``scheduler``'s ``contract`` (e.g. '3 progress')."""
    lines = [line for line in out.splitlines() if line.startswith(scheduler + " ") and contract in line]
    assert len(lines) == 1, out
    return lines[0]


@pytest.mark.parametrize("name", usable_schedulers())
def test_every_built_in_scheduler_passes(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conformance, "_vllm_pythons", lambda: [])  # the vLLM import: its own test below
    code, out, err = _check(capsys, name)
    assert code == 0, out + err
    assert "every contract holds" in out
    assert " FAIL " not in out
    assert "40/40 requests done" in _row(out, name, "3 progress")
    assert "the same" in _row(out, name, "4 deterministic")
    assert "budget 40 ms at p99" in _row(out, name, "7 decide time")


def test_claimed_limits_are_checked_with_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _check(capsys, "scls")
    assert code == 0
    row = _row(out, "scls", "2 slots and KV limits")
    assert "claims kv, slots: peak" in row and "/8 slots" in row and "/2048 tokens" in row
    code, out, _ = _check(capsys, "fcfs")
    assert " n/a " in _row(out, "fcfs", "2 slots and KV limits")


@pytest.mark.parametrize(
    ("file", "contract", "detail"),
    [
        ("double_dispatch.py", "1 dispatch validity", "twice: in flight on instance"),
        ("kv_overadmit.py", "2 slots and KV limits", "> kv_capacity_tokens 2048"),
        ("livelock.py", "3 progress (no livelock)", "dispatched and cancelled 21 times"),
        ("clock_read.py", "6 no clock or I/O", "time.monotonic() at clock_read.py:12"),
        ("slow_decide.py", "7 decide time", "over the budget at 10, 100, 1000 waiting"),
        ("early_dispatch.py", "1 dispatch validity", "dispatched r0001 before it arrived"),
        ("holds_forever.py", "3 progress (no livelock)", "40 requests waiting, every instance idle, no dispatch in"),
        ("retry_failed.py", "5 failures and cancellation", "again after it failed"),
        ("refuses.py", "7 decide time", "with 10 waiting the policy raised PolicyError: too many waiting"),
    ],
)
def test_each_planted_fault_is_caught(
    file: str, contract: str, detail: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _check(capsys, str(PLANTED / file))
    assert code == 1, out
    row = next(line for line in out.splitlines() if contract in line)
    assert " FAIL " in row and detail in row, row
    assert out.splitlines()[-1].startswith("failed: planted-") and contract in out.splitlines()[-1]


def test_a_slow_decide_passes_a_budget_above_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _check(capsys, str(PLANTED / "slow_decide.py"), "--budget-ms", "200")
    assert code == 0, out
    assert "budget 200 ms at p99" in out


@pytest.mark.parametrize(
    ("file", "message"),
    [
        ("no_policy.py", "no_policy.py: defines no SchedulerPolicy subclass with a name"),
        ("syntax_error.py", "syntax_error.py: line 4: invalid syntax"),
        ("missing.py", "missing.py: no such file"),
    ],
)
def test_a_file_without_a_policy_is_one_line_exit_2(
    file: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # written here, not kept in the tree: a file that does not parse would stop the project's lint
    (tmp_path / "syntax_error.py").write_text('"""A broken policy."""\n\n\nclass Broken(:\n    pass\n')
    folder = tmp_path if file == "syntax_error.py" else PLANTED
    code, out, err = _check(capsys, str(folder / file))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ('{"max_in_flight": 0}', "scheduler.params.max_in_flight"),
        ("[1, 2]", "scheduler.params: expected a JSON object, got list"),
        ("{nope", "scheduler.params: not JSON"),
    ],
)
def test_bad_params_are_one_line_exit_2(params: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _check(capsys, "fcfs", "--params", params)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


def test_the_example_client_policy_passes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = tmp_path / "check.json"
    code, out, _ = _check(capsys, str(ROOT / "examples" / "edf_policy.py"), "--scheduler", "edf", "--json", str(report))
    assert code == 0, out
    assert '"ok": true' in report.read_text(encoding="utf-8")


def test_the_example_file_passes_both_halves(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _check(capsys, str(ROOT / "examples" / "edf_policy.py"))
    assert code == 0, out
    row = _row(out, "engine-edf", "8 in-engine half")
    assert "edf_engine found at" in row and "parameters validate as EngineEDFParams" in row, row
    assert "twin edf passes 1-7" in row, row


def test_in_engine_half_imports_the_engine_class_in_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _check(capsys, "engine-dynamic-mem")
    assert code == 0, out
    row = _row(out, "engine-dynamic-mem", "8 in-engine half")
    assert "runners.schedulers.vllm.dynamic_mem found at" in row
    assert "parameters validate as EngineDynamicMemoryParams" in row and "twin dynamic-mem passes 1-7" in row
    if conformance._vllm_pythons():
        assert "imports it, a vLLM Scheduler subclass" in row
    else:
        assert "vLLM import NOT checked (no vLLM Python" in row


def test_a_decide_that_never_returns_is_stopped_by_the_wall_limit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conformance, "CASE_WALL_S", 0.5)
    code, out, _ = _check(capsys, str(PLANTED / "hangs.py"))
    assert code == 1
    assert "still running after 0.5 s of wall time" in _row(out, "planted-hangs", "3 progress")
    assert "one decide with 10 waiting still running after 0.5 s" in _row(out, "planted-hangs", "7 decide time")
    assert " n/a " in _row(out, "planted-hangs", "1 dispatch validity")


def test_one_scheduler_of_a_file_that_is_not_there_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _check(capsys, str(ROOT / "examples" / "edf_policy.py"), "--scheduler", "nope")
    assert code == 2 and out == ""
    assert "no scheduler named 'nope'; it defines: edf, engine-edf" in err


def test_an_unknown_name_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _check(capsys, "no-such-scheduler")
    assert code == 2
    assert "no-such-scheduler: neither a scheduler name" in err and err.count("\n") == 1


def test_a_decide_slow_only_in_its_tail_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Noise (another process) lengthens the tail first: a size over the budget at p99 but not at
    the median is measured again, the lowest round's p99 counts and every round is named; a decide
    slow at the median is not measured again."""
    rounds = iter(
        [
            [conformance.DecideTiming(10, 9, 5.0, 50.0)],
            [conformance.DecideTiming(10, 9, 5.0, 45.0)],
            [conformance.DecideTiming(10, 9, 5.0, 8.0)],
        ]
    )
    monkeypatch.setattr(conformance, "DECIDE_SIZES", ((10, 9),))
    monkeypatch.setattr(conformance, "decide_timings", lambda make, seed, sizes: next(rounds))
    verdict, detail = conformance._decide_row(lambda: None, 0, 40.0)  # type: ignore[arg-type,return-value]
    assert verdict == "pass" and "10: 5.00/8.00" in detail
    assert "10 waiting measured 3 times (p99 50.00/45.00/8.00 ms), the lowest counts" in detail
    slow = iter([[conformance.DecideTiming(10, 9, 50.0, 55.0)], []])
    monkeypatch.setattr(conformance, "decide_timings", lambda make, seed, sizes: next(slow))
    verdict, detail = conformance._decide_row(lambda: None, 0, 40.0)  # type: ignore[arg-type,return-value]
    assert verdict == "FAIL" and "over the budget at 10 waiting" in detail and "measured" not in detail


def test_time_another_process_holds_the_cpu_is_left_out_of_decide_time() -> None:
    """Decide time leaves out the run-queue wait: on one core shared with a busy process, 0.1 s of
    computation takes about 0.2 s of wall time, and wall less the wait is the 0.1 s again."""
    if not conformance.SCHEDSTAT.exists():
        pytest.skip("the kernel reports no per-thread scheduler statistics")
    core = min(os.sched_getaffinity(0))
    allowed = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    os.sched_setaffinity(0, {core})
    try:
        time.sleep(0.3)  # the hog is spinning on the core
        queued, began, cpu = conformance.run_queue_wait_s(), time.perf_counter(), time.thread_time()
        while time.thread_time() - cpu < 0.1:
            pass
        wall = time.perf_counter() - began
        waited = conformance.run_queue_wait_s() - queued
    finally:
        os.sched_setaffinity(0, allowed)
        hog.kill()
        hog.wait()
    assert wall > 0.15, wall  # the hog took about half the core
    assert 0.1 <= wall - waited <= 0.13, (wall, waited)


def test_without_the_kernels_scheduler_statistics_decide_time_is_wall_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where /proc/thread-self/schedstat is missing or unreadable, no wait is left out (0.0)."""
    monkeypatch.setattr(conformance, "SCHEDSTAT", tmp_path / "missing")
    assert conformance.run_queue_wait_s() == 0.0
    (tmp_path / "garbled").write_text("not numbers\n")
    monkeypatch.setattr(conformance, "SCHEDSTAT", tmp_path / "garbled")
    assert conformance.run_queue_wait_s() == 0.0
    (tmp_path / "real").write_text("362184678 105918000 18\n")
    monkeypatch.setattr(conformance, "SCHEDSTAT", tmp_path / "real")
    assert conformance.run_queue_wait_s() == pytest.approx(0.105918)
