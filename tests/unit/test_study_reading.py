"""Reading a study back: the identical-decisions note (CLI show/compare), deleting a study by id,
and the metric catalog every table reads (labels, units, formats). Tiny simulator studies."""

from __future__ import annotations

import json

import pytest

from runners.app.cli import main
from runners.errors import SchedlabError
from runners.metrics.catalog import REQUEST_METRICS, RUN_METRICS, TABLE_METRICS, metric, metric_by_label
from runners.store.models import RunEntry
from runners.store.result_store import list_runs
from runners.study.runner import delete_study, identical_decisions_note, read_study
from runners.views.compare import comparison_table

# no queue: 20 requests at 0.5 req/s on 256 slots, every scheduler dispatches on arrival
CALM = ["--engine", "sim", "--requests", "20", "--rate", "0.5", "--quiet"]
# a queue: one slot at 6 req/s
BUSY = ["--engine", "sim", "--requests", "20", "--rate", "6", "--set", "engine.max_num_seqs=1", "--quiet"]


def cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_an_uncontended_study_says_its_schedulers_made_identical_decisions(results_dir, capsys):
    code, out, err = cli(
        ["run", *CALM, "--scheduler", "fcfs,slo-sa", "--seeds", "2", "--run-id", "calm", "--out", str(results_dir)],
        capsys,
    )
    assert code == 0, err
    assert "these runs made identical decisions" in out and "engine.max_num_seqs" in out
    note = identical_decisions_note(results_dir, read_study(results_dir / "calm"))
    assert note is not None and note in out
    peak = max(
        json.loads((results_dir / f"calm-{name}-s{seed}" / "summary.json").read_text())["contention"]["waiting_peak"]
        for name in ("fcfs", "slo-sa")
        for seed in (0, 1)
    )
    assert (f"max waiting {peak}" in note) if peak else ("never had a queue (max waiting 0)" in note)
    for command in ("show", "compare"):
        assert note in cli([command, "calm", "--out", str(results_dir)], capsys)[1]


def test_a_contended_study_has_no_identical_decisions_note(results_dir, capsys):
    code, out, err = cli(
        ["run", *BUSY, "--scheduler", "fcfs,slo-sa", "--seeds", "2", "--run-id", "busy", "--out", str(results_dir)],
        capsys,
    )
    assert code == 0, err
    assert "identical decisions" not in out
    assert identical_decisions_note(results_dir, read_study(results_dir / "busy")) is None


def test_delete_a_study_removes_it_and_its_members_only(results_dir, capsys):
    assert (
        cli(
            ["run", *BUSY, "--scheduler", "fcfs,static", "--seeds", "2", "--run-id", "gone", "--out", str(results_dir)],
            capsys,
        )[0]
        == 0
    )
    assert (
        cli(["run", *BUSY, "--scheduler", "fcfs", "--run-id", "gone-fcfs-s9", "--out", str(results_dir)], capsys)[0]
        == 0
    )  # looks like a member, is not listed by the study
    code, out, err = cli(["delete", "gone", "--out", str(results_dir)], capsys)
    assert code == 0, err
    assert "deleted study gone: 4 member runs" in out
    assert sorted(p.name for p in results_dir.iterdir()) == ["gone-fcfs-s9"]


def test_delete_study_refuses_a_record_that_names_foreign_runs(results_dir, capsys):
    assert (
        cli(
            ["run", *BUSY, "--scheduler", "fcfs,static", "--seeds", "2", "--run-id", "st", "--out", str(results_dir)],
            capsys,
        )[0]
        == 0
    )
    assert cli(["run", *BUSY, "--scheduler", "fcfs", "--run-id", "keep", "--out", str(results_dir)], capsys)[0] == 0
    path = results_dir / "st" / "study.json"
    record = json.loads(path.read_text())
    record["runs"][0]["run_id"] = "keep"
    path.write_text(json.dumps(record))
    with pytest.raises(SchedlabError, match="'keep', not a member id of this study"):
        delete_study(results_dir, "st")
    assert len(list_runs(results_dir)) == 5  # nothing deleted
    for bad in ("../st", "st/", "*"):
        with pytest.raises(SchedlabError):
            delete_study(results_dir, bad)
    (results_dir / "st" / "notes.txt").write_text("mine")
    record["runs"][0]["run_id"] = "st-fcfs-s0"
    path.write_text(json.dumps(record))
    with pytest.raises(SchedlabError, match="'notes.txt' besides study.json"):
        delete_study(results_dir, "st")
    assert len(list_runs(results_dir)) == 5


# -- the catalog ---------------------------------------------------------------------------------------
def test_every_table_reads_one_catalog():
    summary = {"run_id": "a", "slo_attainment": 0.5, "tpot_s": {"mean": 0.0241}, "G": 0.0125}
    table = comparison_table(
        [RunEntry.model_validate(summary), RunEntry.model_validate({**summary, "run_id": "b", "slo_attainment": 0.75})],
        "a",
    )
    # the single-run table reads TABLE_METRICS (RUN_METRICS with medians, ITL, queue time and
    # input tokens/s); studies keep RUN_METRICS, so study.json does not change
    assert list(table["metric"]) == [m.label for m in TABLE_METRICS if not m.real_engines_only]
    assert {m.key for m in RUN_METRICS} <= {m.key for m in TABLE_METRICS}
    row = table.set_index("metric").loc[metric("tpot_s.mean").label]
    assert row["a"] == pytest.approx(24.1)  # TPOT in ms
    assert table.set_index("metric").loc["SLO attainment (%)", "change b"] == pytest.approx(25.0)  # 75 - 50 pts
    assert metric_by_label("TPOT mean (ms)") is metric("tpot_s.mean")


def test_one_unit_per_quantity():
    tpot = [m for m in RUN_METRICS + REQUEST_METRICS if m.key.startswith("tpot_s")]
    assert {m.unit for m in tpot} == {"ms"} and {m.scale for m in tpot} == {1000.0}
    for m in RUN_METRICS + REQUEST_METRICS:
        assert m.unit in m.label or m.unit in ("", "requests"), m.key
    shares = [m for m in RUN_METRICS if m.unit == "%"]
    assert all(m.scale == 100.0 for m in shares)


@pytest.mark.parametrize(
    "key, value, text",
    [
        ("slo_attainment", 0.4567, "45.7"),
        ("tpot_s.mean", 0.02412, "24.1"),
        ("G", 0.0089243, "0.008924"),
        ("completed", 1000, "1000"),
        ("ttft_s.mean", None, "-"),
        ("contention.waiting_peak", -0.3, "0"),
        ("e2e_s.p99", float("nan"), "-"),
    ],
)
def test_format(key, value, text):
    assert metric(key).format(value) == text


def test_changes_and_intervals():
    attainment = metric("slo_attainment")
    assert attainment.format_change(0.176) == "+17.6 pts"
    assert attainment.format_interval(0.144, 0.208) == "[14.4, 20.8]"
    assert attainment.format_interval(None, 0.2) == "[no interval]"
    assert metric("tpot_s.mean").format_change(-0.0005) == "-0.5 ms"
