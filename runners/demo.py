"""The Demo page's ready comparison, on the simulator, and the bundled results that replay it.

Setting (chosen to give the schedulers something to decide, not to favour one): the mixed
chat + code stand-in workload, 1,000 requests arriving as a Poisson process at 2 req/s, the
paper SLOs, one simulated Qwen2.5-7B / 2 x V100 instance whose engine runs at most 16 requests
at a time (max_num_seqs 16), so requests queue at the gateway when load exceeds its capacity
of about 1.8 req/s. Every scheduler keeps its registry defaults, except static batching's batch
size, set to the engine's 16.

``python -m runners demo`` reruns it and rewrites ``results/demo-*`` (the bundled copies).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from runners.config import RunConfig, parse_config
from runners.result_store import DEFAULT_RESULTS_DIR, delete_run, list_runs, owned_run_folder

DEMO_PREFIX = "demo-"
DEMO_SCHEDULERS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("fcfs", {}),
    ("static", {"batch_size": 16}),
    ("slo-sa", {}),
    ("dynamic-mem", {}),
    ("dynamic-sla", {}),
)
DEMO_BASELINE = "fcfs"


def demo_configs(run_prefix: str = DEMO_PREFIX, pace: float | None = None) -> list[RunConfig]:
    """One config per demo scheduler, run ids ``<prefix><scheduler>``."""
    engine: dict[str, Any] = {"kind": "sim", "max_num_seqs": 16}
    if pace is not None:
        engine["pace"] = pace
    return [
        parse_config({
            "run_id": f"{run_prefix}{name}",
            "engine": engine,
            "workload": {"requests": 1000, "seed": 0, "arrival": {"process": "poisson", "rate": 2.0}},
            "slo": {"preset": "paper"},
            "scheduler": {"name": name, "params": params},
            "notes": "schedlab demo comparison",
        })
        for name, params in DEMO_SCHEDULERS
    ]


def demo_summaries(results_root: str | Path = DEFAULT_RESULTS_DIR) -> list[dict[str, Any]]:
    """Summaries of the bundled demo runs that exist and finished, in DEMO_SCHEDULERS order."""
    by_id = {s["run_id"]: s for s in list_runs(results_root)}
    found = []
    for name, _ in DEMO_SCHEDULERS:
        summary = by_id.get(f"{DEMO_PREFIX}{name}")
        if summary is not None and summary["status"] == "done" and isinstance(summary.get("scheduler"), str):
            found.append(summary)
    return found


def make_demo_results(results_root: str | Path = DEFAULT_RESULTS_DIR) -> list[str]:
    """Run the demo comparison and (re)write ``demo-*`` under ``results_root``. An existing
    ``demo-*`` that is not a run folder of its own (a symbolic link, a file) stops it with one
    line before anything is removed."""
    from runners.benchmark import execute_run

    root = Path(results_root)
    configs = demo_configs()
    existing = [str(config.run_id) for config in configs if os.path.lexists(root / str(config.run_id))]
    for run_id in existing:
        owned_run_folder(root, run_id, "replace")
    made = []
    for config in configs:
        if str(config.run_id) in existing:
            delete_run(root, str(config.run_id))
        outcome = execute_run(config, root)
        made.append(f"{outcome.run_id}: {outcome.status}")
    return made
