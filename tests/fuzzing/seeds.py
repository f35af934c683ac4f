"""Valid seed inputs the fuzzers mutate: a tiny dataset, replay files, profiles and configs.

Tiny on purpose: a fuzz case then runs the simulator on 3-5 requests from a 6-entry file in a
few milliseconds instead of loading the 5,000-entry stand-ins.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa ".split()


def _text(words: int, offset: int) -> str:
    return " ".join(WORDS[(offset + i) % len(WORDS)] for i in range(words))


def dataset_entries(count: int = 6) -> list[dict[str, Any]]:
    """ShareGPT-format entries whose prompts and replies pass the default length filter."""
    return [
        {
            "id": f"seed-{i}",
            "conversations": [
                {"from": "human", "value": _text(12 + 3 * i, i)},
                {"from": "gpt", "value": _text(20 + 5 * i, i + 1)},
            ],
        }
        for i in range(count)
    ]


def dataset_bytes(fmt: str, entries: list[Any] | None = None) -> bytes:
    """The entries as ``json`` (an array), ``jsonl``, ``json.gz`` or ``jsonl.gz`` bytes."""
    entries = dataset_entries() if entries is None else entries
    if fmt.startswith("jsonl"):
        raw = ("\n".join(json.dumps(e) for e in entries) + "\n").encode()
    else:
        raw = json.dumps(entries).encode()
    return gzip.compress(raw, mtime=0) if fmt.endswith(".gz") else raw


def write_dataset(folder: Path, name: str = "tiny.jsonl") -> Path:
    """A valid tiny dataset file (format from the name's suffixes)."""
    path = folder / name
    path.write_bytes(dataset_bytes(name.split(".", 1)[1]))
    return path


def tiny_workload_args(chat: Path, code: Path | None = None) -> list[str]:
    """``--set`` flags that take both tasks from tiny files (the code task from ``code`` or ``chat``)."""
    code = code or chat
    return [
        "--set",
        "workload.chat.kind=file",
        "--set",
        f"workload.chat.path={chat}",
        "--set",
        "workload.code.kind=file",
        "--set",
        f"workload.code.path={code}",
    ]


REPLAY_STAMPS = [0.0, 0.25, 0.5, 1.0, 1.5, 2.5, 3.0, 4.0]


def replay_bytes(fmt: str) -> bytes:
    """Arrival timestamps as ``txt`` (one per line), ``csv`` (header + arrival_s) or ``json``."""
    if fmt == "json":
        return json.dumps(REPLAY_STAMPS).encode()
    if fmt == "csv":
        return ("request,arrival_s\n" + "".join(f"r{i},{t + 10}\n" for i, t in enumerate(REPLAY_STAMPS))).encode()
    return "".join(f"{t + 10}\n" for t in REPLAY_STAMPS).encode()


def profile_data() -> dict[str, Any]:
    """A valid engine profile (the bundled preset's coefficients, a small KV cache). Alike in shape
    to tiny_profile in tests/unit/test_vllm_scheduler_slo_sa.py, a different profile (the CPU
    tiny model's hand-set one): kept apart."""
    return {
        "schema": "schedlab.profile/1",
        "name": "fuzz-profile",
        "source": "fuzz seed",
        "units": "seconds",
        "prefill": {"alpha": 1.0e-7, "beta": 5.7e-3, "gamma": 1.0e-5, "delta": 0.04367},
        "decode": {"alpha": 2.0e-10, "beta": 2.75e-4, "gamma": 8.8e-7, "delta": 0.01585},
        "kv_capacity_tokens": 65536,
        "block_size": 16,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 4096,
    }


def profile_bytes(fmt: str) -> bytes:
    import yaml

    data = profile_data()
    return json.dumps(data, indent=1).encode() if fmt == "json" else yaml.safe_dump(data, sort_keys=False).encode()


def config_data(requests: int = 4) -> dict[str, Any]:
    """A valid run config (simulator, tiny workload set separately by flags)."""
    return {
        "engine": {"kind": "sim", "instances": 1, "max_num_seqs": 16},
        "workload": {
            "requests": requests,
            "seed": 1,
            "ratio": {"chat": 1, "code": 1},
            "arrival": {"process": "poisson", "rate": 4},
        },
        "slo": {"preset": "paper"},
        "scheduler": {"name": "fcfs", "params": {}},
        "sample_interval_s": 0.25,
    }
