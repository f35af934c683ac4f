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

Server tokenizer (no tokenizer given, attached to a server): :class:`ServerTokenCounter` asks
the server's own tokenize endpoint, described by a :class:`TokenizeAPI` that each engine adapter
gives (``runners/engines/adapters/``: vLLM's ``POST /tokenize``, SGLang's, LMDeploy's): one
text per request, ``concurrency`` requests at once, every count remembered per server and model.
``overhead_tokens`` is what the server adds to every prompt on top of its text (BOS for
completions; the chat template's tokens for chat), so the context check can count a prompt as
the server will.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp

from runners import paths
from runners.engines.openai_client import header_secrets, redact
from runners.errors import ConfigError, SchedlabError

CHARACTERS_PER_TOKEN = 4.0
#: /tokenize requests in flight at once while counting a workload's texts.
TOKENIZE_CONCURRENCY = 32
#: Seconds one /tokenize request may take.
TOKENIZE_TIMEOUT_S = 30.0
T = TypeVar("T")


class TokenCounter(Protocol):
    name: str

    def count(self, texts: Sequence[str]) -> list[int]:
        """Token count of each text."""


class TokenizerUnavailable(SchedlabError):
    """A server cannot count tokens; the message says what was asked and what came back (API
    keys written as ***)."""


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


def run_coroutine(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``make()`` to its end from synchronous code, in a thread of its own when
    this thread already runs an event loop (the dashboard)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


@dataclass(frozen=True)
class TokenizeAPI:
    """How one engine counts tokens over HTTP: ``path`` (POSTed), the JSON body that counts a
    text's own tokens (``text_body(model, text)``), the body that counts what the server adds to
    a prompt (``overhead_body(model, api)``: an empty prompt with special tokens, or an empty chat
    message with the template; None where the engine cannot be asked), and how to read the count
    and the context limit (tokens; None where the reply has none) from a reply."""

    path: str
    text_body: Callable[[str, str], dict[str, Any]]
    overhead_body: Callable[[str, str], dict[str, Any] | None]
    read_count: Callable[[Any], int | None]
    read_limit: Callable[[Any], int | None]
    expected: str  # the reply's shape, for error messages


class ServerTokenCounter:
    """Counts with a server's own tokenizer through its tokenize endpoint (``api``).

    ``count`` sends only texts it has not counted before, :data:`TOKENIZE_CONCURRENCY` at a
    time, each counting the text's own tokens (no special tokens, as the Hugging Face counter
    counts). :class:`TokenizerUnavailable` when the server has no usable endpoint.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api: TokenizeAPI,
        headers: dict[str, str] | None = None,
        concurrency: int = TOKENIZE_CONCURRENCY,
        timeout_s: float = TOKENIZE_TIMEOUT_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api = api
        self.headers = dict(headers or {})
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.name = f"server:{self.base_url}{api.path} ({model})"
        self.max_model_len: int | None = None  # as the last reply reported it
        self._counts: dict[str, int] = {}
        self._overhead: dict[str, int] = {}
        self.requests_sent = 0

    @property
    def url(self) -> str:
        return self.base_url + self.api.path

    async def _post(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> int:
        try:
            return await self._post_once(session, body)
        except TokenizerUnavailable as exc:
            raise TokenizerUnavailable(redact(str(exc), header_secrets(self.headers))) from exc.__cause__

    async def _post_once(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> int:
        self.requests_sent += 1
        try:
            async with session.post(self.url, json=body, headers=self.headers) as response:
                text = await response.text()
                status = response.status
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise TokenizerUnavailable(f"POST {self.url} failed: {type(exc).__name__}: {exc}") from exc
        if status != 200:
            raise TokenizerUnavailable(f"POST {self.url} answered HTTP {status}: {text.strip()[:200]}")
        try:
            reply = json.loads(text)
        except ValueError:
            reply = None
        count = self.api.read_count(reply)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise TokenizerUnavailable(f"POST {self.url} answered {text.strip()[:200]!r}; expected {self.api.expected}")
        limit = self.api.read_limit(reply)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            self.max_model_len = limit
        return count

    async def _count_all(self, bodies: list[dict[str, Any]]) -> list[int]:
        gate = asyncio.Semaphore(self.concurrency)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def one(body: dict[str, Any]) -> int:
                async with gate:
                    return await self._post(session, body)

            tasks = [asyncio.ensure_future(one(body)) for body in bodies]
            try:
                return list(await asyncio.gather(*tasks))
            finally:
                for task in tasks:
                    task.cancel()

    def count(self, texts: Sequence[str]) -> list[int]:
        counts = self._counts
        new = [text for text in dict.fromkeys(texts) if text not in counts]
        if new:
            bodies = [self.api.text_body(self.model, text) for text in new]
            counts.update(zip(new, run_coroutine(lambda: self._count_all(bodies))))
        return [counts[text] for text in texts]

    def overhead_tokens(self, api: str = "completions") -> int:
        """Tokens the server adds to every prompt besides its text (see :class:`TokenizeAPI`);
        :class:`TokenizerUnavailable` where the engine cannot be asked."""
        if api not in self._overhead:
            body = self.api.overhead_body(self.model, api)
            if body is None:
                raise TokenizerUnavailable(f"{self.url} cannot count the tokens the server adds to a {api} prompt")
            self._overhead[api] = run_coroutine(lambda: self._count_all([body]))[0]
        return self._overhead[api]


_SERVER_COUNTERS: dict[tuple[str, str, str], ServerTokenCounter] = {}


def server_token_counter(
    base_url: str, model: str, api: TokenizeAPI, headers: dict[str, str] | None = None
) -> ServerTokenCounter:
    """The counter of ``model`` at ``base_url``, checked with one request (an empty text); one
    per server, model and endpoint in a process, so its remembered counts serve every run
    against it. :class:`TokenizerUnavailable` when the server cannot tokenize."""
    key = (base_url.rstrip("/"), model, api.path)
    counter = _SERVER_COUNTERS.get(key)
    if counter is None:
        counter = ServerTokenCounter(base_url, model, api, headers)
        counter.count([""])  # the check: raises if there is no usable endpoint
        _SERVER_COUNTERS[key] = counter
    counter.headers = dict(headers or {})
    return counter


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
