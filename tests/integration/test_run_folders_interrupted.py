"""A run whose writer died is `interrupted`, with its rows so far (issue 9, item 8).

The writer records its pid, hostname, process start time and boot id in summary.json while the
run goes; list, show and the live view report a `running` run whose writer no longer exists on
this machine as `interrupted` (computed when read; the file is not rewritten), and such a run can
be renamed and deleted.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.app.cli import main
from runners.store import result_store
from runners.views.live import read_live

ROOT = Path(__file__).resolve().parents[2]

# A writer that flushes 3 of 10 planned rows, then dies by SIGKILL (no close, no final summary).
KILLED_WRITER = """
import os, signal, sys
from runners.store.result_store import RunWriter
writer = RunWriter(sys.argv[1], "killed", {"config": {"run_id": "killed"}},
                   {"engine": "sim", "scheduler": "fcfs", "started_at": "2026-03-01T00:00:00Z"})
for i in range(3):
    writer.add_request({"request_id": f"r{i}", "task": "chat", "arrival_s": float(i), "output_tokens": 4})
writer.flush({"requests": 3, "completed": 3, "requests_total": 10})
os.kill(os.getpid(), signal.SIGKILL)
"""


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def killed(results_dir: Path) -> Path:
    completed = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, str(results_dir)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == -9, completed.stderr
    return results_dir / "killed"


def test_a_killed_run_is_interrupted_with_its_rows_so_far(killed, results_dir, capsys):
    saved = json.loads((killed / "summary.json").read_text())
    assert saved["status"] == "running" and saved["writer"]["hostname"] == socket.gethostname()
    assert isinstance(saved["writer"]["pid"], int) and saved["writer"]["pid"] != os.getpid()

    record = result_store.list_runs(results_dir)[0]
    assert record.status == "interrupted" and record.rows == 3 and "has ended" in record.error
    code, out, _ = cli(["list", "--out", str(results_dir)], capsys)
    row = next(line for line in out.splitlines() if line.startswith("killed"))
    assert code == 0 and "interrupted" in row and " 3/10 " in row  # rows so far, of the planned 10
    code, out, _ = cli(["show", "killed", "--out", str(results_dir)], capsys)
    assert code == 0 and "run killed (interrupted)" in out and "3 request rows" in out
    snapshot = read_live(killed)
    assert snapshot.status == "interrupted" and snapshot.done == 3 and snapshot.total == 10
    assert snapshot.eta_s is None
    assert json.loads((killed / "summary.json").read_text()) == saved  # computed when read, never written

    renamed = result_store.rename_run(results_dir, "killed", "killed-kept")
    assert len(result_store.load_run(results_dir, "killed-kept").requests) == 3
    assert json.loads((renamed / "summary.json").read_text())["status"] == "running"  # as written
    assert cli(["delete", "killed-kept", "--out", str(results_dir)], capsys)[0] == 0
    assert not renamed.exists()


def test_a_live_writer_is_running_and_cannot_be_renamed(results_dir):
    writer = result_store.RunWriter(results_dir, "alive", {}, {"started_at": "2026-03-01T00:00:00Z"})
    writer.add_request({"request_id": "r0", "task": "chat", "arrival_s": 0.0})
    writer.flush({"requests_total": 4})
    record = result_store.list_runs(results_dir)[0]
    assert record.status == "running" and record.rows == 1
    with pytest.raises(result_store.SchedlabError, match="still running"):
        result_store.rename_run(results_dir, "alive", "other")
    writer.close("done", {})
    assert result_store.list_runs(results_dir)[0].status == "done"


def write_running(results_dir: Path, name: str, writer: dict | None) -> None:
    folder = results_dir / name
    folder.mkdir()
    summary = {"run_id": name, "status": "running", "started_at": "2026-03-01T00:00:00Z"}
    if writer is not None:
        summary["writer"] = writer
    (folder / "summary.json").write_text(json.dumps(summary))


def test_which_writers_count_as_gone(results_dir):
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # finished, not yet reaped
    deadline = time.monotonic() + 30
    while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    host = socket.gethostname()
    me = result_store.writer_identity()
    write_running(results_dir, "exited", {"pid": exited.pid, "hostname": host})
    write_running(results_dir, "zombie", {"pid": zombie.pid, "hostname": host})
    write_running(results_dir, "reused-pid", {**me, "start_ticks": (me["start_ticks"] or 0) + 1})
    write_running(results_dir, "rebooted", {**me, "boot_id": "another-boot"})
    write_running(results_dir, "me", me)
    write_running(results_dir, "old-summary", None)  # before writers were recorded: left as it is
    write_running(results_dir, "other-host", {"pid": exited.pid, "hostname": host + "-elsewhere"})
    statuses = {run.run_id: run.status for run in result_store.list_runs(results_dir)}
    zombie.wait()
    expected = {
        "exited": "interrupted",
        "zombie": "interrupted",
        "rebooted": "interrupted",
        "me": "running",
        "old-summary": "running",
        "other-host": "running",
    }
    if me["start_ticks"] is not None:
        expected["reused-pid"] = "interrupted"
    assert {name: statuses[name] for name in expected} == expected
