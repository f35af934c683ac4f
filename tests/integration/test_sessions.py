"""Multi-turn sessions (issue 31 item 1): the turns a conversation file gives, hand-counted; the
closed loop on the simulator (a turn arrives exactly when the previous reply ended plus its think
time, and latency counts from then); on the wall-clock driver against a server in vLLM's wire
format (turn n's prompt starts with turn n-1's, and is sent only after that reply); a failed turn
ends its session (later turns not run, counted); the per-turn and per-session summary."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from runners.app.cli import main
from runners.errors import ConfigError
from runners.metrics.outcomes import SESSION_ENDED
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.store.result_store import load_run
from runners.workload.builder import build_workload
from runners.workload.config import WorkloadConfig
from runners.workload.conversations import conversation_turns
from runners.workload.requests import FOLLOWS
from runners.workload.sessions import SESSION_CONTENT
from runners.workload.slo import PAPER_SLOS
from tests.fakes.fault_server import FaultServer
from tests.integration.test_client_faults import config_for


def _message(role: str, tokens: int, letter: str) -> dict:
    return {"from": role, "value": letter * (4 * tokens)}  # 4 characters a token: the approximation's


def _conversation_file(tmp_path: Path) -> Path:
    """Two conversations: A with 4 exchanges of (10, 20), (30, 40), (50, 60), (70, 80) tokens;
    B with 1 exchange (5, 6) then a user message with no reply (not a turn)."""
    a = [(10, 20), (30, 40), (50, 60), (70, 80)]
    conversation_a = [m for i, o in a for m in (_message("human", i, "a"), _message("gpt", o, "b"))]
    conversation_b = [_message("human", 5, "c"), _message("gpt", 6, "d"), _message("human", 7, "e")]
    path = tmp_path / "chats.json"
    path.write_text(json.dumps([{"conversations": conversation_a}, {"conversations": conversation_b}]))
    return path


def _workload(path: Path, **multi_turn) -> WorkloadConfig:
    return WorkloadConfig.model_validate(
        {
            "requests": 2,
            "ratio": {"chat": 1, "code": 0},
            "chat": {"kind": "file", "path": str(path)},
            "arrival": {"process": "all-at-once"},
            "multi_turn": multi_turn,
        }
    )


def test_a_conversation_becomes_turns_whose_prompts_are_the_conversation_so_far(tmp_path):
    config = _workload(_conversation_file(tmp_path), think_time={"distribution": "constant", "mean_s": 2.5})
    workload = build_workload(config, PAPER_SLOS)
    by_session: dict[str, list] = {}
    for request in workload.requests:
        by_session.setdefault(request.session, []).append(request)
    turns = sorted(by_session.values(), key=len)
    assert [len(t) for t in turns] == [1, 4]  # B's unanswered message is not a turn
    a = turns[1]
    # turn n: every message before its reply; its target output is the dataset's n-th reply
    assert [r.input_tokens for r in a] == [10, 10 + 20 + 30, 60 + 40 + 50, 150 + 60 + 70]
    assert [r.target_output_tokens for r in a] == [20, 40, 60, 80]
    assert [r.turn for r in a] == [1, 2, 3, 4] and [r.after for r in a] == ["", *(r.request_id for r in a[:3])]
    assert a[0].arrival_s == 0.0 and all(r.arrival_s == FOLLOWS for r in a[1:])
    assert [r.think_s for r in a] == [0.0, 2.5, 2.5, 2.5]
    for earlier, later in zip(a, a[1:]):
        assert later.prompt.startswith(earlier.prompt)
        assert later.segments[: len(earlier.segments)] == earlier.segments  # the shared prefix
    assert [len(r.segments) for r in a] == [1, 3, 5, 7] and a[0].segments[0][0] >= SESSION_CONTENT
    report = workload.reports["sessions"]
    assert report["sessions"] == 2 and report["turns"] == 5 and report["turns_cut_at_context"] == 0


def test_a_session_stops_at_the_context_limit_and_at_max_turns_counted(tmp_path):
    path = _conversation_file(tmp_path)
    # turn 3 needs 150 + 60 = 210 tokens: a 200-token context stops A after turn 2
    workload = build_workload(_workload(path, context_tokens=200), PAPER_SLOS)
    report = workload.reports["sessions"]
    assert report["turns"] == 3 and report["sessions_cut_at_context"] == 1 and report["turns_cut_at_context"] == 2
    capped = build_workload(_workload(path, max_turns=3), PAPER_SLOS).reports["sessions"]
    assert capped["turns"] == 4 and capped["sessions_over_max_turns"] == 1 and capped["turns_cut_at_context"] == 0


def test_conversation_turns_stop_at_the_first_break():
    human, gpt = {"from": "human", "value": "q"}, {"from": "gpt", "value": "r"}
    assert conversation_turns({"conversations": [human, gpt, human, gpt, gpt, human]}, 10) == [("q", "r")] * 2
    assert conversation_turns({"conversations": [human, gpt, human, {"from": "gpt", "value": " "}]}, 10) == [("q", "r")]
    assert conversation_turns({"conversations": [human, gpt] * 5}, 3) == [("q", "r")] * 3
    assert conversation_turns({"conversations": [gpt, human]}, 3) == "starts with a model turn"


def _sim_session_run(results: Path, run_id: str = "mt", **multi_turn) -> tuple:
    data = {
        "run_id": run_id,
        "workload": {"requests": 40, "seed": 3, "arrival": {"rate": 1.0}, "multi_turn": multi_turn},
        "engine": {"kind": "sim"},
    }
    outcome = execute_run(parse_config(data), results)
    assert outcome.status == "done", outcome.error
    return outcome, load_run(results, run_id)


def test_on_the_simulator_each_turn_arrives_when_the_previous_reply_ended_plus_its_think_time(tmp_path):
    outcome, run = _sim_session_run(tmp_path, max_turns=5, think_time={"mean_s": 1.5})
    rows = run.requests.set_index("request_id")
    workload = build_workload(
        WorkloadConfig.model_validate(
            {
                "requests": 40,
                "seed": 3,
                "arrival": {"rate": 1.0},
                "multi_turn": {"max_turns": 5, "think_time": {"mean_s": 1.5}},
            }
        ),
        PAPER_SLOS,
    )
    later = [r for r in workload.requests if r.after]
    assert len(later) > 20 and len(rows) == len(workload.requests)  # code sessions are single-turn
    for request in later:
        assert rows.at[request.request_id, "arrival_s"] == rows.at[request.after, "finish_s"] + request.think_s
        assert rows.at[request.request_id, "dispatch_s"] >= rows.at[request.request_id, "arrival_s"]
        assert (
            rows.at[request.request_id, "turn"] == request.turn
            and rows.at[request.request_id, "session"] == request.session
        )
    # latency from the moment the turn was ready
    assert (rows["ttft_s"] == rows["first_token_s"] - rows["arrival_s"]).all()
    summary = run.summary
    assert summary.sessions.sessions == 40 and summary.sessions.turns == len(rows)
    assert [t.turn for t in summary.turns] == list(range(1, 6))
    assert sum(t.requests for t in summary.turns) == len(rows)
    first = rows[rows["turn"] == 1]["ttft_s"]
    assert summary.turns[0].ttft_mean_s == pytest.approx(float(first.mean()), rel=1e-12)
    # later turns re-read the conversation so far from the prefix cache
    assert summary.prefix_cache_hit_rate > 0.4
    # the time series counts it as it goes: rising counters that end at the summary's totals
    series = run.timeseries.sort_values("t_s")
    assert series["prefix_cache_hits_tokens"].is_monotonic_increasing
    assert int(series["prefix_cache_hits_tokens"].iloc[-1]) == summary.prefix_cache.hits_tokens
    assert int(series["prefix_cache_queries_tokens"].iloc[-1]) == summary.prefix_cache.queries_tokens
    # and per request, as vLLM's usage reports it: later turns found their conversation so far
    assert summary.preemptions == 0 and int(rows["cached_tokens"].sum()) == summary.prefix_cache.hits_tokens
    assert (rows[rows["turn"] == 1]["cached_tokens"] == 0).all()
    assert (rows[rows["turn"] > 1]["cached_tokens"] > 0).mean() > 0.9


def test_a_failed_turn_ends_its_session_and_the_later_turns_are_not_run(tmp_path):
    server = FaultServer(behaviour="malformed", chunk="null", good_tokens=2).start()
    try:
        data = config_for(server, "broken", requests=5)  # test_client_faults' run against a fault server
        data["workload"]["multi_turn"] = {"max_turns": 4, "think_time": {"mean_s": 0}, "context_tokens": 100_000}
        data["max_error_rate"] = 1.0
        outcome = execute_run(parse_config(data), tmp_path)
    finally:
        server.stop()
    run = load_run(tmp_path, "broken")
    rows = run.requests
    firsts, later = rows[rows["turn"] == 1], rows[rows["turn"] > 1]
    assert len(firsts) == 5 and firsts["error"].notna().all() and firsts["dispatch_s"].notna().all()
    assert len(later) > 0 and (later["error"] == SESSION_ENDED).all() and later["dispatch_s"].isna().all()
    assert run.summary.failed == 5 and run.summary.not_run == len(later), outcome.error
    assert run.summary.sessions.completed == 0 and run.summary.turns[0].slo_attainment == 0.0
    assert server.posts == 5  # no later turn was sent


def test_on_a_server_turn_n_is_sent_after_turn_n_minus_1_with_its_prompt_as_the_start(tmp_path):
    server = FaultServer(behaviour="ok").start()
    try:
        data = config_for(server, "served", requests=4)
        data["workload"]["arrival"]["rate"] = 20
        data["workload"]["filters"]["max_input_tokens"] = 200
        data["workload"]["multi_turn"] = {"max_turns": 3, "think_time": {"distribution": "constant", "mean_s": 0.2}}
        outcome = execute_run(parse_config(data), tmp_path)
        bodies = list(server.bodies)
    finally:
        server.stop()
    assert outcome.status == "done", outcome.error
    rows = load_run(tmp_path, "served").requests.set_index("request_id")
    prompts = {body["prompt"]: body for body in bodies}
    assert len(prompts) == len(rows)
    later = rows[rows["turn"] > 1]
    assert len(later) >= 2
    for request_id, row in later.iterrows():
        previous = f"{request_id[:-3]}{int(row['turn']) - 1:03d}"
        assert row["arrival_s"] == pytest.approx(rows.at[previous, "finish_s"] + 0.2, abs=1e-9)
        assert row["dispatch_s"] >= row["arrival_s"] - 1e-9  # sent no earlier than ready
    sent = [body["prompt"] for body in bodies]
    extending = [p for p in sent if any(p != q and p.startswith(q) for q in sent)]
    assert len(extending) == len(later)  # every later turn's prompt extends an earlier turn's, and only they


def test_cli_multi_turn_flags_and_refusal_with_a_trace(tmp_path, capsys):
    code = main(
        ["run", "--engine", "sim", "--multi-turn", "--requests", "6", "--max-turns", "3", "--think-time", "0"]
        + ["--out", str(tmp_path), "--run-id", "cli", "--quiet"]
    )
    assert code == 0, capsys.readouterr()
    config = json.loads((tmp_path / "cli" / "config.json").read_text())["config"]["workload"]["multi_turn"]
    assert config["max_turns"] == 3 and config["think_time"]["mean_s"] == 0
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["workload"].startswith("6 sessions") and summary["sessions"]["sessions"] == 6
    with pytest.raises(ConfigError, match="multi_turn"):
        parse_config({"workload": {"multi_turn": {}, "trace": {"path": "datasets/traces/mooncake_synthetic.jsonl"}}})
    assert pd.read_parquet(tmp_path / "cli" / "requests.parquet")["turn"].max() <= 3
