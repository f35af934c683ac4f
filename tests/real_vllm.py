"""What the tests against the real CPU vLLM share: its Python (``SCHEDLAB_VLLM_PYTHON``; .ci/run
sets it, the tests are skipped without it) and a run config that launches it on the tiny model
(``tests/conftest.py`` builds the model once per session: the ``tiny_model`` fixture). The engine
config and the model build are the benchmarks' (bench/vllm_cpu_common.py), one source for both."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bench.vllm_cpu_common import SERVER_ENV, vllm_engine

VLLM_PYTHON = os.environ.get("SCHEDLAB_VLLM_PYTHON")
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON, reason="set SCHEDLAB_VLLM_PYTHON to a Python with vllm-cpu")


def vllm_run_config(
    model: Path,
    run_id: str,
    scheduler: str,
    params: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    requests: int = 20,
    arrival: dict[str, Any] | None = None,
    **engine: Any,
) -> dict[str, Any]:
    """A run as a user starts it: schedlab launches the CPU vLLM on the tiny model
    (:func:`bench.vllm_cpu_common.vllm_engine`, here with a 2,048-token context, 64 slots, vLLM's
    own batched-token budget and 24 KV blocks of 128 tokens unless ``engine`` says otherwise) and
    sends ``requests`` requests (prompt + reply <= 640 tokens, seed 1; ``arrival``, default all at
    once) with ``scheduler``. ``env``: extra server environment (e.g. the in-engine schedulers'
    test hooks)."""
    settings = {"max_model_len": 2048, "max_num_batched_tokens": None, "num_gpu_blocks_override": 24, **engine}
    return {
        "run_id": run_id,
        "engine": vllm_engine(model, **settings, env={**SERVER_ENV, **(env or {})}),
        "workload": {
            "requests": requests,
            "seed": 1,
            "tokenizer": str(model),
            "arrival": arrival or {"process": "all-at-once"},
            "filters": {"max_total_tokens": 640},
        },
        "scheduler": {"name": scheduler, "params": dict(params or {})},
    }


def run_to_completion(config: dict[str, Any], results: Path, scheduler_cls: str) -> tuple[Any, list[dict], str]:
    """Run ``config`` (an in-engine scheduler on the CPU vLLM) and check what every such run must
    show: the server was started with ``--scheduler-cls scheduler_cls``, the run is done and every
    request completed at its target length. Returns (the loaded run, its instance 0 decisions,
    its server log's text)."""
    import json

    from runners.run.benchmark import execute_run
    from runners.run.config import parse_config
    from runners.store.result_store import load_run

    execute_run(parse_config(config), results)
    run = load_run(results, config["run_id"])
    command = json.loads((run.folder / "engine.json").read_text())["instances"][0]["command"]
    assert command[command.index("--scheduler-cls") + 1] == scheduler_cls
    assert run.summary.status == "done", run.summary.error
    requests = run.requests
    assert len(requests) == config["workload"]["requests"] and requests["error"].isna().all()
    assert (requests["output_tokens"] == requests["target_output_tokens"]).all()
    decisions = [json.loads(line) for line in (run.folder / "engine-decisions-0.jsonl").read_text().splitlines()]
    return run, decisions, (run.folder / "server-0.log").read_text(errors="replace")


#: The wake-up probe's loop: sleeps of 2 ms until its stdin closes, then prints how late each woke
#: (seconds: p90 and p99) as JSON.
_PROBE = """
import json, sys, threading, time
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
late = []
while not done.is_set():
    began = time.perf_counter()
    time.sleep(0.002)
    late.append(time.perf_counter() - began - 0.002)
late.sort()
print(json.dumps({"p90": late[int(0.9 * (len(late) - 1))], "p99": late[int(0.99 * (len(late) - 1))], "n": len(late)}))
"""


class WakeUpProbe:
    """How late the machine wakes a sleeping process while a test runs (seconds, p90 and p99 of
    2 ms sleeps, in a process of its own): the noise floor of any timing the test checks. On a quiet
    machine a tenth of a millisecond; beside another test worker and a vLLM server, milliseconds.
    A replay's arrival lag is judged against its bound plus this floor (issue 42: the suite's two
    workers made a fixed 5 ms bound fail on noise alone)."""

    def __enter__(self) -> WakeUpProbe:
        import subprocess
        import sys

        self.process = subprocess.Popen(
            [sys.executable, "-c", _PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.p90 = self.p99 = 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        import json

        out, _ = self.process.communicate(timeout=30)
        found = json.loads(out)
        self.p90, self.p99 = float(found["p90"]), float(found["p99"])
