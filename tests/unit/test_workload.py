"""Loaders, tokenizers, arrivals, mixing and the synthetic stand-ins."""

from __future__ import annotations

import filecmp
import gzip
import json

import numpy as np
import pytest

from runners.errors import ConfigError, DatasetError
from runners.workload.arrivals import ArrivalConfig, arrival_times, read_timestamps
from runners.workload.builder import build_workload
from runners.workload.config import MixRatio, WorkloadConfig
from runners.workload.conversations import (
    SYNTHETIC_FILES,
    SYNTHETIC_SESSION_FILES,
    DatasetSource,
    LengthFilter,
    extract_pairs,
    load_pairs,
    read_entries_from_file,
)
from runners.workload.slo import PAPER_SLOS
from runners.workload.synthetic import write_stand_ins
from runners.workload.tokens import ApproximateTokenCounter, HuggingFaceTokenCounter, make_token_counter

WORDS = "word " * 50  # 250 characters -> 62 approximate tokens


def turn(role, value):
    return {"from": role, "value": value}


GOOD = {"id": "ok", "conversations": [turn("human", WORDS), turn("gpt", WORDS * 2)]}
ENTRIES = [
    GOOD,
    {"id": "model-first", "conversations": [turn("gpt", WORDS), turn("human", WORDS)]},
    {"id": "empty", "conversations": []},
    {"id": "non-string", "conversations": [turn("human", ["a list"]), turn("gpt", WORDS)]},
    {"id": "no-reply", "conversations": [turn("human", WORDS)]},
    {"id": "short", "conversations": [turn("human", "hi"), turn("gpt", WORDS)]},
    {"id": "system-first", "conversations": [turn("system", "be nice"), turn("human", WORDS), turn("gpt", WORDS)]},
    "not an object",
]


def test_extract_pairs_counts_every_skip_reason():
    pairs, report = extract_pairs(ENTRIES, ApproximateTokenCounter(), LengthFilter(), "test")
    assert len(pairs) == 2  # GOOD and system-first
    assert pairs[0].input_tokens == 62 and pairs[0].output_tokens == 125
    assert report.entries == 8 and report.kept == 2
    assert report.skipped == {
        "starts with a model turn": 1,
        "empty conversation": 1,
        "non-string value": 1,
        "no reply": 1,
        "prompt too short": 1,
        "entry is not an object": 1,
    }


def test_length_filter_defaults_follow_vllm():
    flt = LengthFilter()
    assert flt.rejects(3, 100) == "prompt too short"
    assert flt.rejects(1025, 10) == "prompt too long"
    assert flt.rejects(1000, 1049) == "prompt + reply too long"
    assert flt.rejects(1000, 1048) is None
    with pytest.raises(ValueError):
        LengthFilter(min_input_tokens=10, max_input_tokens=5)


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".json.gz"])
def test_local_files_json_jsonl_gz(tmp_path, suffix):
    path = tmp_path / f"data{suffix}"
    if suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(e) for e in ENTRIES[:2]) + "\n")
    elif suffix.endswith(".gz"):
        with gzip.open(path, "wt") as handle:
            json.dump(ENTRIES[:2], handle)
    else:
        path.write_text(json.dumps(ENTRIES[:2]))
    assert len(read_entries_from_file(path)) == 2


def test_malformed_json_names_file_and_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"conversations": [}')
    with pytest.raises(DatasetError) as info:
        read_entries_from_file(path)
    assert "broken.json" in str(info.value) and "line 1" in str(info.value)


