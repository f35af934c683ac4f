"""Fuzz every input of ``python -m runners run``: flags and ``--set`` values, config files, dataset,
replay and profile files (issue 9, "Tests").

Each test generates its cases from a fixed seed (``SCHEDLAB_FUZZ_SEED``, default 1234; scale the
count with ``SCHEDLAB_FUZZ_SCALE``), runs ``runners.app.cli.main(argv)`` for each in a sandboxed
child (tests/fuzzing/sandbox.py: a hang or a memory blow-up is reported, not suffered), and
asserts once, listing every failure class with an example input. Properties, for every case:

- main() returns 0, 1, 2 or 130 (argparse may reject a flag with its usage and exit 2); it never
  raises, hangs or crashes, and prints no traceback;
- exit 2 means exactly one ``error: `` line on stderr, and no run folder was written;
- every run folder it wrote ends in a terminal status; a run that failed after its folder was
  written is reported (bad input must be refused up front; a time-limit stop is fine);
- non-finite numbers, and booleans given for integers, are refused naming the field;
- a broken dataset / replay / profile file is refused naming the file; one bad entry in a
  dataset is skipped (the run goes on); a BOM does not change a replay's timestamps.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fuzzing.checks import Failures, expect_refused, run_folders, shorten
from tests.fuzzing.harness import SHARES, CaseRunner, case_rng, count, shared
from tests.fuzzing.mutate import BOM, byte_mutation, structure_mutation, to_json_bytes
from tests.fuzzing.sandbox import Outcome, get_sandbox
from tests.fuzzing.seeds import (
    REPLAY_STAMPS,
    config_data,
    dataset_bytes,
    dataset_entries,
    profile_bytes,
    profile_data,
    replay_bytes,
    tiny_workload_args,
    write_dataset,
)
from tests.fuzzing.values import (
    Field,
    awkward_text,
    config_fields,
    good_text,
    is_non_finite_text,
    scheduler_fields,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fuzz sandbox forks")


@pytest.fixture(scope="module")
def sandbox():
    return get_sandbox()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A valid 6-entry dataset both tasks are read from, so a case runs in milliseconds."""
    return write_dataset(tmp_path_factory.mktemp("tiny"), "tiny.jsonl")


def runner(sandbox, tmp_path: Path, title: str) -> CaseRunner:
    return CaseRunner(sandbox, tmp_path / "cases", Failures(title))


def mentions(text: str, *names: str) -> bool:
    return any(name and name in text for name in names)


# -- 1. flags and --set values -------------------------------------------------------------------
FLAG_FIELDS = {
    "--requests": "workload.requests",
    "--rate": "workload.arrival.rate",
    "--burstiness": "workload.arrival.burstiness",
    "--seed": "workload.seed",
    "--instances": "engine.instances",
    "--kv-capacity": "engine.kv_capacity_tokens",
    "--batch-size": "scheduler.params.batch_size",
}
#: Per flag: (valid values, awkward values). A case takes a few valid flags and one or two
#: awkward things, so each awkward value is reached by the code that must handle it.
FLAG_VALUES: dict[str, tuple[list[str], list[str]]] = {
    "--engine": (["sim"], ["SIM", "tgi", "", " sim"]),
    "--requests": (["3", "4", "5"], ["0", "-1", "3.5", "1e3", str(10**30), str(2**63), str(2**63 - 1), "10000000", ""]),
    "--rate": (["0.5", "4", "20"], ["inf", "-inf", "nan", "0", "-2", "1e-300", "1e308", "5e-324", "1e-9", "INF"]),
    "--arrival": (["all-at-once", "poisson", "gamma", "constant"], ["replay", "Poisson", "burst", ""]),
    "--burstiness": (["0.5", "1", "3"], ["inf", "nan", "0", "-1", "1e-300", "1e300"]),
    "--seed": (["0", "7", str(2**32)], ["-1", str(2**63), str(2**64), str(10**30), "x"]),
    "--instances": (["1", "2"], ["0", "65", "-1", str(2**63)]),
    "--kv-capacity": (["100000"], ["512", "1", "0", "-5", str(2**63), str(10**30)]),
    "--ratio": (
        ["1:1", "2:1", "1:0", "0:1"],
        [
            *"0:0 1:inf inf:1 nan:1 1:nan -1:2 1: 1:1:1 : 1e308:1e308 a:b".split(),
            "\uff11:\uff11",
            "1e-320:1",
        ],
    ),
    "--slo": (["paper"], ["auto", "custom", "PAPER", "", "none"]),
    "--run-id": (
        ["fz-ok", "x" * 128],
        [
            *"../escape /abs/x . ..".split(),
            "",
            "a" * 300,
            "\u00fc",
            "a b",
            *"-x x/../../y * .hidden".split(),
            "x" * 129,
        ],
    ),
    "--model": ([], ["/no/such/model", "", "x" * 300]),
    "--tokenizer": ([], ["/no/such/dir", "/dev/null", ""]),
    "--batch-size": ([], ["1", "0", "-3", str(2**63), str(10**30)]),
}
NON_FINITE_FLAG_TEXT = {"inf", "-inf", "nan", "INF"}


