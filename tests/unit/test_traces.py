"""Production traces (runners/workload/traces.py): the three readers on the shipped samples with
hand-checked values, exact arrival offsets, Mooncake block sharing, BurstGPT failures, one error
naming file, line and field for every kind of bad file, and the workload built from a trace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runners.errors import ConfigError, DatasetError
from runners.run.config import parse_config
from runners.workload.builder import OVER_CONTEXT, ContextLimit, build_workload
from runners.workload.config import WorkloadConfig
from runners.workload.prefix import MOONCAKE_BLOCK_TOKENS, block_keys
from runners.workload.slo import TaskSLO
from runners.workload.tokens import ApproximateTokenCounter
from runners.workload.trace_samples import write_samples
from runners.workload.traces import (
    BURSTGPT_FAILED,
    TRACES_DIR,
    TraceConfig,
    content_text,
    detect_format,
    load_trace,
)

MOONCAKE = TRACES_DIR / "mooncake_synthetic.jsonl"
AZURE_CODE = TRACES_DIR / "azure_code_synthetic.csv"
AZURE_CONV = TRACES_DIR / "azure_conv_synthetic.csv"
BURSTGPT = TRACES_DIR / "burstgpt_synthetic.csv"
SLOS = {"chat": TaskSLO(e2e_s=30.0), "code": TaskSLO(e2e_s=30.0)}


def load(path: Path, max_requests: int | None = None, **options):
    return load_trace(TraceConfig(path=str(path), **options), max_requests)


# -- the samples, by hand ---------------------------------------------------------------------------
def test_mooncake_sample_records_segments_and_offsets():
    # first lines of the file:
    # {"timestamp": 0, "input_length": 144, "output_length": 229, "hash_ids": [0]}
    # {"timestamp": 2058, "input_length": 3046, "output_length": 500, "hash_ids": [1, 2, 3, 4, 5, 6]}
    # {"timestamp": 2232, "input_length": 1889, "output_length": 428, "hash_ids": [7, 8, 9, 10]}
    trace = load(MOONCAKE)
    assert trace.format == "mooncake" and trace.read == 200 and len(trace.records) == 200 and not trace.skipped
    first, second, third = trace.records[:3]
    assert (first.line, first.input_tokens, first.output_tokens, first.task) == (1, 144, 229, "chat")
    assert first.segments == ((0, 144),)  # one partial block
    assert second.segments == ((1, 512), (2, 512), (3, 512), (4, 512), (5, 512), (6, 3046 - 5 * 512))
    assert (third.input_tokens, third.output_tokens) == (1889, 428)
    assert trace.arrivals_s[:4] == [0.0, 2.058, 2.232, 3.135]  # milliseconds / 1000, exactly
    assert trace.report()["trace_span_s"] == 217.089 and trace.report()["synthetic"] is True


def test_azure_code_sample_2023_timestamps():
    # TIMESTAMP,ContextTokens,GeneratedTokens
    # 2023-11-16 18:17:03.9799600,3355,50
    # 2023-11-16 18:17:04.4020201,1085,43
    # 2023-11-16 18:17:04.5923025,3600,19
    trace = load(AZURE_CODE)
    assert trace.format == "azure" and trace.read == 200
    first, second, third = trace.records[:3]
    assert (first.line, first.input_tokens, first.output_tokens, first.task, first.segments) == (
        2,
        3355,
        50,
        "code",
        (),
    )
    assert (second.input_tokens, second.output_tokens, third.input_tokens) == (1085, 43, 3600)
    assert trace.arrivals_s[:3] == [0.0, 0.4220601, 0.6123425]  # seven fraction digits kept


def test_azure_conv_sample_2024_timestamps_are_chat():
    # 2024-05-10 00:00:00.009930+00:00,435,500
    # 2024-05-10 00:00:01.480924+00:00,605,500
    trace = load(AZURE_CONV)
    assert {record.task for record in trace.records} == {"chat"}
    assert [(r.input_tokens, r.output_tokens) for r in trace.records[:2]] == [(435, 500), (605, 500)]
    assert trace.arrivals_s[:2] == [0.0, 1.470994]


def test_azure_timestamps_with_and_without_fraction_or_zone(tmp_path):
    """The 2024 files mix stamps with and without a fraction (pandas needs format='mixed'); a
    zone moves the clock, none is UTC."""
    path = tmp_path / "AzureLLMInferenceTrace_conv_1week.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.5+00:00,10,2\n"
        "2024-05-10 00:00:01+00:00,11,2\n"
        "2024-05-10T02:00:01.25+02:00,12,2\n"
        "2024-05-10 00:00:03Z,13,2\n"
        "2024-05-10 00:00:04.000000001,14,2\n"
    )
    trace = load(path)
    assert trace.arrivals_s == [0.0, 0.5, 0.75, 2.5, 3.500000001]
    assert [r.input_tokens for r in trace.records] == [10, 11, 12, 13, 14] and trace.records[0].task == "chat"


def test_burstgpt_failures_skipped_and_counted():
    # 0,ChatGPT,650,196,846,API log
    # 1,ChatGPT,3400,381,3781,API log
    # 2,ChatGPT,1071,0,1071,Conversation log      <- failed: skipped
    # 3,ChatGPT,1133,182,1315,API log
    trace = load(BURSTGPT)
    assert trace.format == "burstgpt"
    assert trace.skipped == {BURSTGPT_FAILED: 19} and trace.read == 181
    assert trace.report()["skipped"] == {"failed (Response tokens 0)": 19}
    assert [record.line for record in trace.records[:3]] == [2, 3, 5]
    assert [(r.input_tokens, r.output_tokens) for r in trace.records[:3]] == [(650, 196), (3400, 381), (1133, 182)]
    assert trace.arrivals_s[:3] == [0.0, 1.0, 3.0] and {r.task for r in trace.records} == {"chat"}


@pytest.mark.parametrize("path", [MOONCAKE, AZURE_CODE, AZURE_CONV, BURSTGPT])
def test_speedup_divides_offsets_and_max_requests_takes_the_first(path):
    plain = load(path)
    fast = load(path, 30, speedup=2.0)
    assert fast.arrivals_s[0] == 0.0 and len(fast.records) == 30
    assert fast.arrivals_s == [offset / 2 for offset in plain.arrivals_s[:30]]
    assert fast.records == plain.records[:30] and fast.report()["span_s"] == plain.arrivals_s[29] / 2


def test_out_of_order_file_is_sorted_and_offsets_start_at_the_first_in_time(tmp_path):
    path = tmp_path / "late.jsonl"
    lines = [
        {"timestamp": 5000, "input_length": 10, "output_length": 5, "hash_ids": [0]},
        {"timestamp": 2000, "input_length": 20, "output_length": 5, "hash_ids": [1]},
        {"timestamp": 3500, "input_length": 30, "output_length": 5, "hash_ids": [2]},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    trace = load(path, 2)
    assert trace.reordered and [r.input_tokens for r in trace.records] == [20, 30]
    assert trace.arrivals_s == [0.0, 1.5]


# -- Mooncake sharing --------------------------------------------------------------------------------
def _full_common_blocks(a: list[int], b: list[int], input_a: int, input_b: int) -> int:
    """Leading hash ids the two share whose blocks are full (512 tokens) in both."""
    count = 0
    for index, (x, y) in enumerate(zip(a, b)):
        full = (index + 1) * MOONCAKE_BLOCK_TOKENS
        if x != y or full > input_a or full > input_b:
            break
        count += 1
    return count


def test_mooncake_block_keys_shared_exactly_as_the_common_hash_id_prefix():
    entries = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    records = load(MOONCAKE).records
    keys = [block_keys(record.segments, MOONCAKE_BLOCK_TOKENS) for record in records]
    shared_pairs = 0
    for i in range(80):
        for j in range(i + 1, 80):
            expected = _full_common_blocks(
                entries[i]["hash_ids"], entries[j]["hash_ids"], records[i].input_tokens, records[j].input_tokens
            )
            assert len(os.path.commonprefix([keys[i], keys[j]])) == expected, (i, j)
            shared_pairs += expected > 0
    assert shared_pairs > 100  # the sample does share (system prompts, conversations)
    # lines 3 and 5: [7, 8, 9, 10] (1,889 tokens: 3 full blocks) and [7, 8, 13] (1,218: 2 full)
    assert len(keys[2]) == 3 and keys[4] == keys[2][:2]


def test_mooncake_prompts_share_exactly_the_text_of_their_shared_blocks():
    workload = build_workload(WorkloadConfig(trace=TraceConfig(path=str(MOONCAKE))), SLOS)
    a, b = workload.requests[2], workload.requests[4]  # hash ids [7, 8, 9, 10] and [7, 8, 13]
    assert len(os.path.commonprefix([a.prompt, b.prompt])) == 2 * MOONCAKE_BLOCK_TOKENS * 4
    assert a.segments == ((7, 512), (8, 512), (9, 512), (10, 1889 - 3 * 512))
    # the same content id is the same text wherever it appears; a shorter piece is its start
    assert content_text(9, 512).startswith(content_text(9, 100)) and content_text(9, 5) != content_text(10, 5)


def test_mooncake_fewer_hash_ids_leave_the_rest_of_the_prompt_its_own(tmp_path):
    path = tmp_path / "short_ids.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1300, "output_length": 5, "hash_ids": [4]}\n')
    (record,) = load(path).records
    assert record.segments[0] == (4, 512) and record.segments[1][1] == 1300 - 512
    assert record.segments[1][0] >= 1 << 40  # a content id no hash id can be


# -- bad files: one error naming file, line and field --------------------------------------------------
def _error(path: Path, **options) -> str:
    with pytest.raises(DatasetError) as caught:
        load(path, **options)
    return str(caught.value)


def test_mooncake_missing_field(tmp_path):
    path = tmp_path / "missing.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 5, "output_length": 5}\n')
    assert _error(path) == (
        f"{path}: line 2, field 'input_length': missing; expected one JSON object per line with timestamp (ms), "
        "input_length, output_length (tokens) and hash_ids"
    )


def test_mooncake_bad_number_and_negative_timestamp(tmp_path):
    path = tmp_path / "bad_number.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": "five"}\n')
    message = _error(path)
    assert message.startswith(f"{path}: line 1, field 'output_length': 'five' is not a number; expected a whole")
    path.write_text('\n\n{"timestamp": -3, "input_length": 10, "output_length": 5}\n')
    assert _error(path).startswith(f"{path}: line 3, field 'timestamp': -3 is negative; expected milliseconds")
    path.write_text('{"timestamp": 1, "input_length": 10.5, "output_length": 5}\n')
    assert "line 1, field 'input_length': 10.5 is not a whole number" in _error(path)


def test_mooncake_bad_json_line_as_a_partial_file_ends(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"timestamp": 9, "input_len')
    message = _error(path)
    assert message.startswith(f"{path}: line 2: not valid JSON (Unterminated string starting at: column 18)")
    path.write_text("[1, 2]\n")
    assert _error(path).startswith(f"{path}: line 1: a JSON list, not an object; expected one JSON object")


def test_mooncake_too_many_hash_ids(tmp_path):
    path = tmp_path / "ids.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1025, "output_length": 5, "hash_ids": [1, 2, 3, 4]}\n')
    assert _error(path) == (
        f"{path}: line 1, field 'hash_ids': 4 block ids but input_length 1025 fills 3 block(s) of 512 tokens; "
        "expected at most ceil(input_length / 512) = 3 ids"
    )
    path.write_text('{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [true]}\n')
    assert "line 1, field 'hash_ids': entry 1 is True" in _error(path)


@pytest.mark.parametrize("name", ["empty.jsonl", "empty_code.csv", "empty.csv"])
def test_empty_file(tmp_path, name):
    path = tmp_path / name
    path.write_text("")
    message = _error(path, format="azure" if "code" in name else "auto")
    assert message.startswith(f"{path}: line 1: the file is empty; expected")


def test_azure_bad_number_and_bad_timestamp(tmp_path):
    path = tmp_path / "trace_code.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,12,3\n2023-11-16 18:17:04.1,1x,4\n"
    )
    assert _error(path) == (
        f"{path}: line 3, field 'ContextTokens': '1x' is not a number; expected a whole number of tokens >= 0"
    )
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-31 18:17:03,12,3\n")
    assert _error(path).startswith(f"{path}: line 2, field 'TIMESTAMP': '2023-11-31 18:17:03' is not a valid date")


def test_azure_missing_column_and_partial_row(tmp_path):
    path = tmp_path / "conv.csv"
    path.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.97,12\n")
    assert _error(path, format="azure") == (
        f"{path}: line 1, field 'GeneratedTokens': missing from the header; expected a CSV with the header "
        "TIMESTAMP,ContextTokens,GeneratedTokens"
    )
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,12,4\n2023-11-16 18:17:04")
    assert _error(path).startswith(
        f"{path}: line 3, field 'ContextTokens': missing (the row has 1 of 3 columns); expected a CSV"
    )


def test_burstgpt_bad_timestamp(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "0,ChatGPT,10,5,15,API log\nsoon,ChatGPT,10,5,15,API log\n"
    )
    assert _error(path) == f"{path}: line 3, field 'Timestamp': 'soon' is not a number; expected seconds, a number >= 0"


def test_only_failures_is_one_error_with_the_counts(tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,GPT-4,10,0,10,API log\n")
    assert _error(path) == (
        f"{path}: holds no usable record (1 failed (Response tokens 0)); expected a CSV with the header "
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
    )


# -- formats and tasks ---------------------------------------------------------------------------------
def test_format_detection(tmp_path):
    assert [detect_format(p) for p in (MOONCAKE, AZURE_CODE, AZURE_CONV, BURSTGPT)] == [
        "mooncake",
        "azure",
        "azure",
        "burstgpt",
    ]
    jsonl_as_txt = tmp_path / "trace.txt"
    jsonl_as_txt.write_text('{"timestamp": 0, "input_length": 10, "output_length": 5}\n')
    assert detect_format(jsonl_as_txt) == "mooncake"
    unknown = tmp_path / "other.csv"
    unknown.write_text("time,prompt,reply\n1,2,3\n")
    with pytest.raises(DatasetError, match=r"other.csv: line 1: cannot tell the trace format from 'time,prompt,reply'"):
        detect_format(unknown)


def test_azure_task_from_the_name_or_the_option(tmp_path):
    plain = tmp_path / "azure.csv"
    plain.write_bytes(AZURE_CODE.read_bytes())
    with pytest.raises(ConfigError) as caught:
        load(plain)
    assert caught.value.field == "workload.trace.task" and str(plain) in str(caught.value)
    assert {r.task for r in load(plain, task="chat").records} == {"chat"}
    assert {r.task for r in load(MOONCAKE, 5, task="code").records} == {"code"}


def test_missing_trace_file(tmp_path):
    assert _error(tmp_path / "nope.jsonl").endswith(
        "nope.jsonl: trace file not found; expected a Mooncake .jsonl, Azure .csv or BurstGPT .csv"
    )


# -- config and builder --------------------------------------------------------------------------------
def test_trace_and_an_explicit_arrival_process_are_refused_naming_both():
    with pytest.raises(ConfigError) as caught:
        parse_config({"workload": {"trace": {"path": str(MOONCAKE)}, "arrival": {"process": "gamma"}}})
    assert "workload.arrival and workload.trace are both set" in str(caught.value)
    config = parse_config({"workload": {"trace": {"path": str(MOONCAKE), "speedup": 4}}})
    assert config.workload.trace.speedup == 4 and config.workload.is_synthetic
    with pytest.raises(ConfigError, match="speedup"):
        parse_config({"workload": {"trace": {"path": str(MOONCAKE), "speedup": 0}}})


def test_workload_from_a_trace():
    config = WorkloadConfig(requests=500, trace=TraceConfig(path=str(BURSTGPT), speedup=2))
    workload = build_workload(config, SLOS)
    assert len(workload.requests) == 181  # min(requests, usable records)
    first = workload.requests[0]
    assert (first.request_id, first.task, first.input_tokens, first.target_output_tokens) == (
        "req-00000",
        "chat",
        650,
        196,
    )
    assert [r.arrival_s for r in workload.requests[:3]] == [0.0, 0.5, 1.5]
    assert first.segments == () and first.source == "trace" and first.slo == SLOS["chat"]
    # 4 characters per token: the default approximation counts each prompt back to its length
    counts = ApproximateTokenCounter().count([r.prompt for r in workload.requests])
    assert counts == [r.input_tokens for r in workload.requests]
    assert len({r.prompt[:40] for r in workload.requests}) == 181  # no two prompts start alike
    report = workload.reports["trace"]
    assert report["sent"] == 181 and report["skipped"] == {BURSTGPT_FAILED: 19} and report["speedup"] == 2
    assert report["span_s"] == workload.requests[-1].arrival_s and workload.synthetic
    assert workload.mean_lengths("code") is None


def test_trace_records_over_the_server_context_are_skipped_and_counted():
    config = WorkloadConfig(requests=50, trace=TraceConfig(path=str(AZURE_CONV)))
    workload = build_workload(config, SLOS, context=ContextLimit(max_tokens=1500, prompt_overhead_tokens=10))
    assert all(r.input_tokens + 10 + r.target_output_tokens <= 1500 for r in workload.requests)
    assert len(workload.requests) == 50 and workload.reports["trace"]["skipped"][OVER_CONTEXT] > 0
    assert workload.requests[0].arrival_s == 0.0


def test_shipped_samples_are_what_the_generator_writes(tmp_path):
    written = write_samples(tmp_path)
    assert len(written) == 4
    for name, path in written.items():
        assert path.read_bytes() == (TRACES_DIR / name).read_bytes(), name
    assert not (TRACES_DIR / "__init__.py").exists()
