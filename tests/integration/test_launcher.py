"""Launching servers: exact argument lists, health waits that quote the log, clean stops with no
orphans, and the LMDeploy launch path end to end (against the test server with LMDeploy's CLI)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.engines.adapters.lmdeploy import LMDeployConfig
from runners.engines.adapters.sglang import SGLangAdapter
from runners.engines.adapters.vllm import VLLMAdapter, VLLMConfig
from runners.engines.launcher import EngineStartError, ServerProcess, free_port
from runners.engines.real_engine import kv_capacity_from_log
from runners.errors import RunCancelled
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run

ROOT = Path(__file__).resolve().parents[2]
FAKE_LMDEPLOY = [sys.executable, str(ROOT / "tests" / "fakes" / "lmdeploy_server.py")]


def started_python(tmp_path: Path, code: str, *args: str, port: int | None = None, **options) -> ServerProcess:
    """A started ServerProcess running ``python -c code args`` on 127.0.0.1 (``port``, default a
    free one), its log in ``tmp_path/server.log``."""
    server = ServerProcess(
        [sys.executable, "-c", code, *args],
        free_port() if port is None else port,
        "127.0.0.1",
        tmp_path / "server.log",
        **options,
    )
    server.start()
    return server


def test_vllm_argument_list():
    # SGLang's list: test_sglang_adapter.py::test_sglang_argument_list; apart, as each engine's flags are its own
    config = VLLMConfig(
        model="/models/qwen",
        python="/envs/vllm/bin/python",
        max_num_seqs=64,
        gpu_memory_utilization=0.9,
        scheduling_policy="priority",
        num_gpu_blocks_override=40,
        extra_args=["--enforce-eager"],
    )
    assert config.server_command(8001) == [
        "/envs/vllm/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/qwen",
        "--served-model-name",
        "model",
        "--host",
        "127.0.0.1",
        "--port",
        "8001",
        "--max-num-seqs",
        "64",
        "--gpu-memory-utilization",
        "0.9",
        "--num-gpu-blocks-override",
        "40",
        "--scheduling-policy",
        "priority",
        "--enable-prompt-tokens-details",
        "--enforce-eager",
    ]
    assert VLLMConfig(model="m", command=["vllm", "serve"]).server_command(1)[:2] == ["vllm", "serve"]


def test_lmdeploy_argument_list():
    config = LMDeployConfig(model="/models/qwen", max_batch_size=128, cache_max_entry_count=0.8, session_len=4096)
    assert config.server_command(23333) == [
        "lmdeploy",
        "serve",
        "api_server",
        "/models/qwen",
        "--server-name",
        "127.0.0.1",
        "--server-port",
        "23333",
        "--backend",
        "turbomind",
        "--model-name",
        "model",
        "--max-batch-size",
        "128",
        "--cache-max-entry-count",
        "0.8",
        "--session-len",
        "4096",
    ]


def test_per_instance_lists_must_match_instances():
    with pytest.raises(ValueError, match="gpus has 1 entries; expected one per instance \\(2\\)"):
        VLLMConfig(model="m", instances=2, gpus=["0"])


def test_server_that_dies_at_start_reports_its_log(tmp_path):
    server = started_python(tmp_path, "print('CUDA out of memory (pretend)'); raise SystemExit(3)")
    with pytest.raises(EngineStartError) as info:
        server.wait_healthy(30)
    assert "exited with code 3" in str(info.value) and "CUDA out of memory (pretend)" in str(info.value)
    server.stop()


def test_server_that_never_gets_healthy_times_out(tmp_path):
    server = started_python(tmp_path, "import time; print('loading...', flush=True); time.sleep(60)")
    with pytest.raises(EngineStartError, match=r"not healthy after 1 s(.|\n)*loading\.\.\."):
        server.wait_healthy(1)
    server.stop()
    assert server.process.poll() is not None


def test_stop_takes_the_whole_process_group(tmp_path):
    marker = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(120)\n"
    )
    server = started_python(tmp_path, script)
    for _ in range(100):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.05)
    child = int(marker.read_text())
    server.stop(grace_s=2)
    time.sleep(0.2)
    assert not alive(child)


def alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie waiting to be reaped by its new parent does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_kv_capacity_from_vllm_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("INFO [kv_cache_utils.py:2327] GPU KV cache size: 813,104 tokens, Maximum concurrency ...\n")
    assert kv_capacity_from_log(log, VLLMAdapter.kv_log_pattern) == 813104
    log.write_text("INFO CPU KV cache size: 524,288 tokens\n")
    assert kv_capacity_from_log(log, VLLMAdapter.kv_log_pattern) == 524288


def test_kv_capacity_from_sglang_log(tmp_path):
    # the scheduler's start-up line of SGLang 0.5.x (srt/managers/scheduler.py), effective values
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-11-23 10:00:00 TP0] max_total_num_tokens=411336, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=2048, context_len=32768, "
        "available_gpu_mem=6.21 GB\n"
    )
    assert kv_capacity_from_log(log, SGLangAdapter.kv_log_pattern) == 411336
    assert kv_capacity_from_log(log, VLLMAdapter.kv_log_pattern) is None


def lmdeploy_launch(run_id: str, **engine) -> dict:
    return {
        "run_id": run_id,
        "engine": {
            "kind": "lmdeploy",
            "model": "internlm-fake-7b",
            "command": FAKE_LMDEPLOY,
            "max_batch_size": 4,
            "use_gpus": False,
            "startup_timeout_s": 60,
            **engine,
        },
        "workload": {
            "requests": 24,
            "arrival": {"process": "poisson", "rate": 20},
            "filters": {"max_total_tokens": 300},
        },
        "scheduler": {"name": "fcfs"},
        "sample_interval_s": 0.05,
    }


def test_lmdeploy_launch_path_runs_and_stops(results_dir):
    outcome = execute_run(parse_config(lmdeploy_launch("lmd")), results_dir)
    assert outcome.status == "done", outcome.error
    run = load_run(results_dir, "lmd")
    assert run.requests["error"].isna().all() and run.timeseries["running"].max() <= 4
    log = (run.folder / "server-0.log").read_text()
    assert "--server-port" in log and "fake LMDeploy" in log
    leftover = subprocess.run(["pgrep", "-f", "internlm-fake-7b"], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""


def test_engine_dying_mid_run_fails_the_run_and_keeps_data(results_dir):
    config = lmdeploy_launch("dies", extra_args=["--die-after", "1.5"], warmup_concurrency=[])
    config["workload"].update(requests=200, arrival={"process": "poisson", "rate": 20})
    outcome = execute_run(parse_config(config), results_dir)
    run = load_run(results_dir, "dies")
    assert outcome.status == "failed" and "exited with code 9" in outcome.error
    assert len(run.requests) == 200
    assert run.requests["error"].isna().sum() >= 1  # what finished before the crash is kept
    assert run.requests["error"].notna().sum() >= 1


def test_launch_failure_is_recorded_with_the_log(results_dir):
    config = lmdeploy_launch("nolaunch", command=[sys.executable, "-c", "print('no GPU found'); raise SystemExit(1)"])
    outcome = execute_run(parse_config(config), results_dir)
    assert outcome.status == "failed" and "no GPU found" in outcome.error
    run = load_run(results_dir, "nolaunch")
    assert run.summary.status == "failed" and (run.folder / "server-0.log").exists()


def test_cancel_reaches_a_health_probe_that_never_answers(tmp_path):
    port = free_port()
    listens_never_answers = (
        f"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {port})); "
        "s.listen(); print('listen' + 'ing', flush=True); time.sleep(60)"
    )  # not the command's text
    server = started_python(tmp_path, listens_never_answers, port=port)
    try:
        for _ in range(100):
            if "listening" in (tmp_path / "server.log").read_text():
                break
            time.sleep(0.05)
        stop_at = time.monotonic() + 0.3
        with pytest.raises(RunCancelled, match="cancelled while the servers were starting"):
            server.wait_healthy(60, should_stop=lambda: time.monotonic() > stop_at)
        assert time.monotonic() - stop_at < 1.0  # not after the probe's own 2 s timeout
    finally:
        server.stop(grace_s=2)


def test_secret_arguments_are_redacted_in_the_log_and_its_tail(tmp_path):
    secret = "sk-launch-secret-4242"
    prints_its_arguments = "import sys; print('args:', sys.argv[1:], flush=True); raise SystemExit(3)"
    server = started_python(tmp_path, prints_its_arguments, "--api-key", secret, "--hf-token=hf_abcdef")
    with pytest.raises(EngineStartError) as info:
        server.wait_healthy(30)
    server.stop()
    first_line = (tmp_path / "server.log").read_text().splitlines()[0]
    assert first_line.endswith("--api-key *** --hf-token=***")
    assert "exited with code 3" in str(info.value) and "args:" in str(info.value)
    assert secret not in str(info.value) and "hf_abcdef" not in str(info.value)


def test_a_server_that_prints_its_secrets_leaves_none_in_the_saved_log(tmp_path):
    """The server's own output goes straight to server-N.log: whatever it prints of its secret
    arguments or secret-named environment is scrubbed when it stops; other values stay."""
    prints = (
        "import os, sys; print('args:', sys.argv[1:]); print('token', os.environ['HF_TOKEN']); "
        "print('devices', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); raise SystemExit(3)"
    )
    server = started_python(
        tmp_path,
        prints,
        "--api-key",
        "plainvalue123",
        "--hf-token=hf_abcdef",
        env={"HF_TOKEN": "hf-env-secret-99", "CUDA_VISIBLE_DEVICES": "0"},
    )
    with pytest.raises(EngineStartError) as info:
        server.wait_healthy(30)
    server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "args:" in log and "devices 0" in log
    for secret in ("plainvalue123", "hf_abcdef", "hf-env-secret-99"):
        assert secret not in log, secret
        assert secret not in str(info.value), secret
    assert "token ***" in log
