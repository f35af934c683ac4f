"""Whole wall-clock runs against a server that misbehaves (tests/fakes/fault_server.py), through
the real client and driver: every fault ends the run in a terminal status within seconds, every
received token stays in its row, errors quote what arrived and never the API key, and the
number of requests the server sees is bounded."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from runners.engines.openai_client import MalformedChunk, parse_chunk, redact
from runners.errors import ConfigError
from runners.run.benchmark import execute_run
from runners.run.config import parse_config
from runners.schedulers.base import Decision
from runners.schedulers.fcfs import FCFSPolicy
from runners.store.result_store import load_run
from tests.fakes.fault_server import FaultServer

#: A run that hangs would be ended by this limit: every run here must finish well before it.
MAX_DURATION_S = 120.0
QUICK_S = 10.0
TERMINAL = {"done", "failed", "cancelled"}
SECRET = "sk-fault-test-7f3a9c1e"


def config_for(server: FaultServer, run_id: str, requests: int = 4, scheduler: str = "fcfs", **engine) -> dict:
    return {
        "run_id": run_id,
        "engine": {"kind": "openai", "urls": server.url, "warmup_concurrency": [], "request_timeout_s": 60, **engine},
        # outputs of at least 8 tokens, so a short reply (3) and a bad chunk after 2 tokens are visible
        "workload": {
            "requests": requests,
            "arrival": {"process": "poisson", "rate": 50},
            "filters": {"max_total_tokens": 300, "min_output_tokens": 8},
        },
        "scheduler": {"name": scheduler},
        "sample_interval_s": 0.05,
        "max_duration_s": MAX_DURATION_S,
    }


def timed_run(data: dict, results_dir: Path, should_stop=None):
    started = time.monotonic()
    outcome = execute_run(parse_config(data), results_dir, should_stop=should_stop)
    elapsed = time.monotonic() - started
    run = load_run(results_dir, data["run_id"])
    assert outcome.status in TERMINAL and run.summary.status == outcome.status
    assert len(run.requests) == data["workload"]["requests"], "every request has its row"
    return outcome, run, elapsed


# -- malformed chunks (issue item 4) ---------------------------------------------------------------
MALFORMED = {
    "null": "not a JSON object",
    "5": "not a JSON object",
    "[1,2]": "not a JSON object",
    '["x"]': "not a JSON object",
    "[null]": "not a JSON object",
    '"text"': "not a JSON object",
    '{"choices": "abc"}': "'choices' is not a list",
    '{"choices": {"text": "a"}}': "'choices' is not a list",
    '{"choices": [1]}': "a choice is not an object",
    '{"choices": [null]}': "a choice is not an object",
    '{"choices": [{"text": 5}]}': "the generated text is not a string",
    '{"choices": [{"text": ["a"]}]}': "the generated text is not a string",
    '{"choices": [], "usage": 7}': "'usage' is not an object",
    '{"choices": [], "usage": {"completion_tokens": "abc"}}': "usage.completion_tokens is not a count",
    '{"choices": [], "usage": {"completion_tokens": true}}': "usage.completion_tokens is not a count",
    '{"choices": [], "usage": {"prompt_tokens": [1]}}': "usage.prompt_tokens is not a count",
    '{"choices": [], "usage": {"completion_tokens": -1}}': "usage.completion_tokens is negative",
}


@pytest.mark.parametrize("chunk", list(MALFORMED))
def test_parse_chunk_refuses_every_unexpected_shape(chunk):
    with pytest.raises(MalformedChunk, match=MALFORMED[chunk].replace("(", r"\(")):
        parse_chunk(json.loads(chunk), "completions")


def test_parse_chunk_accepts_what_servers_send():
    assert parse_chunk({"choices": [{"text": "a"}], "usage": None}, "completions") == ("a", None)
    assert parse_chunk({"choices": [{"text": None, "finish_reason": "length"}]}, "completions") == (
        None,
        None,
    )  # a finish chunk with no text is no token (LMDeploy)
    assert parse_chunk({"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens": 2}}, "completions") == (
        None,
        {"completion_tokens": 4, "prompt_tokens": 2, "cached_tokens": None},
    )
    assert parse_chunk({"choices": [{"delta": {"role": "assistant"}}]}, "chat") == (None, None)
    assert parse_chunk({"choices": [{"delta": {"content": "hi"}}]}, "chat") == ("hi", None)
    with pytest.raises(MalformedChunk, match="'delta' is not an object"):
        parse_chunk({"choices": [{"delta": "hi"}]}, "chat")


@pytest.mark.parametrize(
    "chunk",
    [
        "null",
        "5",
        "[1,2]",
        '{"choices": "abc"}',
        '["x"]',
        "[null]",
        '{"choices": [{"text": 5}]}',
        '{"usage": {"completion_tokens": "abc"}}',
    ],
)
def test_a_malformed_chunk_fails_its_request_and_keeps_what_arrived(chunk, server_factory, results_dir):
    server = server_factory(behaviour="malformed", chunk=chunk, good_tokens=2)
    outcome, run, elapsed = timed_run(config_for(server, "bad-chunk", requests=3), results_dir)
    assert elapsed < QUICK_S, f"the run waited {elapsed:.1f} s"
    rows = run.requests
    assert rows["error"].str.startswith("malformed stream chunk (").all(), rows["error"].tolist()
    assert rows["error"].str.contains(repr(chunk), regex=False).all(), "the error quotes what arrived"
    assert (rows["output_tokens"] == 2).all() and rows["first_token_s"].notna().all()
    assert (rows["first_token_s"] >= rows["dispatch_s"]).all()
    assert run.summary.failed == 3 and outcome.summary.server_requests == 3
    assert server.posts == 3  # failed requests are not sent again


def test_a_long_chunk_is_quoted_truncated(server_factory, results_dir):
    chunk = json.dumps({"choices": "x" * 5000})
    server = server_factory(behaviour="malformed", chunk=chunk, good_tokens=1)
    _, run, _ = timed_run(config_for(server, "long-chunk", requests=1), results_dir)
    error = run.requests["error"].iloc[0]
    assert error.endswith("...") and len(error) < 300 and repr(chunk[:120]) in error


# -- usage counts that cannot be trusted, short replies (item 5) -------------------------------------
@pytest.mark.parametrize(
    "usage, reason",
    [
        (0, "untrusted usage: completion_tokens 0"),
        (-3, "usage.completion_tokens is negative"),
        (10**9, "untrusted usage: completion_tokens 1000000000, more than"),
        ("abc", "usage.completion_tokens is not a count"),
    ],
)
def test_an_untrusted_usage_count_fails_the_request_once(usage, reason, server_factory, results_dir):
    server = server_factory(behaviour="usage", usage=usage)
    outcome, run, elapsed = timed_run(config_for(server, "usage", requests=4), results_dir)
    assert elapsed < QUICK_S
    rows = run.requests
    assert rows["error"].str.contains(reason, regex=False).all(), rows["error"].tolist()
    # the tokens that did arrive are in the row, counted by chunk
    assert (rows["output_tokens"] == rows["target_output_tokens"]).all() and rows["first_token_s"].notna().all()
    assert server.posts == 4 and outcome.summary.server_requests == 4 and outcome.summary.resent_requests == 0


def test_a_short_reply_ends_its_request_as_a_counted_mismatch(server_factory, results_dir):
    server = server_factory(behaviour="short", short_tokens=3)
    outcome, run, elapsed = timed_run(config_for(server, "short", requests=6), results_dir)
    rows = run.requests
    assert outcome.status == "done" and elapsed < QUICK_S
    assert rows["error"].isna().all() and (rows["output_tokens"] == 3).all()
    assert (rows["target_output_tokens"] >= 8).all()  # each row shows it got less than asked
    assert outcome.summary.output_length_mismatches == 6
    assert server.posts == 6 and outcome.summary.server_requests == 6  # never re-sent as extra slices


class FiveTokenSlices(FCFSPolicy):
    name = "five-token-slices"

    def decide(self, now):
        return Decision([self._take(rid, 0, max_tokens=5) for rid in list(self.pending)])


def test_slices_go_on_but_a_short_slice_ends_its_request(server_factory, results_dir, monkeypatch):
    from runners import registry

    monkeypatch.setitem(registry.SCHEDULERS, "five-token-slices", FiveTokenSlices)
    full = server_factory(behaviour="ok")
    outcome, run, _ = timed_run(config_for(full, "sliced-ok", requests=4, scheduler="five-token-slices"), results_dir)
    rows = run.requests
    assert outcome.status == "done" and (rows["output_tokens"] == rows["target_output_tokens"]).all()
    slices = -(-rows["target_output_tokens"] // 5)
    assert (rows["slices"] == slices).all() and full.posts == slices.sum()
    assert outcome.summary.output_length_mismatches == 0 and outcome.summary.server_requests == slices.sum()

    short = server_factory(behaviour="short", short_tokens=3)
    outcome, run, _ = timed_run(
        config_for(short, "sliced-short", requests=4, scheduler="five-token-slices"), results_dir
    )
    rows = run.requests
    assert (rows["output_tokens"] == 3).all() and (rows["slices"] == 1).all() and short.posts == 4
    assert outcome.summary.output_length_mismatches == 4


# -- cancel reaches every await (item 6) -------------------------------------------------------------
def stop_after(seconds: float):
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() > deadline


def test_cancel_during_a_warm_up_that_never_answers(server_factory, results_dir):
    server = server_factory(behaviour="hang")
    data = config_for(server, "hang-warm", requests=5, warmup_concurrency=[1, 2])
    stopped_at: list[float] = []

    def stop_once_the_warm_up_hangs() -> bool:  # on the event, not a fixed delay: a loaded machine is slow
        if not stopped_at and (server.posts >= 1 or time.monotonic() > give_up):
            stopped_at.append(time.monotonic())
        return bool(stopped_at)

    give_up = time.monotonic() + 20.0
    outcome, run, _ = timed_run(data, results_dir, should_stop=stop_once_the_warm_up_hangs)
    after_stop = time.monotonic() - stopped_at[0]
    assert outcome.status == "cancelled" and after_stop < 3.0, f"{outcome.status} {after_stop:.1f} s after the stop"
    assert (run.requests["error"] == "cancelled").all()
    assert server.posts == 1  # the first warm-up wave, never answered


def test_cancel_mid_run_keeps_the_tokens_that_arrived(server_factory, results_dir):
    server = server_factory(behaviour="hang", hang_after=3)
    outcome, run, elapsed = timed_run(
        config_for(server, "hang-run", requests=3), results_dir, should_stop=stop_after(0.8)
    )
    assert outcome.status == "cancelled" and elapsed < 3.0
    rows = run.requests
    assert (rows["error"] == "cancelled").all()
    assert (rows["output_tokens"] == 3).all() and rows["first_token_s"].notna().all()


def test_cancel_while_metrics_never_answer(server_factory, results_dir):
    server = server_factory(behaviour="ok", hang_metrics=True)
    outcome, run, elapsed = timed_run(
        config_for(server, "hang-metrics", requests=3), results_dir, should_stop=stop_after(0.5)
    )
    assert outcome.status == "cancelled" and elapsed < 3.0, f"{outcome.status} after {elapsed:.1f} s"


# -- nothing escapes a request task ---------------------------------------------------------------
def test_an_exception_inside_the_client_fails_only_its_request(server_factory, results_dir, monkeypatch):
    from runners.drivers import wall_clock

    real = wall_clock.stream_request

    async def flaky(
        session, endpoint, prompt, max_tokens, priority, send_min_tokens, timeout_s, on_chunk, engine_args=None
    ):
        if "boom" not in flaky.__dict__:
            flaky.boom = True
            now = time.perf_counter()
            on_chunk(now, True)
            on_chunk(now + 0.001, False)
            raise RuntimeError("client bug (injected)")
        return await real(
            session,
            endpoint,
            prompt,
            max_tokens,
            priority,
            send_min_tokens,
            timeout_s,
            on_chunk,
            engine_args=engine_args,
        )

    monkeypatch.setattr(wall_clock, "stream_request", flaky)
    server = server_factory(behaviour="ok")
    outcome, run, elapsed = timed_run(config_for(server, "client-bug", requests=4), results_dir)
    assert elapsed < QUICK_S
    failed = run.requests[run.requests["error"].notna()]
    assert len(failed) == 1 and failed["error"].iloc[0] == "client error: RuntimeError: client bug (injected)"
    assert failed["output_tokens"].iloc[0] == 2 and failed["first_token_s"].notna().all()
    assert outcome.summary.completed == 3


class FailsOnItsFirstCompletion(FCFSPolicy):
    name = "fails-on-completion"

    def on_completion(self, completion, now):
        super().on_completion(completion, now)
        if not getattr(self, "failed_once", False):
            self.failed_once = True
            raise RuntimeError("bookkeeping bug (injected)")


def test_a_request_task_that_raises_anyway_fails_its_request(server_factory, results_dir, monkeypatch):
    from runners import registry

    monkeypatch.setitem(registry.SCHEDULERS, "fails-on-completion", FailsOnItsFirstCompletion)
    server = server_factory(behaviour="ok")
    outcome, run, elapsed = timed_run(
        config_for(server, "task-raises", requests=4, scheduler="fails-on-completion"), results_dir
    )
    assert elapsed < QUICK_S, f"the run waited {elapsed:.1f} s for a dead task"
    errors = run.requests["error"].dropna().tolist()
    assert errors == ["request task failed: RuntimeError: bookkeeping bug (injected)"]


# -- secrets and /v1/models (item 11) ----------------------------------------------------------------
def test_an_echoed_api_key_is_never_written(server_factory, results_dir, monkeypatch):
    monkeypatch.setenv("SCHEDLAB_FAULT_KEY", SECRET)
    server = server_factory(behaviour="echo-auth")
    data = config_for(server, "echo", requests=3, api_key_env="SCHEDLAB_FAULT_KEY", on_failure="stop")
    outcome, run, elapsed = timed_run(data, results_dir)
    assert server.posts >= 1 and outcome.status == "failed"
    assert run.requests["error"].dropna().str.startswith("HTTP 401: bad key Bearer ***").any()
    assert "HTTP 401: bad key Bearer ***" in outcome.error
    texts = [run.requests.to_csv(), run.summary.model_dump_json(), outcome.error]
    texts += [path.read_bytes().decode("latin-1") for path in run.folder.rglob("*") if path.is_file()]
    for text in texts:
        assert SECRET not in text and SECRET[3:] not in text


def test_redact_hides_keys_and_anything_token_like():
    assert redact(f"bad key Bearer {SECRET} (401), {SECRET[3:]}", [SECRET[3:]]) == "bad key Bearer *** (401), ***"
    assert redact("header was bearer abc.def-123, key sk-live-abcdef") == "header was bearer ***, key sk-***"
    assert redact("completion_tokens 0 after 5 chunks") == "completion_tokens 0 after 5 chunks"


@pytest.mark.parametrize("models", [{"data": {"id": "m"}}, {"data": [1, 2]}, ["m"], "m", 5])
def test_a_models_list_of_the_wrong_shape_names_the_endpoint(models, server_factory, results_dir):
    server = server_factory(behaviour="ok", models=models)
    outcome, run, _ = timed_run(config_for(server, "models"), results_dir)
    assert outcome.status == "failed"
    assert f"GET {server.url}/v1/models answered {json.dumps(models)!r}" in outcome.error, outcome.error
    assert "expected a JSON object" in outcome.error and "KeyError" not in outcome.error


def test_an_unset_api_key_env_fails_before_a_run_folder_exists(server_factory, results_dir, monkeypatch):
    monkeypatch.delenv("SCHEDLAB_UNSET_KEY", raising=False)
    server = server_factory(behaviour="ok")
    data = config_for(server, "nokey", api_key_env="SCHEDLAB_UNSET_KEY")
    with pytest.raises(ConfigError, match="engine.api_key_env: environment variable SCHEDLAB_UNSET_KEY is not set"):
        execute_run(parse_config(data), results_dir)
    assert list(results_dir.iterdir()) == [] and server.posts == 0
