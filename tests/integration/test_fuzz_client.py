"""Fuzz the streaming client (issue 9, items 4 and 5): generated malformed SSE chunks, usage
counts and short replies from tests/fakes/fault_server.py, through ``python -m runners run
--engine openai`` (in the fuzz sandbox, so a hang is reported, not suffered).

Properties for every case: the run ends in a terminal status well before ``max_duration_s``;
every request has its row; every token the server sent before the bad chunk is in its row;
the server sees a bounded number of requests (re-sends are bounded).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.fuzzing.checks import Failures, outcome_problems, run_folders, shorten
from tests.fuzzing.harness import SHARES, case_rng, count, in_share
from tests.fuzzing.mutate import awkward_json, structure_mutation
from tests.fuzzing.sandbox import get_sandbox
from tests.fuzzing.seeds import tiny_workload_args, write_dataset

fault_server = pytest.importorskip("tests.fakes.fault_server")
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fuzz sandbox forks")

REQUESTS = 3
MAX_DURATION_S = 30.0
QUICK_S = 10.0
GOOD_TOKENS = 2
GOOD_CHUNK = {
    "object": "text_completion",
    "choices": [{"index": 0, "text": "t ", "finish_reason": None}],
    "usage": None,
}
RAW_CHUNKS = [
    "{",
    "}",
    "[",
    "",
    " ",
    "data: x",
    "[DONE",
    "nul",
    '{"choices": [',
    "\x00",
    "\ufeff{}",
    "NaN",
    "Infinity",
    "-",
    "1e999",
    '{"choices": [{"text": "\\ud800"}]}',
    '{"choices": [{"text": "a"}]} extra',
    "{'choices': []}",
    '{"usage": {"completion_tokens": 1e999}}',
    '{"choices": [{"delta": "x"}]}',
]


def _chunk(rng) -> str:
    roll = rng.random()
    if roll < 0.25:
        return rng.choice(RAW_CHUNKS)
    if roll < 0.45:
        return json.dumps(awkward_json(rng))
    mutated, _, _ = structure_mutation(GOOD_CHUNK, rng)
    return json.dumps(mutated)


def _argv(url: str, out: Path, dataset: Path) -> list[str]:
    return [
        "run",
        "--engine",
        "openai",
        "--url",
        url,
        "--requests",
        str(REQUESTS),
        "--rate",
        "50",
        "--out",
        out,
        "--quiet",
        "--run-id",
        "fz",
        "--set",
        "engine.warmup_concurrency=[]",
        "--set",
        "engine.request_timeout_s=20",
        "--set",
        f"max_duration_s={MAX_DURATION_S}",
        "--set",
        "sample_interval_s=0.05",
        "--set",
        "workload.filters.min_output_tokens=8",
        *tiny_workload_args(dataset),
    ]


def _run_problems(sandbox, server, out: Path, dataset: Path, min_tokens: int) -> list[tuple[str, str]]:
    import pandas as pd

    outcome = sandbox.cli(_argv(server.url, out, dataset), timeout_s=MAX_DURATION_S + 10)
    problems = outcome_problems(outcome)
    if outcome.timed_out or outcome.raised:
        return problems
    if outcome.elapsed_s > QUICK_S:
        problems.append(
            (
                f"the run took more than {QUICK_S:.0f} s (max_duration_s {MAX_DURATION_S:.0f})",
                f"{outcome.elapsed_s:.1f} s",
            )
        )
    folders = run_folders(out)
    if not folders:
        return problems + [("no run folder", shorten(outcome.err, 200))]
    summary = json.loads((folders[0] / "summary.json").read_text())
    if summary.get("status") not in ("done", "failed", "cancelled"):
        problems.append((f"run status {summary.get('status')!r} after main() returned", ""))
    try:
        rows = pd.read_parquet(folders[0] / "requests.parquet")
    except Exception as exc:
        return problems + [("requests.parquet unreadable", repr(exc))]
    if len(rows) != REQUESTS:
        problems.append(("a request has no row", f"{len(rows)} rows for {REQUESTS} requests"))
    elif (rows["output_tokens"].fillna(0) < min_tokens).any():
        problems.append(
            (
                "tokens the server sent are missing from their row",
                f"output_tokens {rows['output_tokens'].tolist()}, sent at least {min_tokens}; "
                f"errors {shorten(rows['error'].tolist(), 160)}",
            )
        )
    if server.posts > 3 * REQUESTS:
        problems.append(("re-sends are not bounded", f"the server saw {server.posts} requests for {REQUESTS}"))
    return problems


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("client-tiny"))


@pytest.mark.parametrize("share", SHARES)
def test_generated_stream_faults(dataset, tmp_path, share):
    sandbox = get_sandbox()
    failures = Failures("streaming client against generated faults")
    plan: list[tuple[str, dict, int]] = []
    for index in range(count(16)):
        chunk = _chunk(case_rng("chunk", index))
        plan.append(
            (
                f"malformed chunk {chunk!r} after {GOOD_TOKENS} tokens",
                {"behaviour": "malformed", "chunk": chunk, "good_tokens": GOOD_TOKENS},
                GOOD_TOKENS,
            )
        )
    for index in range(count(6)):
        usage = case_rng("usage", index).choice([0, -1, -(2**63), 1, 2**63, 10**30, "abc", None, 1.5, [], {}, True])
        plan.append((f"usage.completion_tokens = {usage!r}", {"behaviour": "usage", "usage": usage}, 1))
    for index in range(count(3)):
        short = case_rng("short", index).choice([0, 1, 3])
        plan.append((f"short reply of {short} tokens", {"behaviour": "short", "short_tokens": short}, short))
    for number, (label, options, min_tokens) in enumerate(plan):
        if not in_share(number, share):
            continue
        server = fault_server.FaultServer(**options).start()
        try:
            failures.case()
            failures.extend(
                _run_problems(sandbox, server, tmp_path / f"f{number:02d}" / "results", dataset, min_tokens), label
            )
        finally:
            server.stop()
    assert not failures, failures.message()
