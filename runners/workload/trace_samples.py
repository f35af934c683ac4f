"""Generate the small synthetic trace samples shipped under datasets/traces/ (one per format:
Mooncake JSONL, Azure LLM inference CSV for code and for conversation, BurstGPT CSV).

Nothing in them comes from a real trace: lengths, times and sharing are drawn here with a fixed
seed (``python -m runners.workload.trace_samples`` rewrites the files byte for byte; a test
checks the shipped files match). Prompts and replies are kept short enough (prompt + reply at
most :data:`MAX_TOTAL_TOKENS`) that every record fits a 4,096-token context (tools/tiny_model.py)
and the simulator's default KV cache.

- Mooncake: conversations that reuse one of a few system prompts (1 to 4 blocks of 512 tokens,
  shared by many requests) and go on for several turns; turn n + 1's prompt is turn n's prompt,
  its reply and a new message, so it shares turn n's *full* blocks (their hash ids) and gets
  new ids from there on (the block turn n left partial has new content), as the Mooncake trace's
  ``hash_ids`` show for a conversation. Timestamps in milliseconds.
- Azure: code (2023 file format: ``2023-11-16 18:17:03.9799600``, seven fraction digits) with
  long prompts and short completions; conversation (2024 format:
  ``2024-05-10 00:00:00.009930+00:00``) with shorter prompts and longer replies.
- BurstGPT: ChatGPT and GPT-4 rows, conversation and API logs, integer-second timestamps as in
  the released CSV, and about 8% failed requests (``Response tokens`` 0).
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from runners.workload.prefix import MOONCAKE_BLOCK_TOKENS
from runners.workload.traces import TRACES_DIR

SEED = 20261127
RECORDS = 200
#: Most prompt + reply tokens of any sample record (a 4,096-token context, with room for a
#: chat template).
MAX_TOTAL_TOKENS = 3900

SAMPLE_FILES = {
    "mooncake": "mooncake_synthetic.jsonl",
    "azure_code": "azure_code_synthetic.csv",
    "azure_conv": "azure_conv_synthetic.csv",
    "burstgpt": "burstgpt_synthetic.csv",
}


def _lognormal(rng: np.random.Generator, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(rng.lognormal(math.log(median), sigma)))))


def mooncake_lines(seed: int = SEED, records: int = RECORDS) -> list[str]:
    """The Mooncake sample's lines (module doc), in time order."""
    rng = np.random.default_rng([seed, 0])
    block = MOONCAKE_BLOCK_TOKENS
    next_id = 0
    system_prompts: list[list[int]] = []
    for blocks in (1, 2, 3, 4):
        system_prompts.append(list(range(next_id, next_id + blocks)))
        next_id += blocks
    rows: list[tuple[int, int, int, dict[str, Any]]] = []  # (ms, session, turn, entry)
    session = 0
    while len(rows) < records + 40:  # enough that the first `records` in time order are whole-ish
        start_ms = float(rng.uniform(0, 240_000))
        choice = int(rng.choice(5, p=[0.35, 0.25, 0.15, 0.1, 0.15]))  # 4: no system prompt
        ids = list(system_prompts[choice]) if choice < 4 else []
        tokens = block * len(ids)  # the context so far
        full = tokens  # tokens of it whose blocks the last prompt filled (their ids are shared)
        turns = min(int(rng.geometric(0.4)), 6)
        time_ms = start_ms
        for turn in range(turns):
            message = _lognormal(rng, 300, 0.8, 20, 1500)
            reply = _lognormal(rng, 120, 0.9, 4, 500)
            prompt = tokens + message
            if prompt + reply > MAX_TOTAL_TOKENS:
                break
            shared = ids[: full // block]  # the full blocks of the last prompt
            new_blocks = -(-prompt // block) - len(shared)
            ids = shared + list(range(next_id, next_id + new_blocks))
            next_id += new_blocks
            entry: dict[str, Any] = {
                "timestamp": int(time_ms),
                "input_length": prompt,
                "output_length": reply,
                "hash_ids": ids,
            }
            rows.append((int(time_ms), session, turn, entry))
            tokens, full = prompt + reply, prompt
            time_ms += reply * 25.0 + float(rng.exponential(20_000))  # the reply, then think time
        session += 1
    rows.sort(key=lambda row: row[:3])
    kept = [row[3] for row in rows[:records]]
    # as the released traces: time from the first request, block ids numbered in order of first use
    origin = kept[0]["timestamp"]
    renumber: dict[int, int] = {}
    for entry in kept:
        entry["timestamp"] -= origin
        entry["hash_ids"] = [renumber.setdefault(value, len(renumber)) for value in entry["hash_ids"]]
    return [json.dumps(entry) for entry in kept]


def _azure_rows(rng: np.random.Generator, task: str, records: int) -> list[tuple[float, int, int]]:
    """(seconds from the start, context tokens, generated tokens) of an Azure-like sample."""
    gaps = rng.exponential(0.8 if task == "code" else 1.2, size=records)
    times = np.cumsum(gaps) - gaps[0]
    rows = []
    for time_s in times.tolist():
        if task == "code":
            context = _lognormal(rng, 1500, 0.9, 20, 3600)
            generated = _lognormal(rng, 18, 0.7, 3, 300)
        else:
            context = _lognormal(rng, 900, 0.9, 20, 3400)
            generated = _lognormal(rng, 200, 0.8, 3, 500)
        generated = min(generated, MAX_TOTAL_TOKENS - context)
        rows.append((time_s, context, generated))
    return rows


def azure_text(task: str, seed: int = SEED, records: int = RECORDS) -> str:
    """The Azure sample CSV for ``task`` (code: 2023 timestamps; chat: 2024 timestamps)."""
    rng = np.random.default_rng([seed, 1 if task == "code" else 2])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
    if task == "code":
        origin = datetime(2023, 11, 16, 18, 17, 3, 979960)
        for time_s, context, generated in _azure_rows(rng, task, records):
            # seven fraction digits, as the 2023 files (100 ns ticks)
            ticks = round(time_s * 1e7)
            moment = origin + timedelta(microseconds=ticks // 10)
            stamp = moment.strftime("%Y-%m-%d %H:%M:%S.%f") + str(ticks % 10)
            writer.writerow([stamp, context, generated])
    else:
        origin = datetime(2024, 5, 10, 0, 0, 0, 9930, tzinfo=UTC)
        for time_s, context, generated in _azure_rows(rng, task, records):
            moment = origin + timedelta(microseconds=round(time_s * 1e6))
            writer.writerow([moment.isoformat(sep=" "), context, generated])
    return out.getvalue()


def burstgpt_text(seed: int = SEED, records: int = RECORDS) -> str:
    """The BurstGPT sample CSV: about 8% failures (Response tokens 0)."""
    rng = np.random.default_rng([seed, 3])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
    time_s = 0
    for _ in range(records):
        model = "ChatGPT" if rng.random() < 0.75 else "GPT-4"
        log_type = "Conversation log" if rng.random() < 0.6 else "API log"
        request = _lognormal(rng, 600, 1.0, 1, 3400)
        response = 0 if rng.random() < 0.08 else _lognormal(rng, 180, 0.9, 1, 500)
        writer.writerow([time_s, model, request, response, request + response, log_type])
        time_s += int(rng.poisson(1.5))
    return out.getvalue()


def sample_texts(seed: int = SEED, records: int = RECORDS) -> dict[str, str]:
    """File name -> content of every sample."""
    return {
        SAMPLE_FILES["mooncake"]: "\n".join(mooncake_lines(seed, records)) + "\n",
        SAMPLE_FILES["azure_code"]: azure_text("code", seed, records),
        SAMPLE_FILES["azure_conv"]: azure_text("chat", seed, records),
        SAMPLE_FILES["burstgpt"]: burstgpt_text(seed, records),
    }


def write_samples(folder: Path | None = None) -> dict[str, Path]:
    """Write every sample into ``folder`` (default datasets/traces/), byte for byte reproducible."""
    folder = TRACES_DIR if folder is None else folder
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, text in sample_texts().items():
        path = folder / name
        path.write_bytes(text.encode("utf-8"))
        written[name] = path
    return written


if __name__ == "__main__":
    for name, path in write_samples().items():
        print(f"{name}: {path} ({path.stat().st_size / 1e3:.1f} kB)")
