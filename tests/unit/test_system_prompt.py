"""A shared system prompt (issue 31, workload.system_prompt): a share of the requests start with one
of a few made-up system prompts; they are otherwise the run's requests unchanged, carry the
segments that say what they share, and the simulator's prefix cache finds the shared blocks."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.workload.builder import SYSTEM_PROMPT_CONTENT, build_workload
from runners.workload.config import WorkloadConfig
from runners.workload.prefix import block_keys
from runners.workload.slo import TaskSLO

SLOS = {"chat": TaskSLO(e2e_s=30.0), "code": TaskSLO(e2e_s=30.0)}


def _workload(**system):
    config = WorkloadConfig.model_validate(
        {"requests": 200, "seed": 3, **({"system_prompt": system} if system else {})}
    )
    return build_workload(config, SLOS).requests


def test_the_requests_are_the_runs_own_with_a_system_prompt_before_a_share_of_them():
    plain, shared = _workload(), _workload(tokens=64, share=0.5, prompts=2)
    given = [after for after in shared if after.segments]
    assert 80 <= len(given) <= 120  # about half of 200
    assert _workload(tokens=64, share=0.5, prompts=2) == shared  # the same draw every time
    for before, after in zip(plain, shared):
        assert (before.request_id, before.arrival_s, before.target_output_tokens) == (
            after.request_id,
            after.arrival_s,
            after.target_output_tokens,
        )
        if after.segments:
            system, own = after.segments
            assert system[0] in (SYSTEM_PROMPT_CONTENT, SYSTEM_PROMPT_CONTENT + 1) and system[1] == 64
            assert after.input_tokens == before.input_tokens + 64 and own[1] == before.input_tokens
            assert after.prompt.endswith(before.prompt) and len(after.prompt) == len(before.prompt) + 64 * 4 + 2
        else:
            assert after == before
    # two requests with the same system prompt share exactly its 4 blocks of 16 tokens
    first, second = [r for r in given if r.segments[0][0] == SYSTEM_PROMPT_CONTENT][:2]
    one, other = block_keys(first.segments, 16), block_keys(second.segments, 16)
    assert one[:4] == other[:4] and one[4] != other[4]


def test_a_trace_and_a_system_prompt_are_refused_together():
    with pytest.raises(ValidationError, match="workload.system_prompt and workload.trace are both set"):
        WorkloadConfig.model_validate({"trace": {"path": "x.jsonl"}, "system_prompt": {"tokens": 64}})


def test_the_simulators_cache_finds_the_shared_system_prompt(results_dir):
    runs = {}
    for name, share in (("none", 0.0), ("all", 1.0)):
        config = {
            "run_id": name,
            "workload": {"requests": 100, "arrival": {"rate": 2}, "system_prompt": {"tokens": 512, "share": share}},
        }
        execute_run(parse_config(config), results_dir)
        runs[name] = json.loads((results_dir / name / "summary.json").read_text())
    assert runs["none"]["prefix_cache_hit_rate"] == 0.0
    cache = runs["all"]["prefix_cache"]
    # every request after the first finds the 512-token prompt (32 blocks of 16) cached
    assert cache["hits_tokens"] == 99 * 512
    assert runs["all"]["workload"].endswith("+sys 1x512tok@1")
