"""The vLLM adapter's launch arguments and environment."""

from __future__ import annotations

import pytest


def test_vllm_launch_with_an_in_engine_scheduler_class():
    # issue 14: --scheduler-cls, and schedlab's own classes importable by the server's Python
    import os

    from runners.config import parse_config
    from runners.engines.adapters.vllm import ROOT, VLLMAdapter

    engine = parse_config({"engine": {"kind": "vllm", "model": "/m", "env": {"PYTHONPATH": "/extra"},
                                      "scheduler_cls": "runners.engines.vllm_scheduler.dynamic_mem.X"}}).engine
    command = VLLMAdapter.server_command(engine, 8000)
    assert command[command.index("--scheduler-cls") + 1] == "runners.engines.vllm_scheduler.dynamic_mem.X"
    assert VLLMAdapter.server_env(engine) == {"PYTHONPATH": os.pathsep.join([str(ROOT), "/extra"])}
    plain = parse_config({"engine": {"kind": "vllm", "model": "/m"}}).engine
    assert "--scheduler-cls" not in VLLMAdapter.server_command(plain, 8000) and VLLMAdapter.server_env(plain) == {}
    theirs = parse_config({"engine": {"kind": "vllm", "model": "/m", "scheduler_cls": "mypkg.Sched"}}).engine
    assert VLLMAdapter.server_env(theirs) == {}  # a class of theirs: their environment already imports it
    with pytest.raises(Exception, match="scheduler_cls"):
        parse_config({"engine": {"kind": "vllm", "model": "/m", "scheduler_cls": "not a class; rm -rf /"}})