def _flag_case(rng, fields: dict[str, Field], all_fields: list[Field], sched_fields: dict[str, list[Field]]):
    """argv tail (a few valid flags, then one or two awkward values) and the fields whose final
    value must be refused."""
    argv: list[str] = ["--requests", str(rng.choice([3, 4, 5]))]
    assigned: dict[str, tuple[str, str]] = {}  # dotted -> (text, how)
    scheduler = rng.choice(sorted(sched_fields)) if rng.random() < 0.5 else None
    if scheduler:
        argv += ["--scheduler", scheduler]
        if scheduler == "static" and rng.random() < 0.5:
            argv += ["--batch-size", str(rng.choice([2, 4, 8]))]
    for flag in rng.sample(sorted(FLAG_VALUES), rng.randint(0, 3)):
        good = FLAG_VALUES[flag][0]
        if good and flag not in ("--requests", "--run-id"):
            argv += [flag, rng.choice(good)]
    awkward = rng.choices([0, 1, 2], weights=[1, 7, 2])[0]
    for _ in range(awkward):
        if rng.random() < 0.4:
            flag = rng.choice(sorted(FLAG_VALUES))
            if flag == "--tokenizer" and rng.random() < 0.7:
                flag = "--model"  # loading a tokenizer imports transformers: slow, keep it rare
            value = rng.choice(FLAG_VALUES[flag][1])
            argv += [flag, value]
            if flag in FLAG_FIELDS:
                assigned[FLAG_FIELDS[flag]] = (value, "flag")
            if flag == "--ratio":
                assigned["workload.ratio"] = (value, "ratio")
        else:
            pool = all_fields + (sched_fields.get(scheduler, []) if scheduler else [])
            field = rng.choice(pool)
            text = awkward_text(rng)
            argv += ["--set", f"{field.dotted}={text}"]
            assigned[field.dotted] = (text, "set")
    for _ in range(rng.choice([0, 0, 1])):  # a valid --set alongside
        field = rng.choice(all_fields)
        text = good_text(field, rng)
        if text is not None and field.dotted not in assigned:
            argv += ["--set", f"{field.dotted}={text}"]
    if rng.random() < 0.04:  # malformed --set items
        argv += ["--set", rng.choice(["novalue", "=5", "a..b=1", ".x=1", "workload.=3", "workload.requests.x=1"])]
    must_refuse = []
    for dotted, (text, how) in assigned.items():
        if how == "ratio":
            if any(part.strip().lower() in ("inf", "nan", "-inf") for part in text.split(":")):
                must_refuse.append(("workload.ratio", text))
            continue
        field = fields.get(dotted) or next((f for fs in sched_fields.values() for f in fs if f.dotted == dotted), None)
        if field is None or not field.numeric:
            continue
        if how == "flag" and text in NON_FINITE_FLAG_TEXT:
            must_refuse.append((dotted, text))
        elif how == "set" and is_non_finite_text(text):
            must_refuse.append((dotted, text))
        elif how == "set" and field.kind == "int" and text.strip().lower() in ("true", "yes"):
            must_refuse.append((dotted, text))
    return argv, must_refuse


@pytest.mark.parametrize("share", SHARES)
def test_flags_and_set_values(sandbox, tiny, tmp_path, share):
    all_fields = config_fields()
    fields = {f.dotted: f for f in all_fields}
    sched_fields = scheduler_fields()
    cases = runner(sandbox, tmp_path, "CLI flags and --set values")
    for index in shared(count(300), share):
        rng = case_rng("flags", index)
        tail, must_refuse = _flag_case(rng, fields, all_fields, sched_fields)
        out = cases.folder() / "results"
        argv = ["run", "--out", out, "--quiet", *tiny_workload_args(tiny), *tail]

        def expect(outcome: Outcome, must_refuse=must_refuse) -> list[tuple[str, str]]:
            if not must_refuse or outcome.extra.get("system_exit"):
                return []
            problems = expect_refused(outcome)
            return [(f"{key} (non-finite or boolean number)", f"{must_refuse}: {detail}") for key, detail in problems]

        cases.cli(argv, case_input=tail, out_dir=out, expect=expect)
    assert not cases.failures, cases.failures.message()


