"""Fuzz saved runs and run addressing (issue 9, "Tests"): corrupted run folders, generated run
names for delete / show / rename, ``run_id`` values written inside summary.json, killed runs.

Properties:
- ``list`` returns 0 and lists the healthy run whatever sits beside it; ``list_runs`` never
  raises and does not hide a damaged folder; ``show`` / ``compare`` return 0 or 2 with one line;
- the Results and Home pages (streamlit AppTest) keep working with a damaged run beside a good one;
- nothing outside the results folder is touched (a sentinel tree around it, the current folder
  holding a ``good-a/summary.json``, hashed before and after every command); a run is addressed
  only by its id or a unique id prefix, so any other name deletes nothing;
- a run whose process was killed is not ``running`` forever.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fuzzing.checks import Failures, digest_changes, outcome_problems, shorten, tree_digest
from tests.fuzzing.harness import SHARES, case_rng, count, in_share, shared
from tests.fuzzing.mutate import awkward_json
from tests.fuzzing.sandbox import get_sandbox
from tests.fuzzing.seeds import tiny_workload_args, write_dataset

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fuzz sandbox forks")
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 8.0


@pytest.fixture(scope="module")
def sandbox():
    return get_sandbox()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """One real run folder, made once: ``runners.app.cli.main(['run', ..., '--run-id', 'x'])``."""
    from runners.app.cli import main

    base = tmp_path_factory.mktemp("real-run")
    dataset = write_dataset(base)
    assert (
        main(
            [
                "run",
                "--engine",
                "sim",
                "--requests",
                "5",
                "--run-id",
                "x",
                "--out",
                str(base / "res"),
                "--quiet",
                *tiny_workload_args(dataset),
            ]
        )
        == 0
    )
    return base / "res" / "x"


# -- 3. corrupted saved runs -------------------------------------------------------------------------
SUMMARY_FIELDS = [
    "run_id",
    "status",
    "started_at",
    "engine",
    "scheduler",
    "workload",
    "slo_attainment",
    "G",
    "slos",
    "completed",
    "requests",
    "sweep_id",
    "arrival_rate_rps",
    "error",
    "finished_at",
    "ttft_s",
    "e2e_s",
    "tpot_s",
    "slo_attainment_by_task",
    "instances",
    "schema_version",
    "synthetic",
    "failed",
    "preemptions",
    "duration_s",
]
JSON_REPLACEMENTS: list[tuple[str, bytes]] = [
    ("null", b"null"),
    ("[]", b"[]"),
    ("a string", b'"text"'),
    ("5", b"5"),
    ("true", b"true"),
    ("{}", b"{}"),
    ("[1, 2]", b"[1, 2]"),
    ("empty file", b""),
    ("invalid UTF-8", b'{"run_id": "\xff\xfe"}'),
    ("UTF-16", '{"status": "done"}'.encode("utf-16")),
    ("[ nested 100000 deep", b"[" * 100_000 + b"]" * 100_000),
    ("{ nested 5000 deep", b'{"a":' * 5000 + b"1" + b"}" * 5000),
    ("NaN everywhere", b'{"status": NaN, "G": NaN}'),
    ("1e999", b'{"slo_attainment": 1e999, "G": -1e999}'),
    ("random bytes", bytes(range(256)) * 3),
]


def _corruptions(real_run: Path) -> list[tuple[str, Callable[[Path, Path], None], bool]]:
    """(label, corrupt(run folder, sentinel folder), the folder stays a listed directory)."""
    fixes: list[tuple[str, Callable[[Path, Path], None], bool]] = []

    def write(name: str, data: bytes) -> Callable[[Path, Path], None]:
        return lambda folder, sentinel: (folder / name).write_bytes(data)

    for file in ("summary.json", "config.json"):
        for label, data in JSON_REPLACEMENTS:
            fixes.append((f"{file} = {label}", write(file, data), True))
        fixes.append(
            (
                f"{file} truncated in half",
                lambda f, s, file=file: (f / file).write_bytes(
                    (real_run / file).read_bytes()[: len((real_run / file).read_bytes()) // 2]
                ),
                True,
            )
        )
        fixes.append((f"{file} missing", lambda f, s, file=file: (f / file).unlink(), file != "summary.json"))
        fixes.append(
            (f"{file} is a directory", lambda f, s, file=file: ((f / file).unlink(), (f / file).mkdir()), True)
        )
        fixes.append(
            (
                f"{file} symlink to a sentinel file outside",
                lambda f, s, file=file: ((f / file).unlink(), (f / file).symlink_to(s / "secret.json")),
                True,
            )
        )
        fixes.append(
            (
                f"{file} dangling symlink",
                lambda f, s, file=file: ((f / file).unlink(), (f / file).symlink_to(f / "nowhere")),
                True,
            )
        )
        fixes.append(
            (
                f"{file} symlink loop",
                lambda f, s, file=file: ((f / file).unlink(), (f / file).symlink_to(f / file)),
                True,
            )
        )
    summary = json.loads((real_run / "summary.json").read_text())
    for index in range(count(40)):
        rng = case_rng("summary-field", index)
        field_name = rng.choice(SUMMARY_FIELDS)
        value = awkward_json(rng)
        if field_name == "run_id" and isinstance(value, str) and value:
            value = {"nested": value}  # string run ids are the path fuzz's business
        data = {**summary, field_name: value}
        fixes.append(
            (
                f"summary.json {field_name} = {shorten(json.dumps(value), 60)}",
                write("summary.json", json.dumps(data).encode()),
                True,
            )
        )
    config = json.loads((real_run / "config.json").read_text())
    for label, value in [
        ("config = []", {**config, "config": []}),
        ("config = text", {**config, "config": "x"}),
        ("resolved = 5", {**config, "resolved": 5}),
        ("config.run_id = {}", {**config, "config": {**config["config"], "run_id": {}}}),
    ]:
        fixes.append((f"config.json {label}", write("config.json", json.dumps(value).encode()), True))
    for table in ("requests", "timeseries"):
        name = f"{table}.parquet"
        original = (real_run / name).read_bytes()
        fixes += [
            (f"{name} cut in half", write(name, original[: len(original) // 2]), True),
            (f"{name} header only", write(name, original[:4]), True),
            (f"{name} empty", write(name, b""), True),
            (f"{name} garbage", write(name, bytes(range(256)) * 8), True),
            (f"{name} footer damaged", write(name, original[:-12] + bytes(12)), True),
            (f"{name} is a directory", lambda f, s, name=name: ((f / name).unlink(), (f / name).mkdir()), True),
            (
                f"{name} missing, a garbage part file",
                lambda f, s, name=name, table=table: (
                    (f / name).unlink(),
                    (f / f"{table}.part-00000.parquet").write_bytes(b"PAR1garbagePAR1"),
                ),
                True,
            ),
            (f"{name} a JSON file", write(name, b'{"request_id": 1}'), True),
        ]
        fixes.append((f"{name} with wrong column types", lambda f, s, name=name: _wrong_types(f / name), True))
    fixes += [
        (
            "run folder is a symlink to a copy outside",
            lambda f, s: (shutil.rmtree(f), f.symlink_to(s / "outside-run")),
            False,
        ),
        ("run folder is a file", lambda f, s: (shutil.rmtree(f), f.write_text("{}")), False),
        ("run folder empty (not a run: may be left out)", lambda f, s: (shutil.rmtree(f), f.mkdir()), False),
        ("only config.json left", lambda f, s: [p.unlink() for p in f.iterdir() if p.name != "config.json"], True),
        ("summary.json only", lambda f, s: [p.unlink() for p in f.iterdir() if p.name != "summary.json"], True),
    ]
    return fixes


def _wrong_types(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    columns = {name: pa.array([str(v) for v in table.column(name).to_pylist()]) for name in table.column_names}
    columns[table.column_names[0]] = pa.array(list(range(table.num_rows)))
    pq.write_table(pa.table(columns), path)


def _bad_run_folder(results: Path, real_run: Path, sentinel: Path, corrupt: Callable[[Path, Path], None]) -> Path:
    """``results/x`` (healthy) and ``results/bad`` (a newer copy, then corrupted)."""
    shutil.copytree(real_run, results / "x")
    bad = results / "bad"
    shutil.copytree(real_run, bad)
    summary = json.loads((bad / "summary.json").read_text())
    summary.update(run_id="bad", started_at="2099-01-01T00:00:00Z")  # the newest: the page opens it first
    (bad / "summary.json").write_text(json.dumps(summary))
    corrupt(bad, sentinel)
    return bad


def _make_sentinel(folder: Path, real_run: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "secret.json").write_text('{"status": "done", "run_id": "secret"}')
    shutil.copytree(real_run, folder / "outside-run")
    return folder


@pytest.mark.parametrize("share", SHARES)
def test_corrupted_saved_runs(sandbox, real_run, tmp_path, share):
    failures = Failures("corrupted saved runs (list / show / compare / list_runs)")
    for number, (label, corrupt, listed) in enumerate(_corruptions(real_run)):
        if not in_share(number, share):
            continue
        case = tmp_path / f"c{number:03d}"
        sentinel = _make_sentinel(case / "sentinel", real_run)
        results = case / "results"
        results.mkdir(parents=True)
        _bad_run_folder(results, real_run, sentinel, corrupt)
        before = tree_digest(sentinel)
        problems: list[tuple[str, str]] = []

        runs = sandbox.call("runners.store.result_store:list_runs", str(results), timeout_s=TIMEOUT_S)
        if runs.problem():
            problems.append(
                (
                    f"list_runs: {runs.problem().split(' [')[0][:90]} [{(runs.raised or {}).get('where')}]",
                    (runs.raised or {}).get("last_line", ""),
                )
            )
        elif not isinstance(runs.value, list) or not all(isinstance(r, dict) for r in runs.value):
            problems.append(("list_runs returned something other than a list of mappings", shorten(runs.value, 200)))
        else:
            ids = [str(r.get("run_id")) for r in runs.value]
            if "x" not in ids:
                problems.append(("list_runs lost the healthy run beside a damaged one", shorten(ids, 200)))
            if listed and len(runs.value) < 2:
                problems.append(
                    ("damaged run silently hidden by list_runs (expected listed as damaged)", shorten(ids, 200))
                )
        listing = sandbox.cli(["list", "--out", results], timeout_s=TIMEOUT_S)
        problems += [(f"list: {key}", detail) for key, detail in outcome_problems(listing, (0,))]
        if (
            listing.clean
            and listing.rc == 0
            and not any(line.split()[:1] == ["x"] for line in listing.out.splitlines())
        ):
            problems.append(("list: the healthy run is missing from the output", shorten(listing.out, 200)))
        for argv in (["show", "bad"], ["compare", "x", "bad"]):
            outcome = sandbox.cli([*argv, "--out", results], timeout_s=TIMEOUT_S)
            problems += [(f"{argv[0]}: {key}", detail) for key, detail in outcome_problems(outcome, (0, 2))]
        healthy = sandbox.cli(["show", "x", "--out", results], timeout_s=TIMEOUT_S)
        if healthy.rc != 0:
            problems.append(("show of the healthy run fails beside a damaged one", shorten(healthy.err, 200)))
        changes = digest_changes(before, tree_digest(sentinel))
        if changes:
            problems.append(("a file outside the results folder changed", shorten(changes, 200)))
        failures.case()
        failures.extend(problems, label)
    assert not failures, failures.message()


# -- the dashboard pages with a damaged run ------------------------------------------------------------
def _page_problems(results: Path, monkeypatch, bad_name: str = "bad") -> list[tuple[str, str]]:
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr("runners.store.result_store.DEFAULT_RESULTS_DIR", results)
    problems: list[tuple[str, str]] = []

    def exception_of(app) -> str | None:
        if app.exception:
            return shorten(app.exception[0].message if hasattr(app.exception[0], "message") else app.exception[0], 200)
        return None

    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    if exception_of(app):
        problems.append(("Home page raised", exception_of(app)))
    app.switch_page("pages/2_Results.py").run()
    if exception_of(app):
        problems.append(("Results page raised on open", exception_of(app)))
        return problems
    table = app.dataframe[0].value if app.dataframe else None
    if table is None or "x" not in [str(v) for v in table.iloc[:, 0]]:
        problems.append(("Results page does not list the healthy run", shorten(table, 200)))
    try:
        options = app.selectbox(key="manage_run").options
    except (KeyError, Exception):
        options = []
    for option in options:
        if str(option) == "x":
            continue
        app.selectbox(key="manage_run").set_value(option).run()
        if exception_of(app):
            problems.append(("Results page raised when the damaged run is picked under Manage", exception_of(app)))
            break
    return problems


@pytest.mark.parametrize("share", SHARES)
def test_results_pages_with_a_damaged_run(real_run, tmp_path, monkeypatch, share):
    """One page session per kind of damage (a sample of the corruptions above, to stay quick)."""
    failures = Failures("Home and Results pages beside a damaged run")
    corruptions = _corruptions(real_run)
    kinds: dict[str, tuple[str, Callable[[Path, Path], None], bool]] = {}
    for entry in corruptions:
        kinds.setdefault(" ".join(entry[0].split()[:2]), entry)
    sample = list(kinds.values())
    step = max(1, len(sample) // count(24))
    for number, (label, corrupt, _listed) in enumerate(sample[::step]):
        if not in_share(number, share):
            continue
        case = tmp_path / f"p{number:03d}"
        sentinel = _make_sentinel(case / "sentinel", real_run)
        results = case / "results"
        results.mkdir(parents=True)
        _bad_run_folder(results, real_run, sentinel, corrupt)
        failures.case()
        try:
            failures.extend(_page_problems(results, monkeypatch), label)
        except Exception as exc:
            failures.extend([(f"page test raised {type(exc).__name__}", shorten(str(exc), 200))], label)
    assert not failures, failures.message()


# -- 4. paths: run names and ids written in files ---------------------------------------------------
RUN_IDS = ["alpha-1", "alpha-2", "beta", "good-a"]


def _names(rng) -> str:
    pool = [
        "..",
        "../outside-run",
        "../outside-r",
        "../**/outside-run",
        "../sentinel",
        "/",
        ".",
        "",
        " ",
        "*",
        "?",
        "[g]ood-a",
        "?ood-a",
        "g*",
        "**",
        "good-a",
        "good-a/",
        "./good-a",
        "good-a/..",
        "alpha",
        "alpha-1",
        "b",
        "beta/../alpha-1",
        "results",
        "../results/beta",
        "~",
        "$HOME",
        "\u00fc",
        "a" * 300,
        "alpha-1\x00",
        "outside-run",
        "cwd",
        "../cwd/good-a",
        "-rf",
        "--out",
        "x\ny",
        ".jobs",
    ]
    name = rng.choice(pool)
    if rng.random() < 0.3:
        name = rng.choice(["", "../", "./", "/", "*", "../../"]) + name + rng.choice(["", "*", "/", "/..", "?"])
    return name


def _sentinel_world(base: Path, real_run: Path) -> tuple[Path, Path, Path]:
    """base/{sentinel files, outside-run, cwd/good-a/summary.json, results/<RUN_IDS>}."""
    _make_sentinel(base, real_run)
    cwd = base / "cwd"
    (cwd / "good-a").mkdir(parents=True)
    (cwd / "good-a" / "summary.json").write_text('{"status": "done", "run_id": "good-a"}')
    (cwd / "keep.txt").write_text("keep")
    results = base / "results"
    results.mkdir()
    for run_id in RUN_IDS:
        shutil.copytree(real_run, results / run_id)
        summary = json.loads((results / run_id / "summary.json").read_text())
        (results / run_id / "summary.json").write_text(json.dumps({**summary, "run_id": run_id}))
    (base / "outside-r").mkdir()
    (base / "outside-r" / "summary.json").write_text('{"status": "done"}')
    return base, cwd, results


def _allowed(name: str) -> set[str]:
    """The runs a name may address: its exact id, else the one run it is a unique prefix of."""
    if name in RUN_IDS:
        return {name}
    matches = {run_id for run_id in RUN_IDS if name and run_id.startswith(name)}
    return matches if len(matches) == 1 else set()


@pytest.mark.parametrize("share", SHARES)
def test_run_names_never_reach_outside_the_results_folder(sandbox, real_run, tmp_path, share):
    failures = Failures("run names for delete / show / rename")
    for index in shared(count(70), share):
        rng = case_rng("paths", index)
        name = _names(rng)
        command = rng.choice(["delete", "delete", "show", "rename"])
        base, cwd, results = _sentinel_world(tmp_path / f"w{index:03d}", real_run)
        before = tree_digest(base, skip=results)
        runs_before = set(p.name for p in results.iterdir())
        if command == "rename":
            new_id = rng.choice(["renamed", "../escaped", "/tmp/escaped", "a" * 300, "", "beta", "ok-2"])
            outcome = sandbox.call(
                "runners.store.result_store:rename_run", str(results), name, new_id, cwd=cwd, timeout_s=TIMEOUT_S
            )
            case_input = f"rename_run(results, {name!r}, {new_id!r}) in a cwd holding good-a/summary.json"
            problems = []
            if outcome.raised and outcome.raised["type"] not in ("ConfigError", "SchedlabError", "DatasetError"):
                problems.append(
                    (
                        f"rename_run raised {outcome.raised['type']} at {outcome.raised['where']}",
                        outcome.raised["last_line"],
                    )
                )
            elif outcome.timed_out or outcome.signal:
                problems.append((outcome.problem() or "", ""))
            elif not outcome.raised:
                gone = runs_before - set(p.name for p in results.iterdir())
                if not gone <= _allowed(name):
                    problems.append(
                        (
                            "rename moved a run its name does not address (id or unique prefix only)",
                            f"moved {sorted(gone)}",
                        )
                    )
        else:
            outcome = sandbox.cli([command, name, "--out", results], cwd=cwd, timeout_s=TIMEOUT_S)
            case_input = f"{command} {name!r} --out results, cwd holding good-a/summary.json"
            problems = outcome_problems(outcome, (0, 2))
            gone = runs_before - set(p.name for p in results.iterdir())
            if not gone <= _allowed(name):
                problems.append(
                    (
                        "delete removed a run its name does not address (id or unique prefix only)",
                        f"removed {sorted(gone)}",
                    )
                )
        changes = digest_changes(before, tree_digest(base, skip=results))
        if changes:
            problems.append(
                (f"{command}: a path outside the results folder was removed, moved or changed", shorten(changes, 240))
            )
        failures.case()
        failures.extend(problems, case_input)
    assert not failures, failures.message()


SUMMARY_RUN_IDS = [
    "../outside-run",
    "../../outside-run",
    "/abs/outside-run",
    "..",
    ".",
    "",
    "*",
    "good-a",
    "../cwd/good-a",
    "beta",
    "alpha",
    "a" * 300,
    "x/../../outside-run",
    "\u00fc/..",
    None,
    5,
    [],
    {},
]


def test_run_ids_read_from_files_never_reach_outside(sandbox, real_run, tmp_path):
    """The Results page deletes and renames the run_id listed from summary.json: a file's word
    must never move or remove anything outside the results folder."""
    failures = Failures("run_id values inside summary.json, deleted / renamed as the Results page does")
    for index, bad_id in enumerate(SUMMARY_RUN_IDS):
        for action in ("delete", "rename"):
            base, cwd, results = _sentinel_world(tmp_path / f"s{index:03d}{action[0]}", real_run)
            victim = results / "alpha-2"
            summary = json.loads((victim / "summary.json").read_text())
            (victim / "summary.json").write_text(json.dumps({**summary, "run_id": bad_id}))
            absolute = bad_id.replace("/abs/", str(base) + "/") if isinstance(bad_id, str) else bad_id
            if absolute != bad_id:
                (victim / "summary.json").write_text(json.dumps({**summary, "run_id": absolute}))
            before = tree_digest(base, skip=results)
            problems: list[tuple[str, str]] = []
            listed = sandbox.call("runners.store.result_store:list_runs", str(results), cwd=cwd, timeout_s=TIMEOUT_S)
            if listed.problem():
                problems.append((f"list_runs: {listed.problem()[:120]}", ""))
            ids = [r.get("run_id") for r in listed.value or [] if isinstance(r, dict)]
            healthy = {"alpha-1", "beta", "good-a"}
            for listed_id in [
                i for i in ids if not isinstance(i, str) or i not in healthy
            ]:  # the page acts on the run the user picked
                if not isinstance(listed_id, str):
                    problems.append(("list_runs gives a run_id that is not a string", shorten(listed_id, 80)))
                    continue
                if action == "delete":
                    outcome = sandbox.call(
                        "runners.store.result_store:delete_run", str(results), listed_id, cwd=cwd, timeout_s=TIMEOUT_S
                    )
                else:
                    outcome = sandbox.call(
                        "runners.store.result_store:rename_run",
                        str(results),
                        listed_id,
                        "renamed",
                        cwd=cwd,
                        timeout_s=TIMEOUT_S,
                    )
                if outcome.raised and outcome.raised["type"] not in ("ConfigError", "SchedlabError"):
                    problems.append(
                        (
                            f"{action}_run of a listed id raised {outcome.raised['type']} at {outcome.raised['where']}",
                            outcome.raised["last_line"],
                        )
                    )
            changes = digest_changes(before, tree_digest(base, skip=results))
            if changes:
                problems.append(
                    (f"{action} of the listed runs reached outside the results folder", shorten(changes, 240))
                )
            failures.case()
            failures.extend(problems, f"summary.json run_id = {absolute!r}, then {action} every listed run")
    assert not failures, failures.message()


# -- 8. killed runs ---------------------------------------------------------------------------------
def test_killed_runs_are_not_running_forever(sandbox, tmp_path):
    failures = Failures("runs killed with SIGKILL")
    dataset = write_dataset(tmp_path)
    for index, kill_after in enumerate([0.6, 2.0]):
        results = tmp_path / f"k{index}" / "results"
        outcome = sandbox.cli(
            [
                "run",
                "--requests",
                "5",
                "--run-id",
                "killed",
                "--out",
                results,
                "--quiet",
                "--set",
                "engine.pace=0.5",
                *tiny_workload_args(dataset),
            ],
            timeout_s=30,
            kill_after_s=kill_after,
        )
        case_input = f"run paced at 0.5x, SIGKILL after {kill_after} s"
        failures.case()
        if not (results / "killed").exists():
            failures.extend(
                [("no run folder after the kill (run too quick to kill?)", outcome.problem() or "")], case_input
            )
            continue
        problems = []
        listing = sandbox.cli(["list", "--out", results], timeout_s=TIMEOUT_S)
        line = next((l for l in listing.out.splitlines() if l.startswith("killed")), "")
        if "running" in line.split():
            problems.append(("list shows a killed run as running", line))
        show = sandbox.cli(["show", "killed", "--out", results], timeout_s=TIMEOUT_S)
        if "(running)" in show.out:
            problems.append(("show says a killed run is running", show.out.splitlines()[0] if show.out else ""))
        rename = sandbox.call(
            "runners.store.result_store:rename_run", str(results), "killed", "killed-renamed", timeout_s=TIMEOUT_S
        )
        if rename.raised:
            problems.append(("a killed run cannot be renamed", rename.raised["last_line"]))
        failures.extend(problems, case_input)
    assert not failures, failures.message()
