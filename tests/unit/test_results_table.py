"""The Results page's comparison logic (issue 15): display names of compared runs, delta badges
that agree with the displayed values, the catalog's units and precision, workload-difference
warnings and the export's provenance. Pure functions; the page itself is in test_results_page_app."""

from __future__ import annotations

from types import SimpleNamespace

from runners.store.models import RunEntry
from runners.views.compare import run_display_names, run_job_label


def _run(
    run_id: str, scheduler: str, seed: int = 0, rate: float = 2.0, engine: str = "sim", label: str | None = None
) -> SimpleNamespace:
    summary = {"run_id": run_id, "scheduler": scheduler, "engine": engine, "arrival_rate_rps": rate}
    config = {"config": {"workload": {"seed": seed}}}
    if label is not None:
        summary["notes"] = label  # where the Launch page records its job's label
    return SimpleNamespace(run_id=run_id, summary=RunEntry.model_validate(summary), config=config)


def test_display_names_show_the_scheduler_and_only_what_differs():
    runs = [
        _run("20261122-232748-slo-sa-sim-4ac5-01", "slo-sa", seed=3),
        _run("20261122-232748-fcfs-sim-4ac5-00", "fcfs", seed=3),
    ]
    assert run_display_names(runs) == {
        "20261122-232748-slo-sa-sim-4ac5-01": "slo-sa",
        "20261122-232748-fcfs-sim-4ac5-00": "fcfs",
    }
    runs = [
        _run("a", "fcfs", seed=0, rate=2.0),
        _run("b", "fcfs", seed=1, rate=2.0),
        _run("c", "slo-sa", seed=1, rate=4.0),
    ]
    assert run_display_names(runs) == {
        "a": "fcfs · seed 0 · 2 req/s",
        "b": "fcfs · seed 1 · 2 req/s",
        "c": "slo-sa · seed 1 · 4 req/s",
    }


def test_display_names_carry_a_differing_job_label_engine_and_stay_unique():
    runs = [
        _run("a", "fcfs", label="baseline sweep"),
        _run("b", "fcfs", label="tuned"),
        _run("c", "fcfs", engine="vllm", label="tuned"),
    ]
    assert run_display_names(runs) == {
        "a": "fcfs · sim · baseline sweep",
        "b": "fcfs · sim · tuned",
        "c": "fcfs · vllm · tuned",
    }
    twins = [_run("x", "fcfs"), _run("y", "fcfs")]
    assert run_display_names(twins) == {"x": "fcfs", "y": "fcfs #2"}
    # bare summaries work too (no config: no seed)
    assert run_display_names([RunEntry(run_id="s", scheduler="mcsf")]) == {"s": "mcsf"}


def test_job_label_is_the_runs_notes_and_an_imported_runs_source_is_not_a_job_label():
    assert run_job_label(RunEntry(), {}) is None
    assert run_job_label(RunEntry(notes=" rate study ")) == "rate study"
    assert run_job_label(RunEntry(), {"config": {"notes": "from config"}}) == "from config"
    assert run_job_label(RunEntry(notes=""), {"config": {"notes": "  "}}) is None
    assert (
        run_job_label(
            RunEntry(imported={"label": "imported from vllm 0.9"}), {"label": "imported from vllm 0.9", "imported": {}}
        )
        is None
    )


# -- defect 7: delta badges agree with the displayed values ---------------------------------------
import io  # noqa: E402

import pandas as pd  # noqa: E402

from runners.metrics.catalog import TABLE_METRICS, metric, summary_value  # noqa: E402
from runners.views.compare import (  # noqa: E402
    change_badge,
    comparison_table,
    comparison_view,
    csv_with_provenance,
    html_with_provenance,
    workload_differences,
)


def test_values_equal_at_display_precision_are_equal_and_neutral():
    e2e = metric("e2e_s.mean")  # 3 decimals: 11.6004 and 11.6001 both read 11.600
    assert e2e.format(11.6004) == e2e.format(11.6001) == "11.600"
    assert change_badge(e2e, 11.6004, 11.6001) == ("=", None)
    # the old badge was +1% red for 11.6 s vs 11.6 s: 11.66 vs 11.55 now reads as it differs
    assert change_badge(e2e, 11.66, 11.55) == ("+1.0%", False)
    # a tiny change that still shows in the values: sign and colour from the shown values
    throughput = metric("output_throughput_tps")  # 1 decimal
    assert change_badge(throughput, 1000.24, 1000.14) == ("+<0.1%", True)  # 1000.2 vs 1000.1
    assert change_badge(throughput, 1000.06, 1000.14) == ("=", None)  # both 1000.1