# -- 1b. every numeric field, one bad value at a time ---------------------------------------------
#: Valid values for config sub-mappings whose fields are all required, so one bad field is the only error.
COMPLETE_PARENTS = {
    "engine.model": "{layers: 28, kv_heads: 4, head_dim: 128, dtype_bytes: 2, weight_bytes: 15220000000}",
    "engine.gpu": "{gpus: 2, gpu_memory_gib: 32, memory_fraction: 0.9, activation_reserve_gib: 0}",
}


def _numeric_cases() -> list[tuple[list[str], Field, str, bool]]:
    """(argv tail, field, value text, must be refused) for every numeric field of the config and of
    each scheduler's parameters: non-finite values and booleans must be refused naming the field;
    huge integers must be refused or run cleanly."""
    cases: list[tuple[list[str], Field, str, bool]] = []
    seen: set[str] = set()
    targets: list[tuple[list[str], Field]] = [([], f) for f in config_fields() if f.numeric]
    for scheduler, fields in scheduler_fields().items():
        targets += [(["--scheduler", scheduler], f) for f in fields if f.numeric]
    for prefix, field in targets:
        if field.dotted in seen:
            continue
        seen.add(field.dotted)
        for parent, whole in COMPLETE_PARENTS.items():  # the siblings are required: give them
            if field.dotted.startswith(parent + "."):
                prefix = [*prefix, "--set", f"{parent}={whole}"]
        if field.kind == "float":
            for text in ("inf", "-inf", "nan", ".inf"):
                cases.append((prefix, field, text, True))
        else:
            cases.append((prefix, field, "true", True))
            for huge in (10**30, 2**63):
                cases.append((prefix, field, str(huge), False))
    return cases


def test_numeric_fields_refuse_non_finite_and_boolean_values(sandbox, tiny, tmp_path):
    cases = runner(sandbox, tmp_path, "numeric fields: non-finite, boolean and huge values")
    extra = [
        (["--rate", "inf"], "workload.arrival.rate", True),
        (["--burstiness", "inf"], "workload.arrival.burstiness", True),
        (["--arrival", "gamma", "--burstiness", "inf"], "workload.arrival.burstiness", True),
        (["--ratio", "1:inf"], "ratio", True),
        (["--ratio", "nan:1"], "ratio", True),
        (["--requests", str(2**63)], "workload.requests", False),
        (["--requests", str(10**9)], "workload.requests", False),
        (["--requests", "10000000"], "workload.requests", False),
        (["--set", "sample_interval_s=1e-6"], "sample_interval_s", False),
        (["--set", "engine.instances=true"], "engine.instances", True),
        (["--set", "workload.requests=true"], "workload.requests", True),
    ]
    plan = [
        (prefix + ["--set", f"{field.dotted}={text}"], field.dotted.split(".")[-1], refuse)
        for prefix, field, text, refuse in _numeric_cases()
    ] + extra
    for tail, name, refuse in plan:
        out = cases.folder() / "results"
        argv = ["run", "--requests", "3", "--out", out, "--quiet", *tiny_workload_args(tiny), *tail]

        def expect(outcome: Outcome, name=name, refuse=refuse) -> list[tuple[str, str]]:
            if refuse:
                return [(f"{key}: {name}", detail) for key, detail in expect_refused(outcome, name)]
            return []

        cases.cli(argv, case_input=tail, out_dir=out, expect=expect)
    # a JSON config can say Infinity directly
    for dotted, value in [
        ("workload.arrival.rate", math.inf),
        ("max_duration_s", math.inf),
        ("workload.requests", True),
        ("slo.code.e2e_s", math.inf),
    ]:
        folder = cases.folder()
        data = config_data(3)
        target = data
        *parents, last = dotted.split(".")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
        if dotted.startswith("slo."):
            data["slo"]["preset"] = "custom"
        path = folder / "run.json"
        path.write_text(json.dumps(data))
        out = folder / "results"
        cases.cli(
            ["run", "--config", path, "--out", out, "--quiet", *tiny_workload_args(tiny)],
            case_input=f"config.json with {dotted}: {json.dumps(value)}",
            out_dir=out,
            expect=lambda o, name=last: [(f"{k}: {name} in a JSON config", d) for k, d in expect_refused(o, name)],
        )
    assert not cases.failures, cases.failures.message()


