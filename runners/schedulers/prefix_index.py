"""What a gateway knows of each engine's prefix cache: the prompt blocks it sent there, most recent
last (issue 31). The approximate index of llm-d's prefix-cache scorer (llm-d.ai, "Prefix-Cache
Aware Routing": prompts split into fixed-size blocks with chained hashes, an in-memory LRU of the
prefix hashes recently sent to each server), shared by the policies that use it:
``prefix-affinity`` routes by it, ``slo-sa`` counts the tokens it expects cached in its memory and
prefill-time estimates.

It is a guess, not the engine's state: it holds at most an instance's KV capacity in blocks (least
recently sent dropped first), never reads the engine, and a request's prompt content
(``Request.segments``, keyed by :func:`runners.workload.prefix.block_keys`) is what a gateway sees
of the prompt it forwards, never a target length or this run's statistics.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from runners.schedulers.base import InstanceInfo
from runners.workload.prefix import block_keys, own_segments
from runners.workload.requests import Request

#: Tokens per block of the index when an instance does not say its block size.
DEFAULT_BLOCK_TOKENS = 16
#: Blocks the index keeps per instance when an instance does not say its KV capacity.
DEFAULT_INDEX_BLOCKS = 65_536


class PrefixIndex:
    """Per instance, an LRU index of the block keys sent there (block size and capacity from the
    instance's :class:`InstanceInfo`)."""

    def __init__(self, instances: Sequence[InstanceInfo]) -> None:
        #: per instance: block key -> None, least recently sent first
        self.index: dict[int, OrderedDict[int, None]] = {info.instance_id: OrderedDict() for info in instances}
        self.block_tokens = {info.instance_id: info.block_size or DEFAULT_BLOCK_TOKENS for info in instances}
        self.index_blocks = {
            info.instance_id: (
                info.kv_capacity_tokens // self.block_tokens[info.instance_id]
                if info.kv_capacity_tokens
                else DEFAULT_INDEX_BLOCKS
            )
            for info in instances
        }
        self._keys: dict[str, dict[int, list[int]]] = {}

    def add(self, request: Request) -> None:
        """Key ``request``'s prompt blocks once, at every block size the instances use (a prompt
        without segments is its own: keyed by its id)."""
        segments = request.segments or own_segments(request.request_id, request.input_tokens)
        sizes = set(self.block_tokens.values())
        self._keys[request.request_id] = {size: block_keys(segments, size, request.input_tokens) for size in sizes}

    def drop(self, request_id: str) -> None:
        """Forget a finished request's keys (the index keeps its blocks)."""
        self._keys.pop(request_id, None)

    def matched_blocks(self, request_id: str, instance: int) -> tuple[int, int]:
        """(leading blocks of the request's prompt the instance's index holds, full blocks of the prompt)."""
        keys = self._keys[request_id][self.block_tokens[instance]]
        index = self.index[instance]
        count = 0
        for key in keys:
            if key not in index:
                break
            count += 1
        return count, len(keys)

    def matched(self, request_id: str, instance: int) -> float:
        """The share (0-1) of the request's full blocks whose chain the instance's index holds."""
        count, total = self.matched_blocks(request_id, instance)
        return count / total if total else 0.0

    def cached_tokens(self, request: Request, instance: int) -> int:
        """Prompt tokens of ``request`` expected in ``instance``'s cache: the leading blocks the
        index holds, at most ``(tokens - 1) // block`` of them (an engine computes at least one
        token, as vLLM does), times the block size. 0 for a prompt that shares nothing
        (no segments): only its own earlier dispatch could have left blocks."""
        if not request.segments or request.request_id not in self._keys:
            return 0
        block = self.block_tokens[instance]
        count, _ = self.matched_blocks(request.request_id, instance)
        return min(count, (request.input_tokens - 1) // block) * block

    def remember(self, request_id: str, instance: int) -> None:
        """The request's blocks are now (likely) cached on ``instance``: most recently sent."""
        index = self.index[instance]
        for key in self._keys[request_id][self.block_tokens[instance]]:
            index[key] = None
            index.move_to_end(key)
        while len(index) > self.index_blocks[instance]:
            index.popitem(last=False)