def test_malformed_jsonl_names_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{oops\n")
    with pytest.raises(DatasetError, match=r"broken.jsonl: line 2 is not valid JSON"):
        read_entries_from_file(path)


def test_wrong_top_level_and_missing_file(tmp_path):
    path = tmp_path / "object.json"
    path.write_text('{"a": 1}')
    with pytest.raises(DatasetError, match="expected an array of conversations"):
        read_entries_from_file(path)
    with pytest.raises(DatasetError, match="file not found"):
        read_entries_from_file(tmp_path / "nope.json")


def test_file_with_nothing_usable_explains_why(tmp_path):
    path = tmp_path / "useless.json"
    path.write_text(json.dumps(ENTRIES[1:3]))
    with pytest.raises(DatasetError) as info:
        load_pairs(DatasetSource(kind="file", path=str(path)), "chat", ApproximateTokenCounter(), LengthFilter())
    message = str(info.value)
    assert "useless.json" in message and "starts with a model turn: 1" in message and "ShareGPT format" in message


def test_datasets_library_path_with_local_data_files(tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps([GOOD, GOOD]))
    source = DatasetSource(kind="hub", hub_id="json", data_files=str(path))
    pairs, report = load_pairs(source, "chat", ApproximateTokenCounter(), LengthFilter())
    assert len(pairs) == 2 and report.source == f"hub:json/{path}"


def test_datasets_library_unreachable_hub_is_a_clear_error():
    source = DatasetSource(kind="hub", hub_id="nobody/not-a-dataset-xyz")
    with pytest.raises(DatasetError, match="hub:nobody/not-a-dataset-xyz: could not load"):
        load_pairs(source, "chat", ApproximateTokenCounter(), LengthFilter())


def test_huggingface_tokenizer_from_local_folder(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocabulary = {"[UNK]": 0, "hello": 1, "world": 2}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocabulary, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    counter = HuggingFaceTokenCounter(tmp_path / "tok")
    assert counter.count(["hello world hello", "world"]) == [3, 1]
    with pytest.raises(ConfigError, match="workload.tokenizer"):
        HuggingFaceTokenCounter(tmp_path / "missing")
    # loaded once per folder, and each text is tokenised once
    shared = make_token_counter(str(tmp_path / "tok"))
    assert make_token_counter(str(tmp_path / "tok")) is shared
    assert shared.count(["world hello", "hello world hello", "world hello"]) == [2, 3, 2]
    shared._tokenizer = None  # any new text would now fail
    assert shared.count(["hello world hello", "world hello"]) == [3, 2]
    with pytest.raises(ConfigError, match="workload.tokenizer"):
        make_token_counter(str(tmp_path / "missing"))


# -- arrivals ----------------------------------------------------------------------------------
def test_constant_and_all_at_once():
    np.testing.assert_allclose(
        arrival_times(ArrivalConfig(process="constant", rate=4), 5, 0), [0, 0.25, 0.5, 0.75, 1.0]
    )
    assert arrival_times(ArrivalConfig(process="all-at-once"), 3, 0).tolist() == [0, 0, 0]


def test_poisson_rate_and_gamma_burstiness():
    poisson = arrival_times(ArrivalConfig(process="poisson", rate=10), 20001, 1)
    gaps = np.diff(poisson)
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1
    bursty = np.diff(arrival_times(ArrivalConfig(process="gamma", rate=10, burstiness=0.25), 20001, 1))
    assert bursty.mean() == pytest.approx(0.1, rel=0.05)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.07)  # gamma shape k: CV 1/sqrt(k)
    assert np.array_equal(poisson, arrival_times(ArrivalConfig(process="poisson", rate=10), 20001, 1))


def test_replay_file_formats_and_errors(tmp_path):
    csv_file = tmp_path / "trace.csv"
    csv_file.write_text("request,arrival_s\na,100.0\nb,100.5\nc,102\n")
    np.testing.assert_allclose(read_timestamps(csv_file), [0, 0.5, 2.0])
    json_file = tmp_path / "trace.json"
    json_file.write_text("[3, 4, 4]")
    np.testing.assert_allclose(arrival_times(ArrivalConfig(process="replay", replay_file=str(json_file)), 2, 0), [0, 1])
    backwards = tmp_path / "back.txt"
    backwards.write_text("1\n2\n1.5\n")
    with pytest.raises(DatasetError, match="entry 3 goes back in time"):
        read_timestamps(backwards)
    junk = tmp_path / "junk.txt"
    junk.write_text("1\nsoon\n")
    with pytest.raises(DatasetError, match="entry 2 is 'soon'"):
        read_timestamps(junk)
    with pytest.raises(ConfigError, match="has 3 timestamps but 5 requests"):
        arrival_times(ArrivalConfig(process="replay", replay_file=str(csv_file)), 5, 0)


def test_arrival_config_rejects_nonsense():
    with pytest.raises(ValueError, match="greater than or equal to 0.000001"):
        ArrivalConfig(process="poisson", rate=-1)
    with pytest.raises(ValueError, match="needs replay_file"):
        ArrivalConfig(process="replay")


# -- mixing ------------------------------------------------------------------------------------
def test_ratio_counts_and_zero_sum():
    assert MixRatio().counts(501) == {"chat": 250, "code": 251}
    assert MixRatio(chat=3, code=1).counts(100) == {"chat": 75, "code": 25}
    assert MixRatio(chat=0, code=1).counts(10) == {"chat": 0, "code": 10}
    with pytest.raises(ValueError, match="chat \\+ code must be > 0"):
        MixRatio(chat=0, code=0)


def test_build_workload_is_seeded_tagged_and_labelled_synthetic():
    config = WorkloadConfig(requests=200, seed=7, arrival=ArrivalConfig(process="poisson", rate=5))
    first = build_workload(config, PAPER_SLOS)
    again = build_workload(config, PAPER_SLOS)
    other = build_workload(config.model_copy(update={"seed": 8}), PAPER_SLOS)
    assert [r.prompt for r in first.requests] == [r.prompt for r in again.requests]
    assert [r.prompt for r in first.requests] != [r.prompt for r in other.requests]
    assert sum(r.task == "chat" for r in first.requests) == 100
    assert all(r.slo == PAPER_SLOS[r.task] for r in first.requests)
    assert [r.arrival_s for r in first.requests] == sorted(r.arrival_s for r in first.requests)
    assert first.synthetic and "synthetic" in config.label()
    tasks = [r.task for r in first.requests]
    assert tasks[:20] != sorted(tasks[:20])  # shuffled, not grouped by task
    assert first.reports["chat"]["skipped"] == {} and not first.reports["chat"]["oversampled"]


def test_oversampling_when_asking_for_more_than_the_dataset(tmp_path):
    path = tmp_path / "two.json"
    path.write_text(json.dumps([GOOD, GOOD]))
    config = WorkloadConfig(
        requests=10, ratio=MixRatio(chat=1, code=0), chat=DatasetSource(kind="file", path=str(path))
    )
    workload = build_workload(config, PAPER_SLOS)
    assert len(workload.requests) == 10 and workload.reports["chat"]["oversampled"]
    assert not workload.synthetic


def test_committed_stand_ins_are_reproducible(tmp_path):
    written = write_stand_ins(tmp_path)
    committed = {**SYNTHETIC_FILES, "chat sessions": SYNTHETIC_SESSION_FILES["chat"]}
    assert set(written) == set(committed)
    for name, path in written.items():
        assert filecmp.cmp(path, committed[name], shallow=False), f"{committed[name]} differs from the generator"


def test_stand_in_lengths_match_documented_statistics():
    for task, (mean_in, mean_out) in {"chat": (215.9, 212.0), "code": (120.2, 462.2)}.items():
        pairs, report = load_pairs(DatasetSource(), task, ApproximateTokenCounter(), LengthFilter())
        assert report.kept == 5000
        assert np.mean([p.input_tokens for p in pairs]) == pytest.approx(mean_in, abs=0.1)
        assert np.mean([p.output_tokens for p in pairs]) == pytest.approx(mean_out, abs=0.1)


def test_a_path_the_file_system_cannot_look_up_is_not_found_not_a_crash():
    # found by the input fuzzer: Path.is_file() raises OSError (name too long) on Python 3.11
    from runners.engines.profile import load_profile
    from runners.errors import DatasetError
    from runners.workload.conversations import iter_entries_from_file

    too_long = "∞" * 300
    with pytest.raises(DatasetError, match="file not found"):
        iter_entries_from_file(too_long)
    with pytest.raises(ConfigError, match="profile file not found"):
        load_profile(too_long)