# -- 1c. config files -------------------------------------------------------------------------------
SPECIAL_CONFIGS = [
    b"- a\n- b\n",
    b"5\n",
    b'"text"\n',
    b"null\n",
    b"[]\n",
    b"{}\n",
    b"~\n",
    b"workload: 5\n",
    b"engine: []\n",
    b"workload:\n  arrival: inf\n",
    b"? [a]\n: 1\n",
    b"&a [*a]\n",
    b"!!python/object:os.system {}\n",
    b"a: !!binary aGk=\n",
    b"workload: {requests: .inf}\n",
    b"workload: {requests: !!float 5}\n",
]


@pytest.mark.parametrize("share", SHARES)
def test_config_files(sandbox, tiny, tmp_path, share):
    cases = runner(sandbox, tmp_path, "config files (YAML / JSON)")
    fields = {f.dotted: f for f in config_fields()}
    for index in shared(count(110), share):
        rng = case_rng("config", index)
        suffix = rng.choice([".yaml", ".json", ".yml"])
        data = config_data(3)
        must_refuse = None
        roll = rng.random()
        if roll < 0.55:
            mutated, label, path = structure_mutation(data, rng)
            dotted = ".".join(map(str, path))
            field = fields.get(dotted)
            value = mutated
            for part in path:
                value = value[part] if isinstance(value, (dict, list)) else None
            if (
                field is not None
                and field.numeric
                and (
                    (isinstance(value, float) and not math.isfinite(value))
                    or (isinstance(value, bool) and field.kind == "int")
                )
            ):
                must_refuse = dotted
            text = to_json_bytes(mutated) if suffix == ".json" else yaml.safe_dump(mutated).encode()
        elif roll < 0.9:
            plain = json.dumps(data).encode() if suffix == ".json" else yaml.safe_dump(data).encode()
            text, label = byte_mutation(plain, rng)
        else:
            text = rng.choice(SPECIAL_CONFIGS)
            label = f"whole file {text[:40]!r}"
        config_path, out = cases.case_file(f"run{suffix}", text)

        def expect(outcome: Outcome, must_refuse=must_refuse, config_path=config_path) -> list[tuple[str, str]]:
            problems = []
            if must_refuse:
                problems += [
                    (f"{k}: a config file value", d) for k, d in expect_refused(outcome, must_refuse.split(".")[-1])
                ]
            return problems

        cases.cli(
            ["run", "--config", config_path, "--out", out, "--quiet", *tiny_workload_args(tiny)],
            case_input=f"{suffix} config, {label}",
            out_dir=out,
            expect=expect,
        )
    assert not cases.failures, cases.failures.message()


# -- 2. dataset files --------------------------------------------------------------------------------
DATASET_FORMATS = ["json", "jsonl", "json.gz", "jsonl.gz"]


@pytest.mark.parametrize("share", SHARES)
def test_dataset_files(sandbox, tmp_path, share):
    cases = runner(sandbox, tmp_path, "dataset files")
    entries = dataset_entries()
    for index in shared(count(200), share):
        rng = case_rng("dataset", index)
        fmt = rng.choice(DATASET_FORMATS)
        gz = fmt.endswith(".gz")
        lines = fmt.startswith("jsonl")
        one_bad_entry = False
        roll = rng.random()
        if roll < 0.45:
            plain = dataset_bytes(fmt.replace(".gz", ""))
            data, label = byte_mutation(plain, rng, gz=gz)
        else:
            if roll < 0.85:
                victim = rng.randrange(len(entries))
                mutated, label, _ = structure_mutation(entries, rng, inside=(victim,))
                one_bad_entry = True
            else:
                mutated, label, _ = structure_mutation(entries, rng)
            plain = (
                to_json_bytes(mutated, lines=lines)
                if isinstance(mutated, list) or not lines
                else to_json_bytes(mutated)
            )
            data = gzip.compress(plain, mtime=0) if gz else plain
        path, out = cases.case_file(f"chat.{fmt}", data)
        argv = [
            *"run --requests 3 --ratio 1:0 --out".split(),
            out,
            *"--quiet --set workload.chat.kind=file --set".split(),
            f"workload.chat.path={path}",
        ]

        def expect(outcome: Outcome, path=path, one_bad_entry=one_bad_entry) -> list[tuple[str, str]]:
            problems = []
            if outcome.rc == 2 and not mentions(outcome.err, str(path), path.name):
                problems.append(("dataset refused without naming the file", shorten(outcome.err, 240)))
            if one_bad_entry and outcome.rc != 0:
                problems.append(
                    (
                        "one bad entry failed the whole file (expected a counted skip, run goes on)",
                        shorten(outcome.err, 240),
                    )
                )
            return problems

        cases.cli(argv, case_input=f"{fmt}: {label}", out_dir=out, expect=expect)
    assert not cases.failures, cases.failures.message()


