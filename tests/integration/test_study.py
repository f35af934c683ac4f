"""Studies (runners/study/runner.py and `run --seeds`): seed lists, the paired design, study.json against
the statistics of its member summaries, a failed member, baseline choice, the size guard, and
show / compare of a study id. Tiny simulator runs (20 requests, 3 seeds)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import runners.run.benchmark
from runners.app.cli import main
from runners.errors import ConfigError
from runners.metrics.catalog import RUN_METRICS, summary_value
from runners.metrics.seed_statistics import paired_comparison, relative_change, summarize
from runners.run.config import parse_config
from runners.store.result_store import list_runs, read_summary
from runners.study.runner import MAX_RUNS_UNCONFIRMED, check_size, parse_seeds, plan_study

# a queue forms (one slot, 6 req/s): schedulers differ
SMALL = ["--engine", "sim", "--requests", "20", "--rate", "6", "--set", "engine.max_num_seqs=1", "--quiet"]


def cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def study_record(results_dir, study_id):
    return json.loads((results_dir / study_id / "study.json").read_text())


@pytest.mark.parametrize(
    "text, seeds", [("10", list(range(10))), ("1", [0]), ("3,7,11", [3, 7, 11]), (" 5 , 2 ", [5, 2])]
)
def test_seeds_parsing(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0", "a count must be 1"),
        ("abc", "not a number"),
        ("3,,7", "not a number"),
        ("1.5", "not a number"),
        ("3,3", "listed twice"),
        ("-1,4", "out of range"),
        ("99999999999", "a count must be 1"),
    ],
)
def test_bad_seeds_are_one_line_naming_the_flag(text, expected, results_dir, capsys):
    with pytest.raises(ConfigError, match=expected) as info:
        parse_seeds(text)
    assert info.value.field == "--seeds"
    code, out, err = cli(
        ["run", *SMALL, "--scheduler", "fcfs,slo-sa", f"--seeds={text}", "--out", str(results_dir)], capsys
    )
    assert code == 2 and err.startswith("error: --seeds: ") and err.count("\n") == 1 and out == ""
    assert list(results_dir.iterdir()) == []  # nothing written


def test_study_is_paired_and_its_file_matches_the_member_statistics(results_dir, capsys):
    code, out, err = cli(
        ["run", *SMALL, "--scheduler", "fcfs,slo-sa", "--seeds", "3", "--run-id", "st", "--out", str(results_dir)],
        capsys,
    )
    assert code == 0, err
    record = study_record(results_dir, "st")
    assert record["schema_version"] == 5 and record["study_id"] == "st" and record["baseline"] == "fcfs"
    assert record["status"] == "done" and record["seeds"] == [0, 1, 2]
    assert [(r["run_id"], r["scheduler"], r["seed"], r["rate"], r["status"]) for r in record["runs"]] == [
        (f"st-{name}-s{seed}", name, seed, 6.0, "done") for name in ("fcfs", "slo-sa") for seed in (0, 1, 2)
    ]
    # paired: at each seed both schedulers got the same requests at the same times; seeds differ
    arrivals = {
        (name, seed): pd.read_parquet(results_dir / f"st-{name}-s{seed}" / "requests.parquet")
        .set_index("request_id")[["arrival_s", "input_tokens"]]
        .sort_index()
        for name in ("fcfs", "slo-sa")
        for seed in (0, 1, 2)
    }
    for seed in (0, 1, 2):
        pd.testing.assert_frame_equal(arrivals[("fcfs", seed)], arrivals[("slo-sa", seed)])
    assert not arrivals[("fcfs", 0)]["arrival_s"].equals(arrivals[("fcfs", 1)]["arrival_s"])
    # statistics recomputed from the member summaries
    summaries = {
        (name, seed): read_summary(results_dir / f"st-{name}-s{seed}")
        for name in ("fcfs", "slo-sa")
        for seed in (0, 1, 2)
    }
    assert set(record["statistics"]) == {metric.key for metric in RUN_METRICS}
    assert record["rates"] == [] and record["statistics_by_rate"] == [{"rate": 6.0, "statistics": record["statistics"]}]
    for metric in RUN_METRICS:
        values = {
            name: {seed: summary_value(summaries[(name, seed)], metric.key) for seed in (0, 1, 2)}
            for name in ("fcfs", "slo-sa")
        }
        entry = record["statistics"][metric.key]
        for name in ("fcfs", "slo-sa"):
            assert entry["schedulers"][name] == pytest.approx(summarize(list(values[name].values())).as_dict())
        if metric.describes_setting:  # contention describes the setting: no verdict
            assert entry["vs_baseline"] == {}
            continue
        expected = paired_comparison(values["fcfs"], values["slo-sa"], metric.higher_is_better).as_dict()
        relative = relative_change(values["fcfs"], values["slo-sa"]).as_dict()
        assert entry["vs_baseline"] == {"slo-sa": pytest.approx({**expected, "relative": pytest.approx(relative)})}
    attainment = record["statistics"]["slo_attainment"]
    assert attainment["schedulers"]["fcfs"]["n"] == 3 and attainment["schedulers"]["fcfs"]["ci_low"] is not None
    assert attainment["schedulers"]["slo-sa"]["mean"] != attainment["schedulers"]["fcfs"]["mean"]
    # the CLI table: mean [interval], paired diff, wins, verdict
    line = next(line for line in out.splitlines() if line.startswith("SLO attainment (%)") and "slo-sa" in line)
    pair = attainment["vs_baseline"]["slo-sa"]
    assert f"{pair['wins']}/3" in line and pair["verdict"] in line and "[" in line
    # the study folder is not a run; its members are
    listed = {r.run_id: r.status for r in list_runs(results_dir)}
    assert "st" not in listed and len(listed) == 6 and set(listed.values()) == {"done"}


def test_failed_member_is_dropped_pairwise_and_the_rest_run(results_dir, capsys, monkeypatch):
    real = runners.run.benchmark.execute_run

    def crashing(config, *args, **kwargs):
        if config.run_id == "st-slo-sa-s1":
            raise RuntimeError("engine exploded")
        return real(config, *args, **kwargs)

    monkeypatch.setattr(runners.run.benchmark, "execute_run", crashing)
    code, out, _ = cli(
        [
            "run",
            *SMALL,
            *"--scheduler fcfs,slo-sa --seeds 3 --workers 1 --run-id st --out".split(),
            str(results_dir),
        ],
        capsys,
    )
    assert code == 1
    record = study_record(results_dir, "st")
    statuses = {r["run_id"]: (r["status"], r["error"]) for r in record["runs"]}
    assert statuses["st-slo-sa-s1"] == ("failed", "RuntimeError: engine exploded")
    assert sum(status == "done" for status, _ in statuses.values()) == 5 and record["status"] == "failed"
    attainment = record["statistics"]["slo_attainment"]
    assert attainment["schedulers"]["slo-sa"]["n"] == 2 and attainment["schedulers"]["fcfs"]["n"] == 3
    pair = attainment["vs_baseline"]["slo-sa"]
    assert pair["n_pairs"] == 2 and pair["dropped"] == 1 and "1 seed(s)" in pair["note"]
    assert "st-slo-sa-s1: failed: RuntimeError: engine exploded" in out and "(1 dropped)" in out


def test_cancel_skips_the_rest_and_keeps_study_json(results_dir, capsys, monkeypatch):
    from runners.study.runner import run_study

    config = parse_config(
        {
            "engine": {"kind": "sim", "max_num_seqs": 1},
            "run_id": "st",
            "workload": {"requests": 20, "arrival": {"rate": 6}},
            "trials": {"seeds": [0, 1], "schedulers": ["fcfs", "slo-sa"], "workers": 1},
        }
    )
    started = []
    result = run_study(
        plan_study(config),
        results_dir,
        progress=lambda d, t, m: started.append(m.run_id),
        should_stop=lambda: len(started) > 0,
    )
    record = study_record(results_dir, "st")
    assert record == result.record.model_dump(mode="json", exclude_unset=True)
    assert [r["status"] for r in record["runs"]] == ["cancelled", "skipped", "skipped", "skipped"]
    assert record["status"] == "cancelled" and (results_dir / "st-fcfs-s0" / "summary.json").is_file()


def test_baseline_selection(results_dir, capsys):
    config = parse_config({"trials": {"seeds": [4, 9], "schedulers": ["fcfs", "slo-sa", "mcsf"], "baseline": "mcsf"}})
    plan = plan_study(config, "x")
    assert plan.baseline == "mcsf" and plan.schedulers == ["mcsf", "fcfs", "slo-sa"]
    assert [(m.scheduler, m.seed, m.config.workload.seed, m.config.scheduler.name) for m in plan.members][:2] == [
        ("fcfs", 4, 4, "fcfs"),
        ("fcfs", 9, 9, "fcfs"),
    ]
    assert plan.members[0].config.trials.seeds == [] and plan.members[0].run_id == "x-fcfs-s4"
    code, out, _ = cli(
        [
            "run",
            *SMALL,
            *"--scheduler fcfs,slo-sa --seeds 2 --baseline slo-sa --run-id st --out".split(),
            str(results_dir),
        ],
        capsys,
    )
    assert code == 0 and study_record(results_dir, "st")["baseline"] == "slo-sa"
    assert set(study_record(results_dir, "st")["statistics"]["G"]["vs_baseline"]) == {"fcfs"}
    code, _, err = cli(
        [
            "run",
            *SMALL,
            *"--scheduler fcfs,slo-sa --seeds 2 --baseline sjf --run-id other --out".split(),
            str(results_dir),
        ],
        capsys,
    )
    assert (
        code == 2 and err == "error: --baseline: 'sjf' is not a scheduler of the study; expected one of: fcfs, slo-sa\n"
    )
    assert not (results_dir / "other").exists()


def test_more_than_1000_runs_need_yes(results_dir, capsys):
    config = parse_config({"trials": {"seeds": list(range(501)), "schedulers": ["fcfs", "slo-sa"]}})
    plan = plan_study(config, "big")
    assert len(plan.members) == 1002 > MAX_RUNS_UNCONFIRMED
    with pytest.raises(ConfigError, match="1,002 runs.*add --yes"):
        check_size(plan, confirmed=False)
    check_size(plan, confirmed=True)
    code, _, err = cli(
        ["run", *SMALL, "--scheduler", "fcfs,slo-sa", "--seeds", "501", "--out", str(results_dir)], capsys
    )
    assert code == 2 and "add --yes" in err and list(results_dir.iterdir()) == []


def test_show_and_compare_a_study_id(results_dir, capsys):
    assert (
        cli(
            ["run", *SMALL, "--scheduler", "fcfs,slo-sa", "--seeds", "2", "--run-id", "st", "--out", str(results_dir)],
            capsys,
        )[0]
        == 0
    )
    record = study_record(results_dir, "st")
    for command in ("show", "compare"):
        code, out, _ = cli([command, "st", "--out", str(results_dir)], capsys)
        assert code == 0 and "study st (done)" in out and "G (1/s)" in out and "diff vs fcfs" in out
        g = record["statistics"]["G"]["schedulers"]["slo-sa"]
        low, cut = max(g["ci_low"], 0.0), g["ci_low"] < 0  # G is never below 0: the interval is cut there, marked *
        assert f"{g['mean']:.4g} [{low:.4g}, {g['ci_high']:.4g}]{'*' if cut else ''}" in out
    code, out, _ = cli(["show", "st-fcfs-s0", "--out", str(results_dir)], capsys)  # members still show as runs
    assert code == 0 and "run st-fcfs-s0 (done)" in out
    code, out, _ = cli(["compare", "st-fcfs-s0", "st-slo-sa-s0", "--out", str(results_dir)], capsys)
    assert code == 0 and "change = run - st-fcfs-s0" in out and "1 seed: no interval" in out
    code, _, err = cli(["compare", "st", "st-fcfs-s0", "--out", str(results_dir)], capsys)
    assert code == 2 and "expected one study id" in err


def test_one_scheduler_one_seed_is_an_ordinary_run(results_dir, capsys):
    code, out, _ = cli(["run", *SMALL, "--scheduler", "fcfs", "--run-id", "one", "--out", str(results_dir)], capsys)
    assert code == 0 and "run one: done" in out and [p.name for p in results_dir.iterdir()] == ["one"]


def test_baseline_outside_a_study_is_refused(results_dir, capsys):
    code, _, err = cli(
        ["run", *SMALL, "--scheduler", "fcfs", "--baseline", "slo-sa", "--out", str(results_dir)], capsys
    )
    assert code == 2 and err.startswith("error: --baseline: 'slo-sa' is not a scheduler of this run")
    assert list(results_dir.iterdir()) == []


def test_study_from_a_config_file_with_one_scheduler(tmp_path, results_dir, capsys):
    file = tmp_path / "study.yaml"
    file.write_text(
        "engine: {kind: sim, max_num_seqs: 1}\nworkload: {requests: 20, arrival: {rate: 6}}\n"
        "scheduler: {name: slo-sa}\ntrials: {seeds: [5, 8]}\nrun_id: cf\n"
    )
    code, out, _ = cli(["run", "--config", str(file), "--quiet", "--out", str(results_dir)], capsys)
    assert code == 0 and "study cf: done" in out
    record = study_record(results_dir, "cf")
    assert record["baseline"] == "slo-sa" and [r["run_id"] for r in record["runs"]] == ["cf-slo-sa-s5", "cf-slo-sa-s8"]
    assert (
        record["statistics"]["G"]["schedulers"]["slo-sa"]["n"] == 2 and record["statistics"]["G"]["vs_baseline"] == {}
    )
    member = json.loads((results_dir / "cf-slo-sa-s8" / "config.json").read_text())["config"]
    assert member["workload"]["seed"] == 8 and member["trials"]["seeds"] == []  # reruns the one run


@pytest.mark.parametrize(
    "text, expected",
    [
        ("{", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"schema_version": 1, "study_id": "st", "baseline": "fcfs", "runs": []}', "'statistics' is missing"),
        (
            '{"schema_version": 1, "study_id": "st", "baseline": "fcfs", "runs": [],'
            ' "schedulers": ["fcfs", 3], "statistics": {}}',
            "'schedulers' is not a list",
        ),
        (
            '{"schema_version": 3, "study_id": "st", "baseline": "fcfs", "statistics": {},'
            ' "runs": [{"run_id": "st-fcfs-s0", "scheduler": "fcfs", "seed": "3"}]}',
            "'runs[0].seed' is '3': input should be a valid integer; expected a study record",
        ),
        (
            '{"schema_version": 3, "study_id": "st", "baseline": "fcfs", "statistics": {},'
            ' "runs": [{"run_id": "st-fcfs-s0", "scheduler": "fcfs", "seed": 0, "rate": "fast"}]}',
            "'runs[0].rate' is 'fast': input should be a number; expected a study record",
        ),
    ],
)
def test_damaged_study_json_is_one_line(text, expected, results_dir, capsys):
    (results_dir / "st").mkdir()
    (results_dir / "st" / "study.json").write_text(text)
    for command in ("show", "compare"):
        code, out, err = cli([command, "st", "--out", str(results_dir)], capsys)
        assert code == 2 and err.startswith("error: ") and expected in err and err.count("\n") == 1


def test_each_scheduler_of_a_study_takes_the_parameters_it_has(results_dir, capsys):
    code, _, err = cli(
        [
            "run",
            *SMALL,
            *"--scheduler fcfs,static --batch-size 4 --seeds 1 --run-id st --out".split(),
            str(results_dir),
        ],
        capsys,
    )
    assert code == 0, err
    params = {
        name: json.loads((results_dir / f"st-{name}-s0" / "config.json").read_text())["config"]["scheduler"]
        for name in ("fcfs", "static")
    }
    assert params == {
        "fcfs": {"name": "fcfs", "params": {}, "decide_limit_s": 30.0},
        "static": {"name": "static", "params": {"batch_size": 4}, "decide_limit_s": 30.0},
    }
    code, _, err = cli(
        [
            "run",
            *SMALL,
            *"--scheduler fcfs,static --set scheduler.params.bogus=1 --seeds 1 --run-id other --out".split(),
            str(results_dir),
        ],
        capsys,
    )
    assert code == 2 and err.startswith("error: scheduler.params.bogus: no scheduler of the study takes it")
    assert not (results_dir / "other").exists()


def test_study_over_rates_has_statistics_per_rate(results_dir, capsys):
    code, out, err = cli(
        [
            "run",
            *[a for a in SMALL if a not in ("--rate", "6")],
            *"--scheduler fcfs,slo-sa --seeds 2 --rates 3,9 --run-id st --out".split(),
            str(results_dir),
        ],
        capsys,
    )
    assert code == 0, err
    record = study_record(results_dir, "st")
    assert record["rates"] == [3.0, 9.0] and record["statistics"] == {}
    assert [r["run_id"] for r in record["runs"]][:3] == ["st-fcfs-r3-s0", "st-fcfs-r3-s1", "st-fcfs-r9-s0"]
    assert "rate 3 req/s" in out and "rate 9 req/s" in out
    for entry in record["statistics_by_rate"]:
        rate = f"r{entry['rate']:g}"
        values = {
            name: {seed: summary_value(read_summary(results_dir / f"st-{name}-{rate}-s{seed}"), "G") for seed in (0, 1)}
            for name in ("fcfs", "slo-sa")
        }
        assert entry["statistics"]["G"]["schedulers"]["fcfs"] == pytest.approx(
            summarize(list(values["fcfs"].values())).as_dict()
        )
        versus = dict(entry["statistics"]["G"]["vs_baseline"]["slo-sa"])
        assert versus.pop("relative") == pytest.approx(relative_change(values["fcfs"], values["slo-sa"]).as_dict())
        assert versus == pytest.approx(paired_comparison(values["fcfs"], values["slo-sa"], True).as_dict())
    fast = pd.read_parquet(results_dir / "st-slo-sa-r9-s1" / "requests.parquet").sort_values("request_id")
    slow = pd.read_parquet(results_dir / "st-slo-sa-r3-s1" / "requests.parquet").sort_values("request_id")
    assert fast["arrival_s"].max() < slow["arrival_s"].max()  # the member ran at its own rate
    assert (
        cli(["run", *SMALL, "--rates", "3,9", "--out", str(results_dir)], capsys)[2]
        == "error: --rates: cannot be combined with --rate; expected one of them\n"
    )
