"""The simulator's results do not change when its code is made faster (issue 13 section 4).

Golden request tables, time series and summaries were written by the code as it was before the
speed work (``python tests/integration/test_sim_identical.py --regenerate`` writes them again, only when the
engine's semantics change on purpose) into ``tests/data/sim_golden/``. Each config below is run
again and compared column by column: every request-table and time-series value bit for bit,
every summary metric bit for bit except the few float sums whose summation order may differ
(:data:`SUMMED`, to 1e-12 relative).

The configs cover FCFS (several seeds, two instances, a per-instance cap), chunked prefill
(a small token budget per step), preemption under KV pressure (a small cache) in FCFS and
priority order, run-to-completion batching, and the static, slo-sa, dynamic-mem, dynamic-sla,
scls, mcsf and alpha-protect policies.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import REQUEST_COLUMNS, TIMESERIES_COLUMNS, load_run

ROOT = Path(__file__).resolve().parents[2]

GOLDEN = ROOT / "tests" / "data" / "sim_golden"


def _config(
    requests: int, rate: float, seed: int = 0, scheduler: str = "fcfs", params: dict | None = None, **engine: Any
) -> dict[str, Any]:
    return {
        "workload": {"requests": requests, "seed": seed, "arrival": {"process": "poisson", "rate": rate}},
        "scheduler": {"name": scheduler, "params": params or {}},
        "engine": {"kind": "sim", **engine},
    }


#: name -> run config (the run id is the name). Small caches (kv_capacity_tokens) force preemptions.
CONFIGS: dict[str, dict[str, Any]] = {
    "fcfs-seed0": _config(1000, 4, seed=0),
    "fcfs-seed1-rate8": _config(800, 8, seed=1),
    "fcfs-seed2-2inst": _config(800, 10, seed=2, instances=2),
    "fcfs-cap-2inst": _config(600, 8, seed=3, params={"max_in_flight": 12}, instances=2),
    "fcfs-chunked": _config(600, 6, seed=4, max_num_batched_tokens=96, max_num_seqs=64),
    "fcfs-preempt": _config(600, 8, seed=5, kv_capacity_tokens=6144, block_size=16),
    "fcfs-priority-preempt": _config(500, 8, seed=6, kv_capacity_tokens=6144, scheduling_policy="priority"),
    "fcfs-rtc": _config(400, 4, seed=7, run_to_completion=True, max_num_seqs=16),
    "static": _config(400, 2, seed=8, scheduler="static", params={"batch_size": 8}),
    "slo-sa": _config(300, 3, seed=9, scheduler="slo-sa", params={"iterations": 20}),
    "slo-sa-all-priority": _config(
        300,
        3,
        seed=10,
        scheduler="slo-sa",
        params={"iterations": 20, "dispatch": "all", "max_batch": 16},
        scheduling_policy="priority",
    ),
    "dynamic-mem": _config(500, 8, seed=11, scheduler="dynamic-mem", kv_capacity_tokens=16384),
    "dynamic-sla": _config(500, 6, seed=12, scheduler="dynamic-sla"),
    "scls": _config(500, 6, seed=13, scheduler="scls"),
    "scls-2inst": _config(500, 10, seed=14, scheduler="scls", instances=2, kv_capacity_tokens=32768),
    "mcsf": _config(500, 8, seed=15, scheduler="mcsf", kv_capacity_tokens=16384),
    "alpha-protect": _config(400, 8, seed=16, scheduler="alpha-protect", kv_capacity_tokens=12288),
}

#: Summary fields that are not results of the simulation (clocks, the writer process, the run id).
VOLATILE = {"wall_time_s", "started_at", "started_at_unix_s", "finished_at", "writer", "run_id"}
#: Summary fields that are sums of floats, allowed to differ by 1e-12 relative if their order of
#: summation changes (none does today; kept tight so a real change still fails).
SUMMED: set[str] = set()


def run_config(name: str, results: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    data = {**CONFIGS[name], "run_id": name}
    outcome = execute_run(parse_config(data), results)
    assert outcome.status == "done", outcome.error
    run = load_run(results, name)
    summary = json.loads((run.folder / "summary.json").read_text())
    return run.requests, run.timeseries, {k: v for k, v in summary.items() if k not in VOLATILE}


def _write_golden(name: str, requests: pd.DataFrame, timeseries: pd.DataFrame, summary: dict[str, Any]) -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    requests.to_parquet(GOLDEN / f"{name}.requests.parquet", index=False, compression="zstd")
    timeseries.to_parquet(GOLDEN / f"{name}.timeseries.parquet", index=False, compression="zstd")
    (GOLDEN / f"{name}.summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")


def _same_value(path: str, got: Any, want: Any) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{path}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            _same_value(f"{path}.{key}", got[key], want[key])
    elif isinstance(want, float) and isinstance(got, float):
        if path.split(".")[0] in SUMMED:
            assert math.isclose(got, want, rel_tol=1e-12, abs_tol=0.0), f"{path}: {got!r} != {want!r}"
        else:
            assert got == want or (math.isnan(got) and math.isnan(want)), f"{path}: {got!r} != {want!r}"
    else:
        assert got == want and type(got) is type(want), f"{path}: {got!r} != {want!r}"


def _same_frame(label: str, got: pd.DataFrame, want: pd.DataFrame, columns: dict) -> None:
    assert list(got.columns) == list(columns), f"{label}: columns {list(got.columns)}"
    assert list(want.columns) == list(columns)
    assert len(got) == len(want), f"{label}: {len(got)} rows, golden {len(want)}"
    for column in columns:
        a, b = got[column], want[column]
        assert a.dtype == b.dtype, f"{label}.{column}: dtype {a.dtype} != {b.dtype}"
        if a.dtype.kind == "f":
            x, y = a.to_numpy(), b.to_numpy()
            same = (x == y) | (np.isnan(x) & np.isnan(y))
            if not same.all():
                row = int(np.flatnonzero(~same)[0])
                raise AssertionError(f"{label}.{column} row {row}: {x[row]!r} != golden {y[row]!r}")
        else:
            mismatch = [
                i
                for i, (p, q) in enumerate(zip(a.tolist(), b.tolist()))
                if not (p == q or (p is None and q is None) or (p != p and q != q))
            ]
            assert not mismatch, (
                f"{label}.{column} row {mismatch[0]}: {a.iloc[mismatch[0]]!r} != {b.iloc[mismatch[0]]!r}"
            )


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_results_identical_to_golden(name, tmp_path):
    requests, timeseries, summary = run_config(name, tmp_path)
    _same_frame(f"{name} requests", requests, pd.read_parquet(GOLDEN / f"{name}.requests.parquet"), REQUEST_COLUMNS)
    _same_frame(
        f"{name} timeseries", timeseries, pd.read_parquet(GOLDEN / f"{name}.timeseries.parquet"), TIMESERIES_COLUMNS
    )
    _same_value(name, summary, json.loads((GOLDEN / f"{name}.summary.json").read_text()))


@pytest.mark.parametrize("name", ["fcfs-preempt", "scls-2inst"])
def test_itl_from_counted_gaps_matches_the_list(name, tmp_path, monkeypatch):
    """Big runs take ITL percentiles from (gap, count) pairs instead of the list of every gap
    (runners.store.recording.ITL_LIST_LIMIT): the same median, p90 and p99 bit for bit, the mean
    summed in another order (1e-12 relative)."""
    monkeypatch.setattr("runners.store.recording.ITL_LIST_LIMIT", 0)
    *_, summary = run_config(name, tmp_path)
    golden = json.loads((GOLDEN / f"{name}.summary.json").read_text())
    for key in ("median", "p90", "p99"):
        assert summary["itl_s"][key] == golden["itl_s"][key], key
    assert math.isclose(summary["itl_s"]["mean"], golden["itl_s"]["mean"], rel_tol=1e-12)
    summary.pop("itl_s"), golden.pop("itl_s")
    _same_value(name, summary, golden)


def test_distribution_equals_numpy_bit_for_bit():
    """distribution() takes its order statistics from one partition and weighted_distribution()
    from counted values: both give numpy's median and linear percentiles exactly."""
    from runners.metrics.run_metrics import distribution, weighted_distribution

    rng = np.random.default_rng(7)
    for trial in range(400):
        size = int(rng.integers(1, 40)) if trial % 10 else int(rng.integers(1, 20_000))
        values = rng.lognormal(-3, 1, size=size)
        if trial % 3 == 0:
            values = np.round(values, 2).astype(np.float32)  # ties, float32 gaps as the recorder keeps them
        counts = rng.integers(0, 4, size=size)
        counts[0] += 1
        full = np.repeat(values, counts).astype(float)
        want = {
            "mean": float(np.mean(full)),
            "median": float(np.median(full)),
            "p90": float(np.percentile(full, 90)),
            "p99": float(np.percentile(full, 99)),
        }
        assert distribution(full) == want
        weighted = weighted_distribution(values, counts)
        assert math.isclose(weighted.pop("mean"), want.pop("mean"), rel_tol=1e-12)
        assert weighted == want
    assert distribution([1.0, np.nan, np.inf, 3.0]) == {"mean": 2.0, "median": 2.0, "p90": 2.8, "p99": 2.98}


