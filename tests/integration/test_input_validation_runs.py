"""Whole runs through ``python -m runners run``: the failure gate (a run whose requests all
failed ends failed, exit code 1, and says why) and secrets kept out of what a run writes
(issue 9, items 11 and 12)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from runners.app.cli import main
from runners.store.result_store import load_run
from tests.fakes.lmdeploy_server import FakeLMDeploy

ROOT = Path(__file__).resolve().parents[2]
FAKE_LMDEPLOY = ROOT / "tests" / "fakes" / "lmdeploy_server.py"


@pytest.fixture(scope="module")
def server():
    fake = FakeLMDeploy().start()
    yield fake
    fake.stop()


def dataset(tmp_path: Path, failing: int, total: int) -> Path:
    """``total`` chat entries, the first ``failing`` of them answered with HTTP 500 by the test server."""
    entries = [
        {
            "conversations": [
                {"from": "human", "value": ("FAIL500 " if i < failing else "") + "word " * 20},
                {"from": "gpt", "value": "x " * 20},
            ]
        }
        for i in range(total)
    ]
    path = tmp_path / f"chat-{failing}-of-{total}.json"
    path.write_text(json.dumps(entries))
    return path


def attach_run(server: FakeLMDeploy, run_id: str, path: Path, results_dir: Path, *extra: str) -> int:
    return main(
        [
            "run",
            "--engine",
            "openai",
            "--url",
            server.url,
            "--requests",
            "6",
            "--rate",
            "50",
            "--ratio",
            "1:0",
            "--run-id",
            run_id,
            "--quiet",
            "--out",
            str(results_dir),
            "--set",
            "workload.chat.kind=file",
            "--set",
            f"workload.chat.path={path}",
            "--set",
            "engine.warmup_concurrency=[]",
            "--set",
            "sample_interval_s=0.05",
            *extra,
        ]
    )


def test_a_run_where_every_request_failed_fails_with_exit_code_1(server, tmp_path, results_dir, capsys):
    code = attach_run(server, "all-failed", dataset(tmp_path, 6, 6), results_dir)
    out = capsys.readouterr().out
    reason = "6 of 6 requests failed (error rate 1 > max_error_rate 0.5)"
    assert code == 1 and "run all-failed: failed" in out and f"reason: {reason}" in out, out
    run = load_run(results_dir, "all-failed")
    assert run.summary.status == "failed" and run.summary.error == reason
    assert run.summary.failure_gate is not None and run.summary.failure_gate.model_dump(exclude_unset=True) == {
        "max_error_rate": 0.5,
        "error_rate": 1.0,
        "errors": 6,
        "ran": 6,
        "tripped": True,
    }
    assert len(run.requests) == 6 and run.requests["error"].str.startswith("HTTP 500").all()  # every row kept


def test_the_gate_trips_only_above_max_error_rate(server, tmp_path, results_dir, capsys):
    path = dataset(tmp_path, 3, 6)  # 3 of the 6 requests fail: rate 0.5 is not above 0.5
    assert attach_run(server, "half", path, results_dir) == 0
    gate = load_run(results_dir, "half").summary.failure_gate
    assert gate is not None and gate.model_dump(exclude_unset=True) == {
        "max_error_rate": 0.5,
        "error_rate": 0.5,
        "errors": 3,
        "ran": 6,
        "tripped": False,
    }
    assert attach_run(server, "strict", path, results_dir, "--max-error-rate", "0.25") == 1
    assert (
        load_run(results_dir, "strict").summary.error == "3 of 6 requests failed (error rate 0.5 > max_error_rate 0.25)"
    )
    assert attach_run(server, "off", dataset(tmp_path, 6, 6), results_dir, "--max-error-rate", "1") == 0
    assert load_run(results_dir, "off").summary.status == "done"
    capsys.readouterr()


WRAPPER = """\
import json, os, runpy, sys
record, fake = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
with open(record, "w") as handle:
    json.dump({"args": args, "env": os.environ.get("SCHEDLAB_TEST_SECRET")}, handle)
for flag in ("--api-key", "--hf-token"):  # the test server does not know these flags
    at = args.index(flag)
    del args[at:at + 2]
