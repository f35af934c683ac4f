"""The vLLM adapter's launch arguments and environment."""

from __future__ import annotations

import pytest


def test_vllm_launch_with_an_in_engine_scheduler_class():
    # issue 14: --scheduler-cls, and schedlab's own classes importable by the server's Python
    import os

    from runners.engines.adapters.vllm import ROOT, VLLMAdapter
    from runners.run.config import parse_config

    engine = parse_config(
        {
            "engine": {
                "kind": "vllm",
                "model": "/m",
                "env": {"PYTHONPATH": "/extra"},
                "scheduler_cls": "runners.schedulers.vllm.dynamic_mem.X",
            }
        }
    ).engine
    command = VLLMAdapter.server_command(engine, 8000)
    assert command[command.index("--scheduler-cls") + 1] == "runners.schedulers.vllm.dynamic_mem.X"
    assert VLLMAdapter.server_env(engine) == {"PYTHONPATH": os.pathsep.join([str(ROOT), "/extra"])}
    plain = parse_config({"engine": {"kind": "vllm", "model": "/m"}}).engine
    assert "--scheduler-cls" not in VLLMAdapter.server_command(plain, 8000) and VLLMAdapter.server_env(plain) == {}
    theirs = parse_config({"engine": {"kind": "vllm", "model": "/m", "scheduler_cls": "mypkg.Sched"}}).engine
    assert VLLMAdapter.server_env(theirs) == {}  # a class of theirs: their environment already imports it
    with pytest.raises(Exception, match="scheduler_cls"):
        parse_config({"engine": {"kind": "vllm", "model": "/m", "scheduler_cls": "not a class; rm -rf /"}})


def test_an_in_engine_scheduler_needs_a_vllm_that_schedlab_launches():
    from runners.errors import ConfigError
    from runners.run.benchmark import prepare_run
    from runners.run.config import parse_config

    for engine in ({"kind": "sim"}, {"kind": "openai", "urls": "http://127.0.0.1:9"}):
        with pytest.raises(ConfigError) as caught:
            prepare_run(
                parse_config(
                    {"engine": engine, "scheduler": {"name": "engine-dynamic-mem"}, "workload": {"requests": 5}}
                )
            )
        assert caught.value.field == "scheduler.name"
        assert "--scheduler-cls runners.schedulers.vllm.dynamic_mem.DynamicMemoryScheduler" in str(caught.value)


def test_the_launch_gets_the_class_its_parameters_and_a_decisions_file_per_instance(tmp_path):
    import json

    from runners.registry import make_policy
    from runners.run.benchmark import _engine_with_scheduler
    from runners.run.config import parse_config

    config = parse_config(
        {
            "engine": {"kind": "vllm", "model": "/m", "env": {"A": "1"}},
            "scheduler": {"name": "engine-dynamic-mem", "params": {"eps_m": 0.1}},
        }
    )
    policy = make_policy("engine-dynamic-mem", {"eps_m": 0.1})
    engine = _engine_with_scheduler(config, policy, tmp_path)
    assert engine.scheduler_cls == "runners.schedulers.vllm.dynamic_mem.DynamicMemoryScheduler"
    assert engine.env["A"] == "1"
    assert json.loads(open(engine.env["SCHEDLAB_ENGINE_PARAMS"]).read())["eps_m"] == 0.1
    assert engine.env["SCHEDLAB_ENGINE_DECISIONS"] == str(tmp_path / "engine-decisions-{instance}.jsonl")
    plain = parse_config({"engine": {"kind": "vllm", "model": "/m"}})
    assert _engine_with_scheduler(plain, make_policy("fcfs"), tmp_path) is plain.engine


def test_a_server_log_quotes_schedlabs_own_lines_before_its_tail(tmp_path):
    from runners.engines.launcher import log_tail

    log = tmp_path / "server.log"
    log.write_text(
        "start\nERROR schedlab's in-engine schedulers support vLLM 0.32.x; this server runs 0.31\n"
        + "".join(f"traceback line {i}\n" for i in range(40))
    )
    text = log_tail(log, lines=30)
    assert text.startswith("ERROR schedlab's in-engine schedulers support vLLM 0.32.x")
    assert "[...]\ntraceback line 10\n" in text and text.endswith("traceback line 39\n")
    log.write_text("".join(f"line {i}\n" for i in range(40)))
    assert log_tail(log, lines=30).startswith("line 10\n")
    # the plugin's routine decision lines are not quoted: they say nothing about why a run failed
    log.write_text('INFO SCHEDLAB_DECISION {"step":1}\n' + "".join(f"line {i}\n" for i in range(40)))
    assert log_tail(log, lines=30).startswith("line 10\n")
