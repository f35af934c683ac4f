"""Mutations of valid files: byte-level (truncation, bit flips, inserted bytes, gzip damage, BOM,
invalid UTF-8, deep nesting) and structure-level (a value somewhere replaced by one of another
type). Each mutation returns the new bytes and a short label saying what was done."""

from __future__ import annotations

import copy
import gzip
import json
import random
from collections.abc import Callable
from typing import Any

from tests.fuzzing.values import JSON_VALUES

BOM = b"\xef\xbb\xbf"
BAD_UTF8 = [
    b"\xff",
    b"\xfe\xff",
    b"\xc3\x28",
    b"\xa0\xa1",
    b"\xe2\x28\xa1",
    b"\xf0\x28\x8c\xbc",
    b"\xed\xa0\x80",
    b"\x80",
]
INSERTS = [
    b"\x00",
    b"\n",
    b"\r",
    b",",
    b"[",
    b"]",
    b"{",
    b"}",
    b'"',
    b"\\",
    b":",
    b"\t",
    b"NaN",
    b"Infinity",
    b"-",
    b"1e999",
    b"\xe2\x80\xae",
    BOM,
    *BAD_UTF8,
]


def truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    cut = rng.randrange(0, max(1, len(data)))
    return data[:cut], f"truncated at {cut}/{len(data)}"


def bit_flips(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if not data:
        return b"\xff", "bit flip of empty -> 0xff"
    buffer = bytearray(data)
    spots = []
    for _ in range(rng.randint(1, 6)):
        index = rng.randrange(len(buffer))
        bit = rng.randrange(8)
        buffer[index] ^= 1 << bit
        spots.append(f"{index}.{bit}")
    return bytes(buffer), "bit flips at " + ",".join(spots)


def insert_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    index = rng.randrange(0, len(data) + 1)
    chunk = rng.choice(INSERTS) * rng.choice([1, 1, 2, 50])
    return data[:index] + chunk + data[index:], f"inserted {chunk[:12]!r} at {index}"


def delete_chunk(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if len(data) < 2:
        return b"", "emptied"
    start = rng.randrange(len(data))
    length = rng.randint(1, max(1, min(40, len(data) - start)))
    return data[:start] + data[start + length :], f"deleted {length} bytes at {start}"


def duplicate_chunk(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if not data:
        return data * 2, "duplicated empty"
    start = rng.randrange(len(data))
    length = rng.randint(1, min(80, len(data) - start))
    return data[: start + length] + data[start : start + length] + data[
        start + length :
    ], f"duplicated {length} bytes at {start}"


def add_bom(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    return BOM + data, "UTF-8 BOM prepended"


def utf16(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    try:
        return data.decode("utf-8").encode("utf-16"), "re-encoded as UTF-16 (with BOM)"
    except UnicodeDecodeError:
        return b"\xff\xfe" + data, "UTF-16 BOM prepended"


def latin1_text(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    text = data.decode("utf-8", "replace").replace("a", "\xe9", 3)
    return text.encode("latin-1", "replace"), "re-encoded as Latin-1 with e-acute (invalid UTF-8)"


def garbage(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    size = rng.choice([1, 7, 64, 4096])
    return bytes(rng.randrange(256) for _ in range(size)), f"replaced by {size} random bytes"


def empty(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    return rng.choice([b"", b" ", b"\n\n", b"\x00"]), "emptied / whitespace only"


def deep_nesting(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    depth = rng.choice([2_000, 100_000])
    if rng.random() < 0.5:
        return b"[" * depth + b"]" * depth, f"[ nested {depth} deep"
    return b'{"a":' * depth + b"1" + b"}" * depth, f"{{ nested {depth} deep"


BYTE_MUTATIONS: list[Callable[[bytes, random.Random], tuple[bytes, str]]] = [
    truncate,
    bit_flips,
    insert_bytes,
    delete_chunk,
    duplicate_chunk,
    add_bom,
    utf16,
    latin1_text,
    garbage,
    empty,
    deep_nesting,
]


# -- gzip ------------------------------------------------------------------------------------------
def gzip_mutation(plain: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Damage a gzip stream of ``plain`` (or gzip a damaged ``plain``)."""
    packed = gzip.compress(plain, mtime=0)
    choice = rng.randrange(7)
    if choice == 0:  # corrupt deflate data right after the 10-byte header
        buffer = bytearray(packed)
        index = rng.randrange(10, max(11, len(buffer) - 8))
        buffer[index] ^= 0xFF
        return bytes(buffer), f"gzip: deflate byte {index} inverted"
    if choice == 1:
        cut = rng.randrange(10, len(packed))
        return packed[:cut], f"gzip: truncated at {cut}/{len(packed)}"
    if choice == 2:
        return packed[:-8] + bytes(8), "gzip: CRC and size zeroed"
    if choice == 3:
        return packed[:10] + bytes(rng.randrange(256) for _ in range(200)), "gzip: valid header, random deflate"
    if choice == 4:
        return packed + packed[: rng.randrange(1, 20)], "gzip: trailing partial member"
    if choice == 5:
        return b"\x1f\x8b", "gzip: magic only"
    mutated, label = rng.choice(BYTE_MUTATIONS)(plain, rng)
    return gzip.compress(mutated, mtime=0), f"gzip of ({label})"


def byte_mutation(data: bytes, rng: random.Random, gz: bool = False) -> tuple[bytes, str]:
    """One random byte-level mutation of ``data`` (the plain text; gzipped when ``gz``)."""
    if gz:
        if rng.random() < 0.6:
            return gzip_mutation(data, rng)
        packed = gzip.compress(data, mtime=0)
        mutated, label = rng.choice(BYTE_MUTATIONS)(packed, rng)
        return mutated, f"on the .gz bytes: {label}"
    return rng.choice(BYTE_MUTATIONS)(data, rng)


# -- structure -------------------------------------------------------------------------------------
def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    paths = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            paths.extend(_paths(item, prefix + (key,)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            paths.extend(_paths(item, prefix + (index,)))
    return paths


def _set(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    target = value
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = new
    return value


def awkward_json(rng: random.Random) -> Any:
    """A JSON value of an unexpected type or size."""
    roll = rng.random()
    if roll < 0.1:
        return [rng.choice(JSON_VALUES) for _ in range(rng.randint(1, 3))]
    if roll < 0.15:
        return {"from": rng.choice(JSON_VALUES), "value": rng.choice(JSON_VALUES)}
    return copy.deepcopy(rng.choice(JSON_VALUES))


def structure_mutation(data: Any, rng: random.Random, inside: tuple = (), min_depth: int = 0) -> tuple[Any, str, tuple]:
    """Replace one value below ``inside`` (at least ``min_depth`` deep) with an awkward one.
    Returns (new data, label, path)."""
    mutated = copy.deepcopy(data)
    base = mutated
    for part in inside:
        base = base[part]
    candidates = [p for p in _paths(base) if len(p) >= min_depth] or [()]
    path = rng.choice(candidates)
    new = awkward_json(rng)
    if inside or path:
        _set(base, path, new)
        full = inside + path
    else:
        mutated, full = new, ()
    return mutated, f"{'.'.join(map(str, full)) or '<top>'} = {json.dumps(new, default=str)[:80]}", full


def to_json_bytes(data: Any, lines: bool = False) -> bytes:
    """JSON (``allow_nan``: inf/nan become Infinity/NaN, as Python writes them) or JSONL."""
    if lines and isinstance(data, list):
        return ("\n".join(json.dumps(item) for item in data) + "\n").encode()
    return json.dumps(data).encode()
