"""The Results page's comparison logic (issue 15): display names of compared runs, delta badges
that agree with the displayed values, the catalog's units and precision, workload-difference
warnings and the export's provenance. Pure functions; the page itself is in test_results_page_app."""

from __future__ import annotations

from types import SimpleNamespace

from runners.compare import run_display_names, run_job_label


def _run(run_id: str, scheduler: str, seed: int = 0, rate: float = 2.0, engine: str = "sim",
         label: str | None = None) -> SimpleNamespace:
    summary = {"run_id": run_id, "scheduler": scheduler, "engine": engine, "arrival_rate_rps": rate}
    config = {"config": {"workload": {"seed": seed}}}
    if label is not None:
        summary["job_label"] = label
    return SimpleNamespace(run_id=run_id, summary=summary, config=config)


def test_display_names_show_the_scheduler_and_only_what_differs():
    runs = [_run("20261122-232748-slo-sa-sim-4ac5-01", "slo-sa", seed=3),
            _run("20261122-232748-fcfs-sim-4ac5-00", "fcfs", seed=3)]
    assert run_display_names(runs) == {"20261122-232748-slo-sa-sim-4ac5-01": "slo-sa",
                                       "20261122-232748-fcfs-sim-4ac5-00": "fcfs"}
    runs = [_run("a", "fcfs", seed=0, rate=2.0), _run("b", "fcfs", seed=1, rate=2.0),
            _run("c", "slo-sa", seed=1, rate=4.0)]
    assert run_display_names(runs) == {"a": "fcfs · seed 0 · 2 req/s", "b": "fcfs · seed 1 · 2 req/s",
                                       "c": "slo-sa · seed 1 · 4 req/s"}


def test_display_names_carry_a_differing_job_label_engine_and_stay_unique():
    runs = [_run("a", "fcfs", label="baseline sweep"), _run("b", "fcfs", label="tuned"),
            _run("c", "fcfs", engine="vllm", label="tuned")]
    assert run_display_names(runs) == {"a": "fcfs · sim · baseline sweep", "b": "fcfs · sim · tuned",
                                       "c": "fcfs · vllm · tuned"}
    twins = [_run("x", "fcfs"), _run("y", "fcfs")]
    assert run_display_names(twins) == {"x": "fcfs", "y": "fcfs #2"}
    # bare summaries work too (no config: no seed)
    assert run_display_names([{"run_id": "s", "scheduler": "mcsf"}]) == {"s": "mcsf"}


def test_job_label_is_read_tolerantly_and_an_imported_runs_source_is_not_a_job_label():
    assert run_job_label({}, {}) is None
    assert run_job_label({"job_label": " rate study "}) == "rate study"
    assert run_job_label({}, {"config": {"label": "from config"}}) == "from config"
    assert run_job_label({"imported": {"label": "imported from vllm 0.9"}},
                         {"label": "imported from vllm 0.9", "imported": {}}) is None
