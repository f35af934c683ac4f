"""Issue 43 item 6: a study says when real-engine members ran at the same time on one machine
without accelerators of their own (their figures include each other's load), and records it."""

from __future__ import annotations

from runners.store.models import StudyRun
from runners.study.runner import side_by_side_note


def member(run_id: str, node: str | None, start: str, end: str, dedicated: bool | None = None) -> StudyRun:
    return StudyRun(
        run_id=run_id,
        scheduler="fcfs",
        seed=1,
        status="done",
        node=node,
        started_at=f"2026-12-07T10:{start}Z",
        finished_at=f"2026-12-07T10:{end}Z",
        dedicated=dedicated,
    )


def test_two_servers_of_one_machine_at_the_same_time_are_side_by_side():
    runs = [
        member("a", "http://127.0.0.1:8001", "00:00", "00:30"),
        member("b", "http://127.0.0.1:8002", "00:10", "00:40"),
        member("c", "http://127.0.0.1:8001", "00:40", "01:10"),  # starts as b ends: not at the same time
    ]
    note = side_by_side_note(runs, {"a", "b", "c"})
    assert note is not None and note.startswith("2 of 3 real-engine members ran at the same time")
    assert "(127.0.0.1)" in note


def test_serial_members_dedicated_gpus_other_machines_and_the_simulator_say_nothing():
    serial = [member("a", "gpu-1", "00:00", "00:30"), member("b", "gpu-1", "00:30", "01:00")]
    dedicated = [member("a", "gpu-1", "00:00", "00:30", True), member("b", "gpu-1", "00:10", "00:40", True)]
    machines = [member("a", "gpu-1", "00:00", "00:30"), member("b", "gpu-2", "00:10", "00:40")]
    simulated = [member("a", None, "00:00", "00:30"), member("b", None, "00:10", "00:40")]
    for runs in (serial, dedicated, machines, simulated):
        assert side_by_side_note(runs, {"a", "b"}) is None
    # simulated members placed side by side on one machine: virtual time, no note
    placed = [member("a", "vm", "00:00", "00:30"), member("b", "vm", "00:10", "00:40")]
    assert side_by_side_note(placed, set()) is None
    # one with a GPU of its own beside one without still shares the machine's CPU
    shared = [member("a", "gpu-1", "00:00", "00:30", True), member("b", "gpu-1", "00:10", "00:40")]
    assert side_by_side_note(shared, {"a", "b"})
