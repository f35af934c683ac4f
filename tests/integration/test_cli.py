"""The CLI: the issue's commands, and one clear line for every kind of bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runners.app.cli import main

ROOT = Path(__file__).resolve().parents[2]


def cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_run_list_show_compare_delete(results_dir, capsys):
    base = ["--requests", "200", "--rate", "4", "--out", str(results_dir), "--quiet"]
    assert cli(["run", "--engine", "sim", "--scheduler", "fcfs", "--run-id", "f", *base], capsys)[0] == 0
    code, out, _ = cli(
        ["run", "--engine", "sim", "--scheduler", "static", "--batch-size", "8", "--seed", "0", "--run-id", "s", *base],
        capsys,
    )
    assert code == 0 and "run s: done" in out and "SLO attainment" in out
    code, out, _ = cli(["list", "--out", str(results_dir)], capsys)
    assert code == 0 and out.count("done") == 2
    code, out, _ = cli(["show", "s", "--out", str(results_dir)], capsys)
    assert "static" in out and "200 request rows" in out
    code, out, _ = cli(["compare", "f", "s", "--out", str(results_dir)], capsys)
    assert code == 0
    attainment_line = next(line for line in out.splitlines() if line.startswith("SLO attainment (%)"))
    cells = attainment_line.split()
    fcfs, static, change = float(cells[3]), float(cells[4]), float(cells[5])
    assert change == round(static - fcfs, 1) < 0 and cells[6] == "pts"  # static is behind FCFS, in points
    assert "1 seed: no interval; differences this size can flip with the seed" in out
    tpot = next(line for line in out.splitlines() if line.startswith("TPOT mean (ms)")).split()
    assert 1.0 < float(tpot[3]) < 1000.0  # displayed in milliseconds, as everywhere
    assert cli(["delete", "s", "--out", str(results_dir)], capsys)[0] == 0
    assert not (results_dir / "s").exists()


def test_config_file_with_flag_overrides(tmp_path, results_dir, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(
        "workload:\n  requests: 40\n  arrival: {process: constant, rate: 2}\n"
        "scheduler: {name: static, params: {batch_size: 4}}\nslo:\n  preset: custom\n  code: {e2e_s: 60}\n"
    )
    code, out, _ = cli(
        [
            "run",
            "--config",
            str(config),
            *"--requests 30 --run-id cfg --out".split(),
            str(results_dir),
            "--quiet",
            "--set",
            "engine.max_num_seqs=16",
        ],
        capsys,
    )
    assert code == 0
    saved = json.loads((results_dir / "cfg" / "config.json").read_text())["config"]
    assert saved["workload"]["requests"] == 30 and saved["scheduler"]["params"] == {"batch_size": 4}
    assert saved["slo"]["code"]["e2e_s"] == 60 and saved["engine"]["max_num_seqs"] == 16


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ["--scheduler", "nope"],
            "scheduler.name: unknown name 'nope'; expected one of: alpha-beta-clear, "
            "alpha-protect, dynamic-mem, dynamic-sla, engine-dynamic-mem, engine-dynamic-sla, "
            "engine-mcsf, engine-slo-sa, fcfs, mcsf, prefix-affinity, scls, slo-exhaustive, slo-sa, static",
        ),
        (["--engine", "tgi"], "engine.kind: unknown name 'tgi'; expected one of: lmdeploy, openai, sglang, sim, vllm"),
        (["--rate", "-2"], "workload.arrival.rate: Input should be greater than or equal to 0.000001 (got -2.0)"),
        (["--requests", "0"], "workload.requests: Input should be greater than 0"),
        (["--ratio", "0:0"], "workload.ratio: chat + code must be > 0"),
        (["--ratio", "half"], "--ratio: 'half' is not CHAT:CODE"),
        (["--set", "slo.preset=custom", "--set", "slo.code.e2e_s=0"], "slo.code.e2e_s: Input should be greater than 0"),
        (["--kv-capacity", "512"], "engine.kv_capacity_tokens: the KV cache holds 512 tokens but request"),
        (["--scheduler", "fcfs", "--batch-size", "4"], "scheduler.params.batch_size: Extra inputs are not permitted"),
        (
            ["--set", "workload.chat.kind=file", "--set", "workload.chat.path=/no/such.json"],
            "/no/such.json: file not found",
        ),
        (["--run-id", "a/b"], "run_id: 'a/b' is not allowed"),
    ],
)
def test_bad_input_is_one_clear_line(args, expected, results_dir, capsys):
    code, out, err = cli(["run", "--requests", "20", "--out", str(results_dir), "--quiet", *args], capsys)
    assert code == 2
    assert err.startswith("error: ") and expected in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert list(results_dir.iterdir()) == []  # input errors stop before a run folder exists


def test_malformed_dataset_file_names_the_file(tmp_path, results_dir, capsys):
    bad = tmp_path / "chat.jsonl"
    bad.write_text('{"conversations": []}\nnot json\n')
    code, _, err = cli(
        [
            *"run --requests 10 --out".split(),
            str(results_dir),
            *"--quiet --set workload.chat.kind=file --set".split(),
            f"workload.chat.path={bad}",
        ],
        capsys,
    )
    assert code == 2 and f"{bad}: line 2 is not valid JSON" in err


def test_malformed_config_file(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("workload: [unclosed\n")
    code, _, err = cli(["run", "--config", str(config)], capsys)
    assert code == 2 and "bad.yaml is not valid YAML" in err
    config.write_text("workload:\n  requestz: 5\n")
    code, _, err = cli(["run", "--config", str(config)], capsys)
    assert code == 2 and "workload.requestz: Extra inputs are not permitted" in err


def test_show_unknown_run(results_dir, capsys):
    code, _, err = cli(["show", "ghost", "--out", str(results_dir)], capsys)
    assert code == 2 and "run 'ghost' not found" in err


def test_module_entry_point_and_schedulers_listing():
    completed = subprocess.run(
        [sys.executable, "-m", "runners", "schedulers"], cwd=ROOT, capture_output=True, text=True
    )
    assert completed.returncode == 0
    assert "fcfs" in completed.stdout and "static" in completed.stdout and "batch_size" in completed.stdout
