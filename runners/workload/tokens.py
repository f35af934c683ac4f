"""Token counting: a Hugging Face tokenizer from a local path, or a documented approximation.

Approximation (no tokenizer given): ``max(1, round(characters / 4))``. About four characters
per token is the usual rule of thumb for English text with BPE tokenizers (OpenAI's tokenizer
guide; the ShareGPT statistics in DESIGN.md use the same ratio). It is applied to prompts and
replies alike, so relative lengths stay right even where absolute counts drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, Sequence

from runners.errors import ConfigError

CHARACTERS_PER_TOKEN = 4.0


class TokenCounter(Protocol):
    name: str

    def count(self, texts: Sequence[str]) -> list[int]:
        """Token count of each text."""


class ApproximateTokenCounter:
    """``max(1, round(len(text) / 4))`` tokens per text."""

    name = "approx-4-chars-per-token"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [max(1, round(len(text) / CHARACTERS_PER_TOKEN)) for text in texts]


class HuggingFaceTokenCounter:
    """Counts with ``transformers.AutoTokenizer`` loaded from a local directory (no download)."""

    def __init__(self, path: str | Path) -> None:
        directory = Path(path)
        if not directory.exists():
            raise ConfigError("workload.tokenizer", f"tokenizer path {str(directory)!r} does not exist")
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:  # pragma: no cover - transformers is in requirements.txt
            raise ConfigError("workload.tokenizer", "the 'transformers' package is needed to load a tokenizer") from exc
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        except Exception as exc:  # transformers raises many types for unreadable folders
            raise ConfigError("workload.tokenizer", f"could not load a tokenizer from {str(directory)!r}: {exc}") from exc
        self.name = f"hf:{directory.name}"

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        encoded = self._tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [len(ids) for ids in encoded]


def make_token_counter(tokenizer_path: str | None) -> TokenCounter:
    """The tokenizer at ``tokenizer_path`` if given, else the 4-characters-per-token approximation."""
    if tokenizer_path:
        return HuggingFaceTokenCounter(tokenizer_path)
    return ApproximateTokenCounter()
