"""Token counting: a Hugging Face tokenizer from a local path, or a documented approximation.

Approximation (no tokenizer given): ``max(1, round(characters / 4))``. About four characters
per token is the usual rule of thumb for English text with BPE tokenizers (OpenAI's tokenizer
guide; the ShareGPT statistics in docs/design.md "Workload statistics" use the same ratio). It is
applied to prompts and replies alike, so relative lengths stay right even where absolute counts
drift.

A tokenizer is loaded once per process and folder (and again if its files change), and it
remembers the count of every text it has seen: building a workload tokenises every pair of
the chosen datasets before filtering (about 10,000 texts for the stand-ins, 6-8 s on 2 CPU
cores), and a sweep or a page of runs builds many workloads from the same texts.

A server's own tokenizer (no tokenizer given, attached to a server) counts through
runners.engines.server_tokens, which gives a counter of the same :class:`TokenCounter` shape.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from runners import paths
from runners.errors import ConfigError

CHARACTERS_PER_TOKEN = 4.0


class TokenCounter(Protocol):
    name: str

    def count(self, texts: Sequence[str]) -> list[int]:
        """Token count of each text."""


class ApproximateTokenCounter:
    """``max(1, round(len(text) / 4))`` tokens per text."""

    name = "approx-4-chars-per-token"
    prompt_overhead_tokens = 0

    def count(self, texts: Sequence[str]) -> list[int]:
        return [max(1, round(len(text) / CHARACTERS_PER_TOKEN)) for text in texts]


class HuggingFaceTokenCounter:
    """Counts with ``transformers.AutoTokenizer`` loaded from a local directory (no download)."""

    def __init__(self, path: str | Path) -> None:
        directory = Path(path)
        if not paths.exists(directory):
            raise ConfigError("workload.tokenizer", f"tokenizer path {str(directory)!r} does not exist")
        # transformers prints "PyTorch was not found ..." on import: advice, not an error of the run
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:  # pragma: no cover - transformers is in requirements.txt
            raise ConfigError("workload.tokenizer", "the 'transformers' package is needed to load a tokenizer") from exc
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except Exception as exc:  # transformers raises many types for unreadable folders
            raise ConfigError(
                "workload.tokenizer", f"could not load a tokenizer from {str(directory)!r}: {exc}"
            ) from exc
        self.name = f"hf:{directory.name}"
        self._counts: dict[str, int] = {}
        self._overhead: dict[str, int] = {}

    def overhead_tokens(self, api: str = "completions") -> int:
        """Tokens the server adds to every prompt besides its text: the special tokens (BOS) for
        completions; for chat, the chat template's tokens around an empty user message (0 when
        the tokenizer has no template)."""
        if api not in self._overhead:
            tokenizer = self._tokenizer
            if api == "chat":
                try:
                    ids = tokenizer.apply_chat_template(
                        [{"role": "user", "content": ""}], add_generation_prompt=True, tokenize=True
                    )
                    self._overhead[api] = len(ids["input_ids"] if isinstance(ids, dict) else ids)
                except Exception:  # no chat template: the server refuses chat requests anyway
                    self._overhead[api] = 0
            else:
                self._overhead[api] = len(tokenizer("", add_special_tokens=True)["input_ids"])
        return self._overhead[api]

    def count(self, texts: Sequence[str]) -> list[int]:
        counts = self._counts
        new = [text for text in dict.fromkeys(texts) if text not in counts]
        if new:  # each text is encoded on its own, so a batch of only the new ones counts the same
            encoded = self._tokenizer(new, add_special_tokens=False)["input_ids"]
            counts.update(zip(new, map(len, encoded)))
        return [counts[text] for text in texts]


_LOADED: dict[tuple[str, float], HuggingFaceTokenCounter] = {}


def make_token_counter(tokenizer_path: str | None) -> TokenCounter:
    """The tokenizer at ``tokenizer_path`` if given, else the 4-characters-per-token approximation."""
    if tokenizer_path:
        directory = Path(tokenizer_path)
        if not paths.is_dir(directory):
            return HuggingFaceTokenCounter(directory)  # raises the configuration error
        key = (
            str(directory.resolve()),
            max((f.stat().st_mtime for f in directory.iterdir() if f.is_file()), default=0.0),
        )
        if key not in _LOADED:
            _LOADED[key] = HuggingFaceTokenCounter(directory)
        return _LOADED[key]
    return ApproximateTokenCounter()


def tokenization_label(record: dict[str, Any] | None) -> str | None:
    """One line saying how a real-engine run counted tokens, from config.json's
    ``resolved.tokenization``: the counter's source, with a warning when the 4-characters-per-token
    approximation counted (its prompts were sized by a guess); None for runs without the record."""
    if not isinstance(record, dict) or not record.get("source"):
        return None
    if record.get("approximate"):
        return (
            f"token counts approximate ({CHARACTERS_PER_TOKEN:g} characters per token); source: {record['source']}; "
            "requests may not fit the server's context"
        )
    return f"token counts: {record['source']}"