def test_badge_direction_comes_from_the_catalog_and_shares_change_in_points():
    attainment = metric("slo_attainment")  # higher is better, percent, 1 decimal
    assert change_badge(attainment, 0.901, 0.953) == ("-5.2 pts", False)
    assert change_badge(attainment, 0.95349, 0.95301) == ("=", None)  # 95.3 vs 95.3
    ttft = metric("ttft_s.p90")  # lower is better
    assert change_badge(ttft, 2.0, 4.0) == ("-50%", True)
    assert change_badge(ttft, 4.2, 4.0) == ("+5.0%", False)
    assert change_badge(metric("preemptions"), 3, 0) == ("+3", False)  # from 0: a difference
    assert change_badge(metric("contention.waiting_peak"), 30, 10) == ("+200%", None)  # the setting: no colour
    assert change_badge(ttft, None, 4.0) == ("", None)


def test_comparison_view_rows_columns_and_verdicts_by_hand():
    base = RunEntry.model_validate(
        {
            "run_id": "a",
            "scheduler": "fcfs",
            "slo_attainment": 0.953333,
            "e2e_s": {"mean": 11.6004},
            "tpot_s": {"mean": 0.0412, "median": 0.040},
            "total_throughput_tps": 1500.0,
            "output_throughput_tps": 1000.0,
            "itl_s": {"mean": 0.0301},
        }
    )
    other = RunEntry.model_validate(
        {
            "run_id": "b",
            "scheduler": "slo-sa",
            "slo_attainment": 0.90,
            "e2e_s": {"mean": 11.6001},
            "tpot_s": {"mean": 0.0390},
            "total_throughput_tps": 1400.0,
            "output_throughput_tps": 1000.0,
        }
    )
    texts, verdicts = comparison_view([other, base], baseline="a")
    assert list(texts.columns) == ["metric", "fcfs (baseline)", "slo-sa"]
    rows = texts.set_index("metric")
    judged = verdicts.assign(metric=texts["metric"]).set_index("metric")
    assert rows.loc["SLO attainment (%)", "fcfs (baseline)"] == "95.3"  # not 95.3333
    assert rows.loc["SLO attainment (%)", "slo-sa"] == "90.0 (-5.3 pts)"
    assert judged.loc["SLO attainment (%)", "slo-sa"] is False
    assert rows.loc["E2E mean (s)", "slo-sa"] == "11.600 (=)" and judged.loc["E2E mean (s)", "slo-sa"] is None
    assert rows.loc["TPOT mean (ms)", "fcfs (baseline)"] == "41.2"  # ms, from the catalog
    assert rows.loc["TPOT mean (ms)", "slo-sa"] == "39.0 (-5.3%)" and judged.loc["TPOT mean (ms)", "slo-sa"]
    assert rows.loc["TPOT median (ms)", "slo-sa"] == "-"  # not in its summary
    assert rows.loc["ITL mean (ms)", "fcfs (baseline)"] == "30.1"
    assert rows.loc["input throughput (tok/s)", "fcfs (baseline)"] == "500.0"  # total - output
    assert rows.loc["input throughput (tok/s)", "slo-sa"] == "400.0 (-20%)"
    for label in ("TTFT median (s)", "E2E median (s)", "ITL p99 (ms)", "queue median (s)", "queue p90 (s)"):
        assert label in rows.index
    assert "replies shorter than asked" not in rows.index  # real engines only
    assert len(texts) == len([m for m in TABLE_METRICS if not m.real_engines_only])


def test_input_throughput_is_stored_or_total_minus_output():
    assert summary_value({"total_throughput_tps": 30.0, "output_throughput_tps": 10.0}, "input_throughput_tps") == 20
    assert summary_value({"input_throughput_tps": 7.0}, "input_throughput_tps") == 7.0
    assert summary_value({"output_throughput_tps": 10.0}, "input_throughput_tps") is None


# -- workloads that differ --------------------------------------------------------------------------
def _configured(
    run_id: str,
    scheduler: str,
    requests: int = 200,
    rate: float = 2.0,
    ratio=None,
    engine="sim",
    chat_path=None,
    seed=0,
) -> SimpleNamespace:
    workload = {
        "requests": requests,
        "seed": seed,
        "ratio": ratio or {"chat": 1.0, "code": 1.0},
        "arrival": {"process": "poisson", "rate": rate},
        "chat": {"kind": "jsonl" if chat_path else "synthetic", "path": chat_path},
        "code": {"kind": "synthetic", "path": None},
    }
    config = {"config": {"workload": workload, "engine": {"kind": engine, "instances": 1}}}
    summary = RunEntry(run_id=run_id, scheduler=scheduler, engine=engine, arrival_rate_rps=rate)
    return SimpleNamespace(run_id=run_id, summary=summary, config=config)


