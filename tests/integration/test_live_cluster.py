"""Issue 32: the live view of a study spread over a cluster.

A member running as a Ray task on another node writes its run folder there; the head sees only
what study.json says of it (its node, hardware, start and last count of ended requests). The
Jobs panel still lists it as running, on its node, with its progress and ETA, and the study's
ETA counts its share (runners.views.live.job_run_states, running_member_rows, job_progress)."""

from __future__ import annotations

from runners.run.config import parse_config
from runners.store.models import StudyRun
from runners.timestamps import utc_stamp
from runners.views.live import job_progress, job_run_rows, job_run_states, running_member_rows

NOW = 1_800_000_000.0  # a fixed clock (Unix seconds) so the ETAs are exact


def member(run_id: str, scheduler: str, seed: int):
    return parse_config(
        {
            "engine": {"kind": "sim", "max_num_seqs": 4, "pace": 1.0},
            "workload": {"requests": 100, "seed": seed, "arrival": {"process": "poisson", "rate": 2.0}},
            "scheduler": {"name": scheduler},
            "run_id": run_id,
        }
    )


def test_members_running_on_other_nodes_show_their_node_progress_and_eta(tmp_path):
    """Two members run on two nodes (no folders here), one ended, one waits. By hand: the member
    on gpu-a has ended 40 of 100 requests in 60 s, so its ETA is measured (40 >= 20, the first
    10 % or 20 requests) at 60 * 60 / 40 = 90 s; the one on gpu-b ended 10 in 30 s, fewer than
    20, so its ETA is the rest of its plan (100 requests at 2 req/s, paced at 1x: more than 30 s).
    The job: 1 of 4 ended, 0.4 + 0.1 of the running ones done."""
    runs = [member("m0", "fcfs", 0), member("m1", "static", 0), member("m2", "fcfs", 1), member("m3", "static", 1)]
    stamp = utc_stamp
    statuses = {
        "m0": StudyRun(run_id="m0", status="done", node="gpu-a", hardware="1x NVIDIA H100 (driver 550.54)"),
        "m1": StudyRun(
            run_id="m1",
            status="running",
            node="gpu-a",
            hardware=None,
            started_at=stamp(NOW - 60),
            requests_done=40,
            requests_total=100,
        ),
        "m2": StudyRun(
            run_id="m2",
            status="running",
            node="gpu-b",
            started_at=stamp(NOW - 30),
            requests_done=10,
            requests_total=100,
        ),
        "m3": StudyRun(run_id="m3", status="pending"),
    }
    states = job_run_states(tmp_path, runs, statuses)
    assert [states[run.run_id].status for run in runs] == ["done", "running", "running", "queued"]

    rows = running_member_rows(runs, states, now=NOW)
    assert [(row["run"], row["node"], row["requests"], row["running (s)"]) for row in rows] == [
        ("m1", "gpu-a", "40 of 100", 60),
        ("m2", "gpu-b", "10 of 100", 30),
    ]
    assert rows[0]["ETA"] == "about 90 s left (measured)"
    assert "left" in rows[1]["ETA"] and "(measured)" not in rows[1]["ETA"]

    table = job_run_rows(tmp_path, runs, statuses, states=states)
    assert [row["node"] for row in table] == ["gpu-a", "gpu-a", "gpu-b", None]

    progress = job_progress(runs, states, workers=2, now=NOW)
    assert progress.finished == 1 and abs(progress.current - 0.5) < 1e-12
    assert abs(progress.fraction() - 1.5 / 4) < 1e-12


def test_a_member_reported_running_but_not_yet_placed_is_starting(tmp_path):
    """A member study.json calls running, placed on a node but with no progress reported and no
    folder here yet (its run is being prepared): starting, and not in the running table."""
    runs = [member("m0", "fcfs", 0)]
    states = job_run_states(tmp_path, runs, {"m0": StudyRun(run_id="m0", status="running", node="gpu-a")})
    assert states["m0"].status == "starting"
    assert running_member_rows(runs, states, now=NOW) == []