# -- 2b. replay files --------------------------------------------------------------------------------
def _arrivals(out: Path) -> list[float] | None:
    import pandas as pd

    folders = run_folders(out)
    if not folders:
        return None
    try:
        frame = pd.read_parquet(folders[0] / "requests.parquet")
    except Exception:
        return None
    return sorted(round(float(v), 6) for v in frame["arrival_s"])


@pytest.mark.parametrize("share", SHARES)
def test_replay_files(sandbox, tiny, tmp_path, share):
    cases = runner(sandbox, tmp_path, "replay files")
    expected = [round(t - REPLAY_STAMPS[0], 6) for t in REPLAY_STAMPS[:3]]
    for index in shared(count(140), share):
        rng = case_rng("replay", index)
        fmt = rng.choice(["txt", "csv", "json"])
        plain = replay_bytes(fmt)
        bom = False
        roll = rng.random()
        if roll < 0.6:
            data, label = byte_mutation(plain, rng)
        elif roll < 0.88:
            stamps: list[Any] = [t + 10 for t in REPLAY_STAMPS]
            mutated, label, _ = structure_mutation(stamps, rng, min_depth=1)
            if fmt == "json":
                data = to_json_bytes(mutated)
            else:
                data = "".join(f"{json.dumps(v) if not isinstance(v, str) else v}\n" for v in mutated).encode()
                fmt = "txt"
        else:
            data, label, bom = BOM + plain, "UTF-8 BOM prepended to a valid file", True
        path, out = cases.case_file(f"stamps.{fmt}", data)
        argv = [
            *"run --requests 3 --arrival replay --set".split(),
            f"workload.arrival.replay_file={path}",
            "--out",
            out,
            "--quiet",
            *tiny_workload_args(tiny),
        ]

        def expect(outcome: Outcome, path=path, bom=bom, out=out) -> list[tuple[str, str]]:
            problems = []
            if outcome.rc == 2 and not mentions(outcome.err, str(path), path.name, "replay_file"):
                problems.append(("replay file refused without naming the file", shorten(outcome.err, 240)))
            if bom and outcome.rc == 0:
                got = _arrivals(out)
                if got != expected:
                    problems.append(("a BOM changed the replayed arrival times", f"expected {expected}, got {got}"))
            return problems

        cases.cli(argv, case_input=f"{fmt}: {label}", out_dir=out, expect=expect)
    assert not cases.failures, cases.failures.message()


# -- 2c. engine profiles -----------------------------------------------------------------------------
def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


@pytest.mark.parametrize("share", SHARES)
def test_profile_files(sandbox, tiny, tmp_path, share):
    cases = runner(sandbox, tmp_path, "engine profile files")
    for index in shared(count(110), share):
        rng = case_rng("profile", index)
        fmt = rng.choice(["yaml", "json"])
        non_finite = False
        if rng.random() < 0.6:
            mutated, label, _ = structure_mutation(profile_data(), rng, min_depth=1)
            non_finite = _has_non_finite(mutated)
            data = to_json_bytes(mutated) if fmt == "json" else yaml.safe_dump(mutated).encode()
        else:
            data, label = byte_mutation(profile_bytes(fmt), rng)
        path, out = cases.case_file(f"engine.{fmt}", data)
        argv = [
            *"run --requests 3 --set".split(),
            f"engine.profile={path}",
            "--out",
            out,
            "--quiet",
            *tiny_workload_args(tiny),
        ]

        def expect(outcome: Outcome, path=path, non_finite=non_finite) -> list[tuple[str, str]]:
            problems = []
            if outcome.rc == 2 and not mentions(outcome.err, str(path), path.name):
                problems.append(("profile refused without naming the file", shorten(outcome.err, 240)))
            if non_finite:
                problems += [(f"{k}: a non-finite profile number", d) for k, d in expect_refused(outcome)]
            return problems

        cases.cli(argv, case_input=f"{fmt}: {label}", out_dir=out, expect=expect)
    assert not cases.failures, cases.failures.message()