def test_golden_runs_exercise_what_they_claim():
    """The goldens are not vacuous: preemption and chunked-prefill configs did preempt, every
    run completed every request, and the cases differ from each other."""
    summaries = {name: json.loads((GOLDEN / f"{name}.summary.json").read_text()) for name in CONFIGS}
    for name, summary in summaries.items():
        assert summary["completed"] == summary["requests"] == CONFIGS[name]["workload"]["requests"], name
    assert summaries["fcfs-preempt"]["preemptions"] > 0
    assert summaries["fcfs-priority-preempt"]["preemptions"] > 0
    assert summaries["fcfs-seed0"]["preemptions"] == 0
    two = pd.read_parquet(GOLDEN / "fcfs-seed2-2inst.requests.parquet")
    assert set(two["instance"]) == {0, 1}
    slices = pd.read_parquet(GOLDEN / "scls.requests.parquet")["slices"]
    assert slices.max() > 1  # SCLS re-dispatched requests slice by slice


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(
            "usage: python tests/integration/test_sim_identical.py --regenerate  (rewrites tests/data/sim_golden/)"
        )
    with tempfile.TemporaryDirectory() as folder:
        for config_name in CONFIGS:
            frames = run_config(config_name, Path(folder))
            _write_golden(config_name, *frames)
            print(config_name, len(frames[0]), "requests,", frames[2]["preemptions"], "preemptions")
