"""Every bad input is refused at validation, with the field or file named, before anything is
written: non-finite and coerced numbers, unbounded sizes, unreadable dataset / replay / config /
profile files (issue 9, items 7, 9 and 10)."""

from __future__ import annotations

import gzip
import json
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from runners.app.cli import main
from runners.engines.latency_model import PhaseCoefficients
from runners.engines.profile import QWEN25_7B_2XV100, EngineProfile
from runners.errors import ConfigError
from runners.registry import SCHEDULERS
from runners.run.config import RunConfig, parse_config
from runners.store.result_store import load_run
from runners.workload.arrivals import ArrivalConfig, arrival_times, read_timestamps
from runners.workload.conversations import read_entries_from_file

GOOD = {
    "conversations": [
        {"from": "human", "value": "tell me about the sea " * 4},
        {"from": "gpt", "value": "the sea is wide and deep " * 6},
    ]
}


def refused(args, results_dir, capsys) -> str:
    """Run the CLI; assert one clean ``error:`` line, exit code 2, and nothing written."""
    code = main(["run", "--requests", "5", "--quiet", "--out", str(results_dir), *args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert list(results_dir.iterdir()) == []  # no run folder
    return err


# -- numbers: finite, not booleans, bounded -------------------------------------------------------
@pytest.mark.parametrize(
    "args, expected",
    [
        (["--rate", "inf"], "workload.arrival.rate: Input should be a finite number"),
        (["--rate", "nan"], "workload.arrival.rate: Input should be a finite number"),
        (["--ratio", "1:inf"], "workload.ratio.code: Input should be a finite number"),
        (["--set", "workload.requests=true"], "workload.requests: expected an integer, not a boolean"),
        (["--set", "engine.instances=true"], "engine.instances: expected an integer, not a boolean"),
        (["--set", "max_duration_s=.inf"], "max_duration_s: Input should be a finite number"),
        (["--set", "engine.pace=.inf"], "engine.pace: Input should be a finite number"),
        (["--kv-capacity", str(10**13)], "engine.kv_capacity_tokens: Input should be less than or equal to 1000000000"),
        (["--set", "slo.preset=custom", "--set", "slo.chat.ttft_s=.inf"], "slo.chat.ttft_s: Input should be a finite"),
        (["--set", "slo.auto_factor=.nan"], "slo.auto_factor: Input should be a finite number"),
        (["--set", "engine.max_num_seqs=10000000"], "engine.max_num_seqs: Input should be less than or equal to 65536"),
        (["--scheduler", "static", "--batch-size", str(2**40)], "scheduler.params.batch_size: Input should be less"),
        (
            ["--scheduler", "static", "--set", "scheduler.params.batch_size=true"],
            "scheduler.params.batch_size: expected an integer, not a boolean",
        ),
        (
            ["--scheduler", "slo-sa", "--set", "scheduler.params.seed=" + str(2**70)],
            "scheduler.params.seed: Input should be less than or equal to 2147483647",
        ),
        (
            ["--scheduler", "slo-sa", "--set", "scheduler.params.t0=.inf"],
            "scheduler.params.t0: Input should be a finite",
        ),
        (
            ["--scheduler", "alpha-beta-clear", "--set", "scheduler.params.noise=.inf"],
            "scheduler.params.noise: Input should be a finite number",
        ),
        (
            ["--scheduler", "mcsf", "--set", "scheduler.params.prior_tokens=" + str(2**64)],
            "scheduler.params.prior_tokens: expected an integer that fits in 64 bits",
        ),
        (["--set", "engine.gpu={gpu_memory_gib: .inf}"], "engine.gpu.gpu_memory_gib: Input should be a finite number"),
        (
            ["--set", "engine.gpu={gpus: true, gpu_memory_gib: 32}"],
            "engine.gpu.gpus: expected an integer, not a boolean",
        ),
        (
            ["--scheduler", "dynamic-sla", "--set", "scheduler.params.eps_m=5e-324"],
            "scheduler.params.eps_m: Input should be greater than or equal to 0.000000001",
        ),
        (["--max-error-rate", "1.5"], "max_error_rate: Input should be less than or equal to 1"),
        (["--seed", str(2**40)], "workload.seed: Input should be less than or equal to 2147483647"),
    ],
)
def test_bad_numbers_are_refused_before_anything_is_written(args, expected, results_dir, capsys):
    assert expected in refused(args, results_dir, capsys)


@pytest.mark.parametrize(
    "data, expected",
    [  # each of these hung, ran unbounded or died of MemoryError / ValueError before
        (
            {"workload": {"arrival": {"process": "gamma", "burstiness": float("inf")}}},
            "workload.arrival.burstiness: Input should be a finite number",
        ),
        (
            {"workload": {"arrival": {"process": "gamma", "burstiness": 1e-9}}},
            "workload.arrival.burstiness: Input should be greater than or equal to 0.01",
        ),
        ({"workload": {"requests": 10_000_000}}, "workload.requests: Input should be less than or equal to 1000000"),
        ({"workload": {"requests": 10**9}}, "workload.requests: Input should be less than or equal to 1000000"),
        ({"workload": {"requests": 2**63}}, "workload.requests: Input should be less than or equal to 1000000"),
        ({"sample_interval_s": 1e-6}, "sample_interval_s: Input should be greater than or equal to 0.01"),
        (
            {"sample_interval_s": 0.01, "max_duration_s": 30 * 86_400},
            "sample_interval_s: max_duration_s / sample_interval_s is 259,200,000 samples per instance",
        ),
        ({"max_duration_s": 1e300}, "max_duration_s: Input should be less than or equal to 2592000"),
        (
            {"scheduler": {"name": "slo-sa", "params": {"iterations": 10**20}}},
            "scheduler.params.iterations: Input should be less than or equal to 1000000",
        ),
        (
            {"scheduler": {"name": "slo-sa", "params": {"decay": 0.9999999}}},
            "scheduler.params.iterations: t0, t_threshold, decay and iterations give",
        ),
        (
            {"scheduler": {"name": "slo-sa", "params": {"max_batch": 2**63}}},
            "scheduler.params.max_batch: Input should be less than or equal to 65536",
        ),
        (
            json.loads('{"workload": {"arrival": {"rate": Infinity}}}'),
            "workload.arrival.rate: Input should be a finite",
        ),
    ],
)
def test_numbers_that_would_hang_or_exhaust_the_machine_are_refused(data, expected):
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert expected in str(info.value)


def _models() -> list[type[BaseModel]]:
    """Every config model reachable from a run config, each scheduler's parameters and a profile."""
    seen: list[type[BaseModel]] = []

    def visit(annotation) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in seen:
                seen.append(annotation)
                for info in annotation.model_fields.values():
                    visit(info.annotation)
            return
        for arg in typing.get_args(annotation):
            visit(arg)

    for root in (RunConfig, EngineProfile, *(cls.Params for cls in SCHEDULERS.values())):
        visit(root)
    return seen


def _number_kind(annotation) -> type | None:
    """int or float for a (possibly optional) number field, else None."""
    if annotation in (int, float):
        return annotation
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return None
    kinds = {_number_kind(arg) for arg in typing.get_args(annotation)} - {None}
    return kinds.pop() if len(kinds) == 1 else None


def _fields(kind: type) -> list[tuple[type[BaseModel], str]]:
    return [
        (model, name)
        for model in _models()
        for name, info in model.model_fields.items()
        if _number_kind(info.annotation) is kind
    ]


FLOAT_FIELDS = _fields(float)
INT_FIELDS = _fields(int)


def test_every_config_model_is_an_input_model():
    from runners.input_model import InputModel

    foreign = {model.__name__ for model in _models() if not issubclass(model, InputModel)}
    assert foreign == set()  # nested ones too (engine.gpu, engine.model, predictor parameters)
    assert len(FLOAT_FIELDS) >= 32 and len(INT_FIELDS) >= 30, (len(FLOAT_FIELDS), len(INT_FIELDS))


@pytest.mark.parametrize("model, name", FLOAT_FIELDS, ids=[f"{m.__name__}.{n}" for m, n in FLOAT_FIELDS])
def test_every_float_field_refuses_inf_and_nan(model, name):
    for value in (float("inf"), float("-inf"), float("nan"), "inf"):
        with pytest.raises(ValueError) as info:
            model.model_validate({name: value})
        errors = [e for e in info.value.errors() if e["loc"] == (name,)]
        assert errors and errors[0]["type"] == "finite_number", (name, value, info.value.errors())


@pytest.mark.parametrize("model, name", INT_FIELDS, ids=[f"{m.__name__}.{n}" for m, n in INT_FIELDS])
def test_every_integer_field_refuses_a_boolean(model, name):
    with pytest.raises(ValueError) as info:
        model.model_validate({name: True})
    assert [e["type"] for e in info.value.errors() if e["loc"] == (name,)] == ["bool_not_number"]


def test_arrival_times_are_always_finite():
    for process in ("poisson", "gamma", "constant"):
        for rate, burstiness in ((1e-6, 0.01), (1e6, 1000.0), (4.0, 0.01)):
            times = arrival_times(ArrivalConfig(process=process, rate=rate, burstiness=burstiness), 2000, 3)
            assert len(times) == 2000 and times[0] == 0.0 and bool((times[1:] >= times[:-1]).all())
            assert bool(abs(times).max() < float("inf"))
    # a config that skipped validation: NaN arrival times (which made the driver spin) are refused
    unchecked = ArrivalConfig.model_construct(process="gamma", rate=4.0, burstiness=float("inf"), replay_file=None)
    with pytest.raises(ConfigError, match="workload.arrival: gamma arrivals at rate 4/s .* non-finite arrival times"):
        arrival_times(unchecked, 10, 0)


# -- files: replay, config, dataset, profile ------------------------------------------------------
def test_replay_file_with_byte_order_mark_replays_every_timestamp(tmp_path, results_dir, capsys):
    replay = tmp_path / "stamps.csv"
    replay.write_bytes("\ufeff0\n10\n11\n12\n13\n".encode("utf-8"))
    assert read_timestamps(replay).tolist() == [0.0, 10.0, 11.0, 12.0, 13.0]
    code = main(
        [
            *"run --requests 5 --quiet --arrival replay --run-id bom --set".split(),
            f"workload.arrival.replay_file={replay}",
            "--out",
            str(results_dir),
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert sorted(load_run(results_dir, "bom").requests["arrival_s"]) == [0.0, 10.0, 11.0, 12.0, 13.0]


def test_replay_file_that_is_not_utf8_names_the_file(tmp_path, results_dir, capsys):
    replay = tmp_path / "latin1.csv"
    replay.write_bytes(b"arriv\xe9e\n0\n1\n2\n3\n4\n")
    err = refused(["--arrival", "replay", "--set", f"workload.arrival.replay_file={replay}"], results_dir, capsys)
    assert f"{replay}: not UTF-8 text" in err
    huge = tmp_path / "huge.csv"
    huge.write_text('"' + "1" * 200_000 + "\n")
    err = refused(["--arrival", "replay", "--set", f"workload.arrival.replay_file={huge}"], results_dir, capsys)
    assert f"{huge}: not a readable CSV/text file" in err


def test_config_file_that_is_not_utf8_or_too_deep_names_the_file(tmp_path, results_dir, capsys):
    latin = tmp_path / "run.yaml"
    latin.write_bytes(b"notes: caf\xe9\n")
    assert f"--config: {latin} is not UTF-8 text" in refused(["--config", str(latin)], results_dir, capsys)
    deep = tmp_path / "deep.json"
    deep.write_text('{"notes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert f"--config: {deep} is nested too deeply" in refused(["--config", str(deep)], results_dir, capsys)
    broken = tmp_path / "broken.yml"
    broken.write_text("workload:\n  requests: 3\n  kin\n")
    assert f"--config: {broken} is not valid YAML: " in refused(["--config", str(broken)], results_dir, capsys)
    bom = tmp_path / "bom.json"
    bom.write_bytes("\ufeff".encode() + b'{"workload": {"requests": 3}}')
    assert main(["run", "--config", str(bom), "--quiet", "--run-id", "b", "--out", str(results_dir)]) == 0
    assert len(load_run(results_dir, "b").requests) == 3


def dataset_args(path) -> list[str]:
    return ["--ratio", "1:0", "--set", "workload.chat.kind=file", "--set", f"workload.chat.path={path}"]


def test_entries_whose_role_is_a_list_or_object_are_counted_skips(tmp_path, results_dir, capsys):
    entries = [GOOD] * 6 + [
        {"conversations": [{"from": ["human"], "value": "hi there"}, {"from": "gpt", "value": "hello"}]},
        {"conversations": [{"from": "human", "value": "hi there"}, {"from": {"a": 1}, "value": "hello"}]},
        {"conversations": [{"from": {"x": []}, "value": "system?"}, GOOD["conversations"][0]]},
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(entry) for entry in entries) + "\n")
    code = main(
        ["run", "--requests", "5", "--quiet", "--run-id", "skips", "--out", str(results_dir), *dataset_args(path)]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads((results_dir / "skips" / "config.json").read_text())["resolved"]["workload_reports"]["chat"]
    assert report["entries"] == 9 and report["kept"] == 6 and report["skipped"] == {"non-string value": 3}


def _corrupt_gzip(path) -> None:
    raw = bytearray(gzip.compress(("\n".join([json.dumps(GOOD)] * 50) + "\n").encode(), mtime=0))
    for index in range(20, 24):  # inside the deflate stream, just after the gzip header
        raw[index] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_unreadable_dataset_files_are_one_clear_line(tmp_path, results_dir, capsys):
    corrupt = tmp_path / "corrupt.jsonl.gz"
    _corrupt_gzip(corrupt)
    err = refused(dataset_args(corrupt), results_dir, capsys)
    assert f"{corrupt}: could not be read (corrupt or truncated gzip data" in err
    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(gzip.compress(json.dumps([GOOD] * 50).encode())[:-30])
    assert f"{truncated}: could not be read (corrupt or truncated gzip data" in refused(
        dataset_args(truncated), results_dir, capsys
    )
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert f"{deep}: nested too deeply" in refused(dataset_args(deep), results_dir, capsys)
    deep_line = tmp_path / "deep.jsonl"
    deep_line.write_text(json.dumps(GOOD) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    assert f"{deep_line}: line 2 is nested too deeply" in refused(dataset_args(deep_line), results_dir, capsys)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes((json.dumps(GOOD) + "\n").encode() * 2 + b'{"conversations": "caf\xe9"}\n')
    assert f"{latin}: line 3 is not UTF-8 text" in refused(dataset_args(latin), results_dir, capsys)
    latin_gz = tmp_path / "latin.json.gz"
    latin_gz.write_bytes(gzip.compress(b'[\n{"x": "caf\xe9"}]'))
    assert f"{latin_gz}: line 2 is not UTF-8 text" in refused(dataset_args(latin_gz), results_dir, capsys)


def test_dataset_with_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes("\ufeff".encode() + (json.dumps(GOOD) + "\n").encode() * 2)
    assert read_entries_from_file(path) == [GOOD, GOOD]


def _profile(tmp_path, name: str, **changes) -> str:
    data = QWEN25_7B_2XV100.model_dump(by_alias=True, exclude_none=True)
    for dotted, value in changes.items():
        section, _, key = dotted.partition("__")
        if key:
            data[section][key] = value
        else:
            data[section] = value
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else __import__("yaml").safe_dump(data))
    return str(path)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"prefill__alpha": float("inf")}, "prefill.alpha: Input should be a finite number"),
        ({"decode__delta": float("nan")}, "decode.delta: Input should be a finite number"),
        ({"decode__beta": True}, "decode.beta: expected a number, not a boolean"),
        ({"prefill__gamma": 1e9}, "prefill.gamma: Input should be less than or equal to 3600"),
        ({"kv_capacity_tokens": 10**15}, "kv_capacity_tokens: Input should be less than or equal to 1000000000"),
        ({"max_num_seqs": True}, "max_num_seqs: expected an integer, not a boolean"),
        ({"gpu__gpu_memory_gib": float("inf")}, "gpu.gpu_memory_gib: Input should be a finite number"),
    ],
)
def test_profile_with_bad_numbers_names_file_and_field(changes, expected, tmp_path, results_dir, capsys):
    path = _profile(tmp_path, "bad.yaml", **changes)
    err = refused(["--set", f"engine.profile={path}"], results_dir, capsys)
    assert f"{path}: " in err and expected in err, err


def test_a_profile_kv_cache_smaller_than_a_block_names_the_profile_not_a_flag(tmp_path, results_dir, capsys):
    path = _profile(tmp_path, "tiny-cache.yaml", kv_capacity_tokens=5)
    err = refused(["--set", f"engine.profile={path}"], results_dir, capsys)
    assert f"engine.profile: {path}: kv_capacity_tokens: a KV cache of 5 tokens is less than one block" in err, err
    err = refused(["--kv-capacity", "5"], results_dir, capsys)
    assert "engine.kv_capacity_tokens: a KV cache of 5 tokens is less than one block (16 tokens)" in err, err


def test_a_tokenizer_that_cannot_load_is_one_line_in_a_fresh_process(results_dir):
    """A new interpreter, as a user runs it: transformers' import-time advice ("PyTorch was not
    found ...") must not come before the error line."""
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            *"-m runners run --tokenizer /dev/null --requests 3 --quiet --out".split(),
            str(results_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: workload.tokenizer: could not load a tokenizer"), lines
    assert list(results_dir.iterdir()) == []


def test_unreadable_profile_files_name_the_file(tmp_path, results_dir, capsys):
    cases = {
        "latin.yaml": (b"name: caf\xe9\n", "not UTF-8 text"),
        "broken.yaml": (b"prefill: {alpha: [\nname: x\n", "not valid YAML"),
        "broken.json": (b'{"prefill": ', "not valid JSON"),
        "deep.json": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    }
    for name, (content, expected) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        err = refused(["--set", f"engine.profile={path}"], results_dir, capsys)
        assert f"{path}: {expected}" in err, err


def test_profile_loader_errors_are_config_errors_naming_engine_profile_and_good_profiles_load(tmp_path):
    from runners.engines.profile import load_profile

    with pytest.raises(ConfigError, match="engine.profile: .*p.json: prefill.alpha: Input should be a finite number"):
        load_profile(_profile(tmp_path, "p.json", prefill__alpha=float("inf")))
    config = parse_config({"engine": {"profile": _profile(tmp_path, "good.json")}})
    assert config.engine.resolve().latency.prefill == PhaseCoefficients.from_milliseconds(0.1, 5.7, 0.01, 43.67)
