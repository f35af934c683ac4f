"""Where each engine limit a policy sees comes from (runners.engines.beliefs, issue 48): the order
of sources, the engines' documented defaults, and the one-line difference between two runs."""

from __future__ import annotations

import json

from runners.drivers.base import instance_info
from runners.engines.adapters import adapter_for
from runners.engines.adapters.vllm import VLLMAdapter, VLLMConfig
from runners.engines.beliefs import (
    ASSUMED,
    Belief,
    InstanceBeliefs,
    beliefs_note,
    choose,
    describe,
    differences,
    real_beliefs,
)
from runners.engines.real_config import AttachConfig
from runners.schedulers.base import InstanceInfo, engine_slots


def test_the_first_source_with_a_value_wins_then_the_stated_assumption():
    assert choose("max_num_seqs", [(None, "a"), (64, "b"), (128, "c")]) == Belief(64, "b")
    assumed = choose("max_num_seqs", [(None, "a")])
    assert assumed.value == 256 and assumed.source == ASSUMED["max_num_seqs"][1]
    assert choose("block_size", []) == Belief(None, "not discovered")


def test_a_launched_vllm_uses_its_flags_and_a_cpu_build_its_cpu_defaults():
    config = VLLMConfig(model="m", max_num_seqs=64, use_gpus=False)
    beliefs = real_beliefs(adapter=VLLMAdapter, config=config, launched=True, discovered={})
    assert beliefs.max_num_seqs == Belief(64, "launch config (--max-num-seqs)")
    # vllm/engine/arg_utils.py: the CPU platform's OpenAI-server default is 2,048 batched tokens
    assert beliefs.max_num_batched_tokens == Belief(2048, "vLLM default, not discovered: vLLM's CPU-build default")
    cpu = real_beliefs(adapter=VLLMAdapter, config=VLLMConfig(model="m", use_gpus=False), launched=True, discovered={})
    assert cpu.max_num_seqs.value == 128


def test_an_attached_server_takes_the_config_then_what_it_said_then_the_default():
    config = AttachConfig(urls=["http://h:1"])
    said = {"max_num_seqs": (48, "discovered (/server_info scheduler_config.max_num_seqs)")}
    beliefs = real_beliefs(adapter=VLLMAdapter, config=config, launched=False, discovered=said)
    assert beliefs.max_num_seqs.value == 48
    stated = AttachConfig(urls=["http://h:1"], max_num_seqs=32)
    assert real_beliefs(adapter=VLLMAdapter, config=stated, launched=False, discovered=said).max_num_seqs == Belief(
        32, "engine.max_num_seqs"
    )
    unsaid = real_beliefs(adapter=VLLMAdapter, config=config, launched=False, discovered={})
    assert unsaid.max_num_seqs.value == 256 and unsaid.max_num_seqs.source.startswith("vLLM default, not discovered")
    generic = real_beliefs(adapter=adapter_for("openai"), config=config, launched=False, discovered={})
    assert generic.max_num_seqs == Belief(256, ASSUMED["max_num_seqs"][1])
    lmdeploy = real_beliefs(adapter=adapter_for("lmdeploy"), config=config, launched=False, discovered={})
    assert lmdeploy.max_num_seqs.value == 128  # lmdeploy/utils.py get_max_batch_size: other CUDA GPUs


def test_vllm_dev_mode_server_info_states_the_scheduler_limits():
    """The shape vllm/entrypoints/serve/dev/server_info answers with config_format=json."""
    info = {
        "vllm_config": {
            "scheduler_config": {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "policy": "fcfs"},
            "cache_config": {"block_size": 128, "enable_prefix_caching": False},
        }
    }
    found = VLLMAdapter.discovered_limits(info)
    assert found["max_num_seqs"] == (128, "discovered (/server_info scheduler_config.max_num_seqs)")
    assert found["max_num_batched_tokens"][0] == 2048 and found["prefix_caching"][0] is False
    assert VLLMAdapter.discovered_limits({"version": "0.32.0"}) == {}
    assert VLLMAdapter.discovered_limits({"vllm_config": {"scheduler_config": "text"}}) == {}
    sglang = adapter_for("sglang").discovered_limits({"max_running_requests": 40, "disable_radix_cache": True})
    assert sglang["max_num_seqs"][0] == 40 and sglang["prefix_caching"][0] is False


def test_policies_take_slots_from_one_function():
    made = InstanceInfo(0, 1000, 16, None)
    assert engine_slots([made]) == 256 and engine_slots([made, InstanceInfo(1, 1000, 16, 8)]) == 8
    beliefs = InstanceBeliefs(*(Belief(v, "x") for v in (6144, 128, 4, 2048, True)))
    info = instance_info(2, beliefs)
    assert (info.instance_id, info.kv_capacity_tokens, info.max_num_seqs, info.max_num_batched_tokens) == (
        2,
        6144,
        4,
        2048,
    )
    assert info.prefix_caching is True and info.sources["max_num_seqs"] == "x"


def test_two_runs_that_believed_different_slots_say_so_in_one_line(tmp_path):
    def run(name: str, slots: int) -> tuple[str, object]:
        folder = tmp_path / name
        folder.mkdir()
        beliefs = {"max_num_seqs": {"value": slots, "source": "s"}, "block_size": {"value": 128, "source": "s"}}
        (folder / "engine.json").write_text(json.dumps({"schema_version": 3, "instances": [{"beliefs": beliefs}]}))
        return name, folder

    assert differences({"max_num_seqs": {"value": 4}}, {"max_num_seqs": {"value": 256}}) == ["slots: 4 vs 256"]
    note = beliefs_note([run("sim", 256), run("real", 4)])
    assert note is not None and note.endswith("real vs sim: slots: 4 vs 256")
    assert beliefs_note([run("a", 8), run("b", 8)]) is None
    assert "slots 256: s" in describe({"max_num_seqs": {"value": 256, "source": "s"}})
