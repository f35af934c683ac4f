"""The simulator's prefix cache (issue 31), by hand: chained full-block keys shared exactly as far
as two prompts agree, hits shortening prefill, shared blocks counted once, cached blocks free but
reusable until evicted least recently freed first, vLLM's at-least-one-token rule, a preempted
request reusing its own blocks, and the hit counters the summary reports."""

from __future__ import annotations

from runners.engines.latency_model import LatencyModel, PhaseCoefficients
from runners.engines.simulator import SimulatedInstance
from runners.workload.prefix import block_keys

UNIT = LatencyModel(
    prefill=PhaseCoefficients(alpha=0, beta=0, gamma=0, delta=1.0),  # every prefill step: 1 s
    decode=PhaseCoefficients(alpha=0, beta=0, gamma=0, delta=0.1),  # every decode step: 0.1 s
)
SYSTEM = (7, 64)  # a 64-token system prompt: 4 blocks of 16


def run_until_idle(instance: SimulatedInstance, now: float = 0.0) -> float:
    while (duration := instance.start_step()) is not None:
        now += duration
        instance.finish_step(now)
    return now


def test_block_keys_are_shared_exactly_as_far_as_the_prompts_agree():
    one = block_keys([(1, 100), (2, 50)], 16)
    other = block_keys([(1, 100), (3, 50)], 16)
    assert len(one) == len(other) == 9  # 150 tokens: 9 full blocks, the partial 10th has no key
    assert one[:6] == other[:6] and one[6] != other[6]  # 96 tokens agree; block 7 holds 4 of each 2 / 3
    assert block_keys([(1, 100)], 16, tokens=40) == one[:2]
    # the same content split differently is the same content; a repeat of a piece is not a continuation
    assert block_keys([(5, 32)], 16) == block_keys([(5, 32)], 16)
    assert block_keys([(7, 1024)], 512) != block_keys([(7, 512), (7, 512)], 512)


def test_a_shared_system_prompt_is_computed_once_and_held_once():
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=1024, block_size=16)
    first = instance.add("a", 104, 2, segments=(SYSTEM, (101, 40)))
    instance.start_step()
    assert instance._chunks == [104] and instance.used_blocks == 7
    instance.finish_step(1.0)
    second = instance.add("b", 104, 2, segments=(SYSTEM, (102, 40)))
    instance.start_step()
    # 4 blocks found: only its own 40 tokens are computed; it holds 7 blocks, 4 of them shared
    assert instance._chunks == [40] and second.c == 64 and second.b == 7
    assert instance.used_blocks == 10  # 7 + 3, not 14
    assert (instance.prefix_queries, instance.prefix_hits) == (104 + 104, 64)
    assert first.held == 6  # its 6 full prompt blocks were cached as it computed them
    run_until_idle(instance, 1.0)
    assert instance.free_blocks == instance.total_blocks  # cached blocks count as free, as in vLLM
    # a third request with the same system prompt reuses the 4 cached free blocks
    third = instance.add("c", 80, 2, segments=(SYSTEM, (103, 16)))
    instance.start_step()
    assert instance._chunks == [16] and third.b == 5 and instance.free_blocks == instance.total_blocks - 5
    assert instance.prefix_hits == 128


def test_a_fully_cached_prompt_still_computes_its_last_block():
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=1024, block_size=16)
    instance.add("a", 64, 1, segments=(SYSTEM,))
    run_until_idle(instance)
    again = instance.add("b", 64, 1, segments=(SYSTEM,))
    instance.start_step()
    assert again.c == 48 and instance._chunks == [16]  # at most (64 - 1) // 16 = 3 blocks hit


def test_cached_blocks_are_evicted_least_recently_freed_first():
    # 8 blocks; a's 4-block system prompt cached and freed, then b (fresh, 4 blocks) and c (fresh,
    # 3 blocks) take the free pool's head: the 4 never-used blocks, then a's blocks from the tail
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=128, block_size=16)
    instance.add("a", 64, 1, segments=(SYSTEM,))
    run_until_idle(instance)
    assert instance.free_blocks == 8 and len(instance._evictable) == 4
    instance.add("b", 63, 1, segments=((201, 63),))  # 4 blocks: the never-used ones
    instance.start_step()
    assert len(instance._evictable) == 4
    instance.add("c", 31, 1, segments=((202, 31),))  # 2 blocks: 2 of a's cached blocks evicted
    run_until_idle(instance, 10.0)
    assert len(instance._evictable) <= 6
    survivor = instance.add("d", 80, 1, segments=(SYSTEM, (203, 16)))
    instance.start_step()
    # a's blocks were freed tail first, so the evicted ones are its last two: the first two remain
    assert survivor.c == 32, survivor.c


def test_a_preempted_request_reuses_its_own_computed_blocks():
    # 8 blocks of 16 tokens; three requests of 32 prompt + 40 output cannot all fit (preemptions)
    results = {}
    for caching in (False, True):
        instance = SimulatedInstance(
            instance_id=0, latency=UNIT, kv_capacity_tokens=128, block_size=16, prefix_caching=caching
        )
        seqs = [instance.add(f"r{i}", 32, 40) for i in range(3)]
        run_until_idle(instance)
        assert all(seq.generated == 40 for seq in seqs) and instance.free_blocks == 8
        results[caching] = (instance.preemptions_total, instance.prefix_hits, instance.prefix_queries)
    assert results[False] == (2, 0, 0)
    preemptions, hits, queries = results[True]
    assert preemptions == 2 and hits == 48 and queries == 194  # re-admissions found their own blocks


def test_without_prefix_caching_nothing_is_cached():
    instance = SimulatedInstance(instance_id=0, latency=UNIT, kv_capacity_tokens=1024, prefix_caching=False)
    instance.add("a", 104, 2, segments=(SYSTEM, (101, 40)))
    run_until_idle(instance)
    second = instance.add("b", 104, 2, segments=(SYSTEM, (102, 40)))
    instance.start_step()
    assert second.c == 0 and instance._chunks == [104] and instance.prefix_hits == 0