args = [arg for arg in args if not arg.startswith("--db-password=")]
sys.argv = [fake, *args]
runpy.run_path(fake, run_name="__main__")
"""


def config_with_secrets(tmp_path: Path) -> tuple[dict, Path]:
    """A run config launching the test LMDeploy server through :data:`WRAPPER` with a secret in
    ``engine.env`` and three in ``extra_args``; and the file where the server records what it got."""
    wrapper = tmp_path / "serve.py"
    wrapper.write_text(WRAPPER)
    record = tmp_path / "server-saw.json"
    config = {
        "engine": {
            "kind": "lmdeploy",
            "model": "internlm-fake-7b",
            "use_gpus": False,
            "startup_timeout_s": 60,
            "command": [sys.executable, str(wrapper), str(record), str(FAKE_LMDEPLOY)],
            "env": {"SCHEDLAB_TEST_SECRET": "env-secret-1"},
            "extra_args": ["--api-key", "sk-secret-2", "--hf-token", "hf_secret3", "--db-password=pw-secret-4"],
            "warmup_concurrency": [],
        },
        "workload": {
            "requests": 4,
            "arrival": {"process": "poisson", "rate": 50},
            "filters": {"max_total_tokens": 300},
        },
        "sample_interval_s": 0.05,
    }
    return config, record


def test_secrets_reach_the_server_but_are_never_written(tmp_path, results_dir, capsys):
    config, record = config_with_secrets(tmp_path)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    code = main(["run", "--config", str(path), "--run-id", "secret", "--quiet", "--out", str(results_dir)])
    assert code == 0, capsys.readouterr()
    saw = json.loads(record.read_text())
    assert saw["env"] == "env-secret-1"  # the real values reach the server
    assert saw["args"][-5:] == ["--api-key", "sk-secret-2", "--hf-token", "hf_secret3", "--db-password=pw-secret-4"]
    folder = results_dir / "secret"
    saved = json.loads((folder / "config.json").read_text())["config"]["engine"]
    assert saved["env"] == {"SCHEDLAB_TEST_SECRET": "***"}
    assert saved["extra_args"] == ["--api-key", "***", "--hf-token", "***", "--db-password=***"]
    for name in ("config.json", "summary.json", "engine.json"):
        text = (folder / name).read_text()
        for secret in ("env-secret-1", "sk-secret-2", "hf_secret3", "pw-secret-4"):
            assert secret not in text, (name, secret)
    assert load_run(results_dir, "secret").summary.status == "done"


def test_a_dashboard_job_keeps_its_secrets_out_of_job_json_and_still_passes_them(tmp_path, results_dir):
    """The dashboard's job folder is written for the pages to read: job.json holds *** where the
    config has secrets, and the worker gets the real values on its stdin."""
    from runners.app.jobs import list_jobs, new_job_spec, start_job
    from runners.run.config import parse_config

    data, record = config_with_secrets(tmp_path)
    folder = start_job(new_job_spec([parse_config(data)], label="secret job"), results_dir)
    deadline = time.monotonic() + 120
    while (job := list_jobs(results_dir)[0]).active and time.monotonic() < deadline:
        time.sleep(0.3)
    assert job.state == "done", (job, (folder / "worker.log").read_text()[-2000:])
    saw = json.loads(record.read_text())
    assert saw["env"] == "env-secret-1"
    assert saw["args"][-5:] == ["--api-key", "sk-secret-2", "--hf-token", "hf_secret3", "--db-password=pw-secret-4"]
    saved = json.loads((folder / "job.json").read_text())["runs"][0]["engine"]
    assert saved["env"] == {"SCHEDLAB_TEST_SECRET": "***"}
    assert saved["extra_args"] == ["--api-key", "***", "--hf-token", "***", "--db-password=***"]
    written = [path for path in [*folder.rglob("*"), *(results_dir / job.run_ids[0]).rglob("*")] if path.is_file()]
    for path in written:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for secret in ("env-secret-1", "sk-secret-2", "hf_secret3", "pw-secret-4"):
            assert secret not in text, (path.name, secret)


def test_the_worker_refuses_a_spec_on_stdin_for_another_job(tmp_path, results_dir, monkeypatch, capsys):
    import io

    from runners.app.jobs import jobs_root, new_job_spec
    from runners.run.config import parse_config
    from runners.store.result_store import write_json_atomic

    spec = new_job_spec([parse_config({"workload": {"requests": 3}})])
    folder = jobs_root(results_dir) / spec.job_id
    folder.mkdir(parents=True)
    write_json_atomic(folder / "job.json", spec.model_dump(mode="json"))
    other = spec.model_copy(update={"job_id": "job-other"})
    monkeypatch.setattr("sys.stdin", io.StringIO(other.model_dump_json()))
    assert main(["worker", str(folder), "--results", str(results_dir), "--spec-stdin"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is for 'job-other'" in err[0], err
    assert not any(results_dir.iterdir()) or [p.name for p in results_dir.iterdir()] == [".jobs"]
