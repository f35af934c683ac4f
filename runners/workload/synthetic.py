"""Generate the synthetic stand-ins for ShareGPT and Python-Code-23k shipped under datasets/.

No text from either dataset is used (Python-Code-23k is CC-BY-NC-ND 4.0): prompts and replies
are made-up words from a small generated vocabulary, so only their *lengths* carry meaning.
Lengths are drawn from log-normal distributions fitted to public statistics (docs/design.md
"Workload statistics", gathered 2026-11-21) and then passed through the default length filter
(prompt 4..1024 tokens, reply >= 4, prompt + reply <= 2048), redrawing rejected pairs. Text
length is exactly 4 characters per target token, so the default token approximation recovers the
drawn length.

Parameters (tokens; log-normal ``mu``/``sigma`` of the natural log):

chat (ShareGPT_Vicuna_unfiltered V3): first-turn characters mean 1,366 / median 599, reply
  mean 894 / median 562, at ~4 characters per token. A log-normal with median m and mean a has
  mu = ln m and sigma = sqrt(2 ln(a / m)):
  prompt mu = ln(149.75) = 5.009, sigma = 1.283 (predicts p90 3,101 / p99 11,774 characters;
  published 3,183 / 10,723); reply mu = ln(140.5) = 4.945, sigma = 0.964 (p90 1,932 /
  p99 5,292 characters; published 2,219 / 3,800).
code (Python-Code-23k-ShareGPT, Qwen2.5-Coder tokenizer, 50 prompts): mean prompt ~119 tokens,
  mean generated ~465 tokens; no median was published, so sigma is our assumption (0.5 for
  short instructions, 0.55 for code answers) and mu = ln(mean) - sigma^2 / 2.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runners.workload.conversations import SYNTHETIC_FILES, SYNTHETIC_SESSION_FILES, LengthFilter
from runners.workload.tokens import CHARACTERS_PER_TOKEN

DEFAULT_SEED = 20261121
DEFAULT_ENTRIES = 5000
#: Conversations in the multi-turn chat stand-in (datasets/sharegpt_sessions_synthetic.jsonl.gz).
SESSION_ENTRIES = 2000
#: Mean exchanges (user message + reply) per ShareGPT conversation: 330,239 turns over 94,145
#: conversations = 3.51 (Yan et al., "ShareChat: A Dataset of Chatbot Conversations in the Wild",
#: arXiv 2512.17843, Table 1, ShareGPT row). The stand-in draws each conversation's exchanges from
#: a geometric distribution with that mean (our assumption of the shape: the paper gives the mean
#: only), at most :data:`MOST_EXCHANGES`.
SHAREGPT_MEAN_EXCHANGES = 3.51
MOST_EXCHANGES = 64


@dataclass(frozen=True)
class LogNormalLengths:
    """Log-normal token-length distribution: ln(length) ~ Normal(mu, sigma)."""

    mu: float
    sigma: float


@dataclass(frozen=True)
class StandInSpec:
    task: str
    prompt: LogNormalLengths
    reply: LogNormalLengths
    description: str


STAND_INS: dict[str, StandInSpec] = {
    "chat": StandInSpec(
        task="chat",
        prompt=LogNormalLengths(mu=math.log(599 / 4), sigma=math.sqrt(2 * math.log(1366 / 599))),
        reply=LogNormalLengths(mu=math.log(562 / 4), sigma=math.sqrt(2 * math.log(894 / 562))),
        description="synthetic stand-in for ShareGPT_Vicuna_unfiltered (lengths only)",
    ),
    "code": StandInSpec(
        task="code",
        prompt=LogNormalLengths(mu=math.log(119) - 0.5**2 / 2, sigma=0.5),
        reply=LogNormalLengths(mu=math.log(465) - 0.55**2 / 2, sigma=0.55),
        description="synthetic stand-in for Python-Code-23k-ShareGPT (lengths only)",
    ),
}

_ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "kl", "tr", "sn"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]
_CODAS = ["", "n", "r", "s", "x", "th", "m"]


def made_up_vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    """``size`` distinct pronounceable made-up words of one to three syllables."""
    words: set[str] = set()
    while len(words) < size:
        syllables = int(rng.integers(1, 4))
        word = "".join(
            _ONSETS[rng.integers(len(_ONSETS))]
            + _VOWELS[rng.integers(len(_VOWELS))]
            + _CODAS[rng.integers(len(_CODAS))]
            for _ in range(syllables)
        )
        words.add(word)
    return sorted(words)


def _fit_length(text: str, characters: int, filler: str) -> str:
    if len(text) >= characters:
        return text[:characters].rstrip() + filler * (characters - len(text[:characters].rstrip()))
    return text + filler * (characters - len(text))


def _prose(tokens: int, vocabulary: list[str], rng: np.random.Generator) -> str:
    characters = int(tokens * CHARACTERS_PER_TOKEN)
    words = [vocabulary[i] for i in rng.integers(len(vocabulary), size=characters // 3 + 2)]
    text = " ".join(words).capitalize()
    return _fit_length(text, characters - 1, ".") + "."


def _code(tokens: int, vocabulary: list[str], rng: np.random.Generator) -> str:
    characters = int(tokens * CHARACTERS_PER_TOKEN)
    lines: list[str] = []
    length = 0
    while length < characters:
        name, arg_a, arg_b = (vocabulary[i] for i in rng.integers(len(vocabulary), size=3))
        block = f"def {name}_{arg_a}({arg_a}, {arg_b}):\n    return {arg_a} + {arg_b}\n"
        lines.append(block)
        length += len(block)
    return _fit_length("".join(lines), characters, "#")


def draw_lengths(
    spec: StandInSpec, count: int, rng: np.random.Generator, length_filter: LengthFilter
) -> list[tuple[int, int]]:
    """``count`` (prompt, reply) token lengths that pass ``length_filter``, redrawing rejects."""
    kept: list[tuple[int, int]] = []
    while len(kept) < count:
        prompts = np.rint(rng.lognormal(spec.prompt.mu, spec.prompt.sigma, size=count)).astype(int)
        replies = np.rint(rng.lognormal(spec.reply.mu, spec.reply.sigma, size=count)).astype(int)
        for n_in, n_out in zip(prompts.tolist(), replies.tolist()):
            if length_filter.rejects(n_in, n_out) is None:
                kept.append((n_in, n_out))
                if len(kept) == count:
                    break
    return kept


def generate_entries(task: str, count: int = DEFAULT_ENTRIES, seed: int = DEFAULT_SEED) -> list[dict]:
    """ShareGPT-format entries for one task, deterministic from ``seed``."""
    spec = STAND_INS[task]
    rng = np.random.default_rng([seed, 0 if task == "chat" else 1])
    vocabulary = made_up_vocabulary(400, rng)
    write_reply = _code if task == "code" else _prose
    entries = []
    for index, (n_in, n_out) in enumerate(draw_lengths(spec, count, rng, LengthFilter())):
        entries.append(
            {
                "id": f"synthetic-{task}-{index:05d}",
                "synthetic": True,
                "conversations": [
                    {"from": "human", "value": _prose(n_in, vocabulary, rng)},
                    {"from": "gpt", "value": write_reply(n_out, vocabulary, rng)},
                ],
            }
        )
    return entries


def generate_session_entries(count: int = SESSION_ENTRIES, seed: int = DEFAULT_SEED) -> list[dict]:
    """Multi-turn chat entries (ShareGPT format), deterministic from ``seed``: each conversation has
    1 + Geometric exchanges with mean :data:`SHAREGPT_MEAN_EXCHANGES` (at most
    :data:`MOST_EXCHANGES`); every exchange's lengths are drawn as the chat stand-in's first
    exchange is (the same log-normals and filter: no public statistics of later turns' lengths)."""
    spec = STAND_INS["chat"]
    rng = np.random.default_rng([seed, 2])
    vocabulary = made_up_vocabulary(400, rng)
    exchanges = np.minimum(rng.geometric(1 / SHAREGPT_MEAN_EXCHANGES, size=count), MOST_EXCHANGES)
    entries = []
    for index, turns in enumerate(exchanges.tolist()):
        messages = []
        for n_in, n_out in draw_lengths(spec, turns, rng, LengthFilter()):
            messages.append({"from": "human", "value": _prose(n_in, vocabulary, rng)})
            messages.append({"from": "gpt", "value": _prose(n_out, vocabulary, rng)})
        entries.append({"id": f"synthetic-session-{index:05d}", "synthetic": True, "conversations": messages})
    return entries


def _write_jsonl_gz(path: Path, entries: list[dict]) -> None:
    """``entries`` as gzip-compressed JSONL, byte for byte reproducible (no name, no time stamp)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as handle:
        for entry in entries:
            handle.write((json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8"))


def write_stand_ins(
    folder: Path | None = None, count: int = DEFAULT_ENTRIES, seed: int = DEFAULT_SEED
) -> dict[str, Path]:
    """Regenerate both stand-in files (gzip-compressed JSONL, byte-for-byte reproducible) in
    ``folder``, by default datasets/."""
    written = {}
    for task, default_path in SYNTHETIC_FILES.items():
        path = (folder / default_path.name) if folder is not None else default_path
        _write_jsonl_gz(path, generate_entries(task, count, seed))
        written[task] = path
    sessions = SYNTHETIC_SESSION_FILES["chat"]
    path = (folder / sessions.name) if folder is not None else sessions
    _write_jsonl_gz(path, generate_session_entries(seed=seed))
    written["chat sessions"] = path
    return written


if __name__ == "__main__":
    for task, path in write_stand_ins().items():
        print(f"{task}: {path} ({path.stat().st_size / 1e6:.1f} MB)")