def test_workload_differences_name_what_differs_and_which_runs():
    same = [_configured("a", "fcfs"), _configured("b", "slo-sa")]
    assert workload_differences(same) == []
    runs = [
        _configured("a", "fcfs", requests=200),
        _configured("b", "slo-sa", requests=500, rate=4.0),
        _configured("c", "mcsf", ratio={"chat": 3.0, "code": 1.0}, engine="vllm", chat_path="chat.jsonl"),
    ]
    lines = workload_differences(runs)
    names = {"a": "fcfs", "b": "slo-sa", "c": "mcsf"}
    assert run_display_names(runs) != names  # the rate and engine differ, so names carry them
    lines = workload_differences(runs, names)
    assert lines == [
        "requests differ: 200 (fcfs, mcsf); 500 (slo-sa)",
        "arrival differ: poisson 2 req/s (fcfs, mcsf); poisson 4 req/s (slo-sa)",
        "ratio differ: chat 1 : code 1 (fcfs, slo-sa); chat 3 : code 1 (mcsf)",
        "dataset differ: chat synthetic, code synthetic (fcfs, slo-sa); chat jsonl chat.jsonl, code synthetic (mcsf)",
        "engine differ: sim (fcfs, slo-sa); vllm (mcsf)",
    ]
    # a seed alone is no workload difference to warn about (it is in the names)
    assert workload_differences([_configured("a", "fcfs", seed=0), _configured("b", "fcfs", seed=1)]) == []


# -- exports carry config, seeds and versions -------------------------------------------------------
def test_csv_and_html_exports_carry_each_runs_config_seed_and_versions():
    runs = [_configured("a", "fcfs", seed=3), _configured("b", "slo-sa", seed=3)]
    for run in runs:
        run.config["versions"] = {"schedlab": "0.1.0", "python": "3.11.7"}
        run.summary.slo_attainment = 0.5
    table = comparison_table([run.summary for run in runs], "a")
    text = csv_with_provenance(table, runs)
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert '"seed": 3' in header[1] and '"schedlab": "0.1.0"' in header[1] and '"run_id": "a"' in header[1]
    assert header[2].startswith("# config ") and '"requests": 200' in header[2]
    back = pd.read_csv(io.StringIO(text), comment="#")
    assert back.set_index("metric").loc["SLO attainment (%)", "fcfs"] == 50.0  # headed by the run's name
    page = html_with_provenance("<html><body><h1>t</h1></body></html>", runs)
    assert page.index("<footer>") < page.index("</body>") and "seed 3" in page and "0.1.0" in page


def test_comparison_html_has_every_row_ids_on_hover_coloured_badges_and_escapes():
    from runners.views.compare import comparison_html

    base = RunEntry(run_id="r<1>", scheduler="fcfs", slo_attainment=0.9, preemptions=2)
    other = RunEntry(run_id="r2", scheduler="a&b", slo_attainment=0.8, preemptions=2)
    texts, verdicts = comparison_view([base, other], baseline="r<1>")
    page = comparison_html(texts, verdicts, ["r<1>", "r2"])
    assert "<th title='run r&lt;1&gt;' style='text-align:right'>fcfs (baseline)</th>" in page
    assert "<th title='run r2' style='text-align:right'>a&amp;b</th>" in page
    assert page.count("<tr>") == len(texts) + 1
    assert "80.0 <span style='white-space:nowrap;color: #cf222e'>(-10.0 pts)</span>" in page  # worse: red
    assert "2 <span style='white-space:nowrap;'>(=)</span>" in page  # equal: plain


def test_an_imported_run_adds_the_definition_column_last():
    from runners.views.compare import comparison_html

    own = RunEntry.model_validate({"run_id": "own", "scheduler": "fcfs", "tpot_s": {"mean": 0.04}})
    theirs = RunEntry.model_validate(
        {
            "run_id": "theirs",
            "tpot_s": {"mean": 0.05},
            "imported": {
                "label": "imported from GuideLLM 0.8.1",
                "tool_name": "GuideLLM",
                "metrics": {"slo_attainment": "not measured"},
                "definitions": [{"metric": "tpot_s", "tool_metric": "time_per_output_token_ms", "tool_value": 0.045}],
            },
        }
    )
    texts, verdicts = comparison_view([own, theirs], baseline="own")
    assert list(texts.columns) == ["metric", "fcfs (baseline)", "imported from GuideLLM 0.8.1", "definition"]
    rows = texts.set_index("metric")
    assert rows.loc["TPOT mean (ms)", "definition"] == (
        "theirs: definition differs (time_per_output_token_ms, theirs 45.0 ms mean)"
    )
    assert rows.loc["SLO attainment (%)", "definition"] == "theirs: not measured by GuideLLM"
    page = comparison_html(texts, verdicts, ["own", "theirs"])
    assert page.count("<th ") == 4 and page.index("50.0 <span") < page.index("definition differs")
