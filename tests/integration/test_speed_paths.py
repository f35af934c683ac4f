"""The shortcuts of the simulator speed work (issue 13 section 4) give what the long ways gave:
dataset lines parsed as they are used, requests tagged in place, ITL percentiles from counted
gaps, the merge from part tables kept in memory, the failure gate from counters, and a run's
garbage-collector freeze undone whatever happens."""

from __future__ import annotations

import gc
import gzip
import json
import math
from array import array

import numpy as np
import pyarrow.parquet as pq
import pytest

from runners.errors import ConfigError, DatasetError
from runners.metrics.run_metrics import distribution, weighted_distribution
from runners.run.benchmark import execute_run, failure_gate
from runners.run.config import parse_config
from runners.store import result_store
from runners.store.recording import RunRecorder
from runners.store.result_store import RunWriter
from runners.workload.builder import build_workload
from runners.workload.config import WorkloadConfig
from runners.workload.conversations import iter_entries_from_file, read_entries_from_file
from runners.workload.requests import Request
from runners.workload.slo import TaskSLO


def _line(prompt: str, reply: str) -> str:
    return json.dumps({"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": reply}]})


def test_jsonl_entries_are_parsed_one_at_a_time_and_a_bad_line_fails_when_reached(tmp_path):
    path = tmp_path / "d.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join([_line("a", "b"), "", _line("c", "d"), "{broken"]).encode()))
    entries = iter(iter_entries_from_file(path))
    assert next(entries)["conversations"][0]["value"] == "a"
    assert next(entries)["conversations"][1]["value"] == "d"  # the blank line 2 gives nothing
    with pytest.raises(DatasetError, match="line 4 is not valid JSON"):
        next(entries)
    with pytest.raises(DatasetError, match="line 4 is not valid JSON"):
        read_entries_from_file(path)  # the whole-list reader raises before returning anything
    with pytest.raises(DatasetError, match="file not found"):
        iter_entries_from_file(tmp_path / "missing.jsonl")  # at once, not when iterated


def test_two_gzip_members_are_one_file(tmp_path):
    path = tmp_path / "two.jsonl.gz"
    path.write_bytes(gzip.compress((_line("a", "b") + "\n").encode()) + gzip.compress(_line("c", "d").encode()))
    assert [entry["conversations"][0]["value"] for entry in read_entries_from_file(path)] == ["a", "c"]


def test_a_callable_sees_untagged_requests_then_every_request_carries_its_answer():
    config = WorkloadConfig(requests=40, seed=3)
    seen = {}
    chat, code = TaskSLO(ttft_s=1.0, tpot_s=0.1), TaskSLO(e2e_s=30.0)

    def slos_for(workload):
        seen["e2e"] = {request.slo.e2e_s for request in workload.requests}
        seen["means"] = workload.mean_lengths("chat")
        return {"chat": chat, "code": code}

    tagged = build_workload(config, slos_for)
    assert seen["e2e"] == {math.inf}  # the placeholder, before the SLOs exist
    direct = build_workload(config, {"chat": chat, "code": code})
    assert [(r.request_id, r.task, r.input_tokens, r.arrival_s) for r in tagged.requests] == [
        (r.request_id, r.task, r.input_tokens, r.arrival_s) for r in direct.requests
    ]
    assert all(r.slo is (chat if r.task == "chat" else code) for r in tagged.requests)
    chats = [r for r in direct.requests if r.task == "chat"]
    assert seen["means"] == (
        float(np.mean([r.input_tokens for r in chats])),
        float(np.mean([r.target_output_tokens for r in chats])),
    )
    with pytest.raises(ConfigError, match=r"no SLO for task\(s\) \['code'\]"):
        build_workload(config, lambda workload: {"chat": chat})
    with pytest.raises(ConfigError, match=r"no SLO for task\(s\) \['chat'\]"):
        build_workload(config, {"code": code})


def test_weighted_percentiles_with_the_list_mean():
    # 0.1 x3, 0.2 x1, 0.4 x2 -> sorted [0.1, 0.1, 0.1, 0.2, 0.4, 0.4]
    every = [0.4, 0.1, 0.1, 0.2, 0.4, 0.1]
    got = weighted_distribution([0.1, 0.2, 0.4], [3, 1, 2], mean_of=every)
    assert got["median"] == (0.1 + 0.2) / 2
    assert got["p90"] == 0.4  # virtual index 4.5 between two 0.4s
    assert math.isclose(got["p99"], 0.4)
    assert got["mean"] == float(np.mean(every))  # numpy's, in the list's order
    assert got == distribution(every)
    assert weighted_distribution([np.nan, 1.0], [2, 1], mean_of=[np.nan, 1.0, np.nan])["mean"] == 1.0


def test_itl_from_counted_gaps_equals_the_partition_of_every_gap():
    """A simulated engine's gaps repeat (its step durations). Step ends 0, 0.5, 0.75, 1.5, 2.0 s:
    six requests decode steps 0-3 (gaps 0.5, 0.25, 0.75 each); the last has a second slice
    whose token comes at step 4 (gap 0.5 from its last token). 19 gaps, 4 distinct entries:
    sorted 0.25 x6, 0.5 x7, 0.75 x6; median (index 9) 0.5, p90 (16.2) and p99 (17.82) 0.75,
    mean 9.5 / 19 = 0.5."""
    names = [f"r{i}" for i in range(6)]
    recorder = RunRecorder([Request(name, "chat", "", 4, 8, 0.0, TaskSLO(e2e_s=9.0)) for name in names])
    steps = array("d", [0.0, 0.5, 0.75, 1.5, 2.0])
    for name in names:
        recorder.step_tokens(name, 0, steps, [0, 4], 4)
    recorder.step_tokens("r5", 0, steps, [4, 5], 1)
    every = [0.5, 0.25, 0.75] * 6 + [0.5]
    assert recorder._gaps.ordered().tolist() == every
    got = recorder.itl_distribution()
    assert got == {"mean": 0.5, "median": 0.5, "p90": 0.75, "p99": 0.75}
    assert got == distribution(every)
    assert recorder.records["r0"].itl_max_s == 0.75 and recorder.records["r5"].output_tokens == 5


def test_failure_gate_from_counts():
    assert failure_gate(0, 0, 0.1)["error_rate"] is None
    gate = failure_gate(8, 2, 0.2)
    assert gate["error_rate"] == 0.25 and gate["tripped"]
    assert gate["reason"] == "2 of 8 requests failed (error rate 0.25 > max_error_rate 0.2)"
    assert not failure_gate(8, 2, 0.25)["tripped"]


@pytest.mark.parametrize("cache_bytes", [0, 3000, 2**24])
def test_merge_takes_parts_from_memory_or_disk(tmp_path, monkeypatch, cache_bytes):
    """Parts kept in memory (all of them) or read back (when they outgrow the cache) merge into
    every row in order; the part files are removed."""
    monkeypatch.setattr(result_store, "MERGE_CACHE_BYTES", cache_bytes)
    writer = RunWriter(tmp_path, "m", {}, {}, flush_rows=7)
    for i in range(50):
        writer.add_request(
            {
                "request_id": f"r{i}",
                "task": "chat",
                "arrival_s": i / 3,
                "output_tokens": i,
                "error": "x" if i % 9 == 0 else None,
            }
        )
        if writer.due():
            writer.flush()
    assert writer.requests.parts == 7  # 7 parts of 7 rows, 1 row left in the buffer
    cached = writer.requests.cached
    if cache_bytes == 2**24:
        assert len(cached) == 7 and writer.requests.cached_bytes > 3000  # 7 parts outgrow a 3000-byte cache
    else:
        assert cached is None
    writer.close("done", {})
    table = pq.read_table(tmp_path / "m" / "requests.parquet")
    assert table.column("request_id").to_pylist() == [f"r{i}" for i in range(50)]
    assert table.column("output_tokens").to_pylist() == list(range(50))
    assert table.column("error").null_count == 44  # r0, r9, ..., r45 failed
    assert not list((tmp_path / "m").glob("*.part-*"))


def test_merge_bytes_equal_across_cache_sizes(tmp_path, monkeypatch):
    files = []
    for cache_bytes in (0, 3000, 2**24):
        monkeypatch.setattr(result_store, "MERGE_CACHE_BYTES", cache_bytes)
        writer = RunWriter(tmp_path, f"c{cache_bytes}", {}, {}, flush_rows=5)
        for i in range(23):
            writer.add_request({"request_id": f"r{i}", "arrival_s": i * 0.1, "slo_met": i % 2 == 0})
            writer.add_sample({"t_s": i * 0.25, "instance": 0, "kv_usage": i / 23})
            if writer.due():
                writer.flush()
        writer.close("done", {})
        files.append(
            [(tmp_path / f"c{cache_bytes}" / name).read_bytes() for name in ("requests.parquet", "timeseries.parquet")]
        )
    assert files[0] == files[1] == files[2]


def test_a_run_leaves_nothing_frozen(tmp_path):
    assert gc.get_freeze_count() == 0
    config = {
        "workload": {"requests": 20, "arrival": {"process": "poisson", "rate": 4}},
        "scheduler": {"name": "fcfs"},
        "run_id": "small",
    }
    outcome = execute_run(parse_config(config), tmp_path)
    assert outcome.status == "done" and outcome.summary.completed == 20
    assert gc.get_freeze_count() == 0
    tiny_cache = parse_config({**config, "run_id": "refused", "engine": {"kind": "sim", "kv_capacity_tokens": 64}})
    with pytest.raises(ConfigError, match="engine.kv_capacity_tokens"):  # refused inside the run: unfrozen after
        execute_run(tiny_cache, tmp_path)
    assert gc.get_freeze_count() == 0
