"""A user's own in-engine scheduler, never named in schedlab's code, runs inside the real CPU vLLM
(issue 30): examples/edf_policy.py and its engine half examples/edf_engine.py are copied to a
folder outside the repository and run by ``python -m runners run --scheduler-path ... --scheduler
engine-edf``, as a user would. Needs ``SCHEDLAB_VLLM_PYTHON`` (skipped without), under the CPU
lock like every real-vLLM test."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.real_vllm import needs_vllm, vllm_run_config

ROOT = Path(__file__).resolve().parents[2]


@needs_vllm
def test_a_users_engine_half_runs_inside_the_real_vllm(tiny_model, tmp_path):
    mine = tmp_path / "my_policies"
    mine.mkdir()
    for name in ("edf_policy.py", "edf_engine.py"):
        shutil.copy(ROOT / "examples" / name, mine / name)
    config = vllm_run_config(
        tiny_model,
        "engine-edf",
        "engine-edf",
        {"max_running": 3},
        {"SCHEDLAB_ENGINE_DECISION_INTERVAL_S": "0"},
        requests=12,
    )
    (tmp_path / "run.json").write_text(json.dumps(config))
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SCHEDLAB_SCHEDULER_PATH", None)
    done = subprocess.run(
        [sys.executable, "-m", "runners", "run", "--config", str(tmp_path / "run.json"), "--out", str(results)]
        + ["--scheduler-path", str(mine / "edf_policy.py"), "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    folder = results / "engine-edf"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "done" and summary["completed"] == 12, summary.get("error")
    # the server was started with the user's class, and imported it from the user's folder
    instance = json.loads((folder / "engine.json").read_text())["instances"][0]
    command = instance["command"]
    assert command[command.index("--scheduler-cls") + 1] == "edf_engine.EDFScheduler"
    log = (folder / "server-0.log").read_text(errors="replace")
    assert "schedlab in-engine scheduler EDFScheduler (vLLM 0.32" in log
    params = json.loads((folder / "engine-scheduler-params.json").read_text())
    assert params == {"max_running": 3}  # the engine model's fields only
    decisions = [json.loads(line) for line in (folder / "engine-decisions-0.jsonl").read_text().splitlines()]
    # the user's running limit was applied at every recorded step, and it bound: never more than
    # 3 running although 12 arrived at once and the engine has 64 slots
    assert decisions and all(d["limit"] == 3 and d["running"] <= 3 for d in decisions)
    assert max(d["running"] for d in decisions) == 3
    assert any(d["held_back"] > 0 for d in decisions)
