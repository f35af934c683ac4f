"""``run --trace``: each shipped sample replays on the simulator with the trace's own arrival
offsets in requests.parquet, its loader report in config.json, and one clear error line for a
trace given with an arrival process or a bad trace file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from runners.app.cli import main
from runners.workload.traces import TRACES_DIR, TraceConfig, load_trace

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ["mooncake_synthetic.jsonl", "azure_code_synthetic.csv", "azure_conv_synthetic.csv", "burstgpt_synthetic.csv"]


def _run_folder(results_dir: Path, run_id: str) -> Path:
    return results_dir / run_id


def _arrivals(folder: Path) -> list[float]:
    rows = pd.read_parquet(folder / "requests.parquet").sort_values("request_id")
    return rows["arrival_s"].tolist()


@pytest.mark.parametrize("name", SAMPLES)
def test_each_sample_replays_with_its_own_offsets(name, results_dir, capsys):
    path = TRACES_DIR / name
    args = ["run", "--engine", "sim", "--trace", str(path), "--requests", "50", "--trace-speedup", "4"]
    code = main([*args, "--out", str(results_dir), "--run-id", "t", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0 and "run t: done" in out
    folder = _run_folder(results_dir, "t")
    expected = load_trace(TraceConfig(path=str(path)), 50).arrivals_s
    assert _arrivals(folder) == [offset / 4 for offset in expected]
    assert expected[0] == 0.0 and expected[-1] > 10  # the trace's spread, not all at once
    report = json.loads((folder / "config.json").read_text())["resolved"]["workload_reports"]["trace"]
    assert report["sent"] == 50 and report["speedup"] == 4 and report["synthetic"] is True
    assert report["span_s"] == expected[-1] / 4
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["synthetic"] is True and summary["workload"] == f"first 50 req of trace {name} x4 (synthetic)"
    assert summary["completed"] == 50


def test_python_m_runners_run_trace(results_dir):
    """The command as a user types it, from the repository root."""
    sample = "datasets/traces/mooncake_synthetic.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "runners", "run", "--trace", sample, "--requests", "50"]
        + ["--out", str(results_dir), "--run-id", "m", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    expected = load_trace(TraceConfig(path=str(ROOT / sample)), 50).arrivals_s
    assert _arrivals(results_dir / "m") == expected
    assert expected[:3] == [0.0, 2.058, 2.232]


def test_trace_with_an_arrival_rate_is_one_error_naming_both(results_dir, capsys):
    code = main(["run", "--trace", str(TRACES_DIR / SAMPLES[0]), "--rate", "2", "--out", str(results_dir), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "workload.arrival and workload.trace are both set" in err
    assert not list(results_dir.iterdir())  # nothing was written


def test_bad_trace_file_is_one_line_naming_file_line_and_field(tmp_path, results_dir, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 7, "input_length": -4}\n')
    code = main(["run", "--trace", str(bad), "--requests", "5", "--out", str(results_dir), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert (
        err == f"error: {bad}: line 2, field 'output_length': missing; expected one JSON object per line with "
        "timestamp (ms), input_length, output_length (tokens) and hash_ids"
    )


def test_trace_format_and_task_given_for_a_file_whose_name_says_neither(tmp_path, results_dir, capsys):
    renamed = tmp_path / "requests.log"  # neither the extension nor the name tells
    renamed.write_bytes((TRACES_DIR / "azure_conv_synthetic.csv").read_bytes())
    base = ["run", "--trace", str(renamed), "--requests", "20", "--out", str(results_dir), "--quiet"]
    assert main([*base, "--run-id", "no-task"]) == 2
    assert "workload.trace.task: cannot tell the task of the Azure trace" in capsys.readouterr().err
    code = main([*base, "--trace-format", "azure", "--set", "workload.trace.task=code", "--run-id", "a"])
    assert code == 0, capsys.readouterr().err
    rows = pd.read_parquet(results_dir / "a" / "requests.parquet")
    assert set(rows["task"]) == {"code"} and len(rows) == 20
    config = json.loads((results_dir / "a" / "config.json").read_text())
    assert config["config"]["workload"]["trace"]["format"] == "azure"
    assert config["resolved"]["workload_reports"]["trace"]["synthetic"] is False


def test_the_simulator_hits_what_the_mooncake_hash_ids_imply(results_dir, capsys):
    """Issue 31: replaying the Mooncake sample, the simulator's prefix cache finds exactly the
    blocks the trace's hash_ids share with earlier requests (16-token blocks within the 512-token
    hash blocks; at most (tokens - 1) // 16 per request; the preset's cache never evicts here)."""
    from runners.workload.prefix import block_keys

    path = TRACES_DIR / "mooncake_synthetic.jsonl"
    code = main(
        ["run", "--trace", str(path), "--requests", "200", "--out", str(results_dir), "--run-id", "mc", "--quiet"]
    )
    assert code == 0, capsys.readouterr().err
    trace = load_trace(TraceConfig(path=str(path)), 200)
    seen: set[int] = set()
    implied = queried = 0
    for record in trace.records:
        keys = block_keys(record.segments, 16, record.input_tokens)
        shared = 0
        for key in keys[: (record.input_tokens - 1) // 16]:
            if key not in seen:
                break
            shared += 1
        implied += 16 * shared
        queried += record.input_tokens
        seen.update(keys)
    summary = json.loads((_run_folder(results_dir, "mc") / "summary.json").read_text())
    assert summary["prefix_cache"] == {"queries_tokens": queried, "hits_tokens": implied, "source": "simulator"}
    assert summary["prefix_cache_hit_rate"] == implied / queried and 0.6 < implied / queried < 0.7
    assert summary["arrival_process"] == "trace" and summary["arrival_rate_rps"] is None


def test_two_traces_share_no_text_through_equal_request_ids():
    """Records of two traces replayed on one server (both with request ids req-00000, ...) get
    different made-up text, so the second finds nothing of the first in the server's prefix cache."""
    from runners.workload.builder import build_workload
    from runners.workload.config import WorkloadConfig
    from runners.workload.slo import PAPER_SLOS

    prompts = {}
    for name in ("azure_conv_synthetic.csv", "burstgpt_synthetic.csv"):
        config = WorkloadConfig.model_validate({"requests": 5, "trace": {"path": str(TRACES_DIR / name)}})
        prompts[name] = [request.prompt[:200] for request in build_workload(config, PAPER_SLOS).requests]
    azure, burst = prompts.values()
    assert not set(azure) & set(burst) and all(a[:40] != b[:40] for a, b in zip(azure, burst))
