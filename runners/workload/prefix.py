"""Prompt content identity for prefix caching, as vLLM's automatic prefix caching sees it.

A request's prompt is a sequence of *segments* (``Request.segments``: (content id, tokens)
pieces). vLLM caches a prompt in blocks of ``block_size`` tokens and only *full* blocks; block k's
key is a hash of the key of block k-1 and the tokens of block k (vLLM's ``hash_block_tokens``:
chained, so a block is shared only when everything before it is too). Here a block's tokens are
named by the segments covering it: (content id, first token, last token) of each piece, so two
prompts share block k exactly when their segments agree over tokens [0, (k + 1) x block_size).
A request without segments has a prompt of its own: its blocks are keyed by its request id, so
it can hit only its own blocks (after a preemption, as in vLLM).
"""

from __future__ import annotations

from collections.abc import Sequence

#: The block size of Mooncake traces' ``hash_ids`` (tokens per hashed block).
MOONCAKE_BLOCK_TOKENS = 512


def own_segments(request_id: str, input_tokens: int) -> tuple[tuple[int, int], ...]:
    """The segments of a prompt that shares nothing: one piece keyed by the request id (a stable
    hash: the same in every process)."""
    import zlib

    return ((zlib.crc32(request_id.encode()) | (1 << 40), input_tokens),)


def block_keys(segments: Sequence[tuple[int, int]], block_size: int, tokens: int | None = None) -> list[int]:
    """The chained keys of the full blocks among the first ``tokens`` tokens (default: all the
    segments' tokens) of a prompt made of ``segments``; a partial last block has no key."""
    total = sum(length for _, length in segments) if tokens is None else tokens
    keys: list[int] = []
    previous = 0
    pieces: list[tuple[int, int, int]] = []
    start = 0  # token offset of the block being filled
    for content, length in segments:
        offset = 0
        while offset < length:
            room = block_size - sum(end - begin for _, begin, end in pieces)
            take = min(room, length - offset)
            pieces.append((content, offset, offset + take))
            offset += take
            if take == room:
                if start + block_size > total:
                    return keys
                previous = hash((previous, tuple(pieces)))
                keys.append(previous)
                pieces = []
                start += block_size
    return keys
