"""A server's own tokenizer, asked over HTTP: the counter runners.engines.real_engine uses when a
run attached to a server gives no tokenizer (the same :class:`runners.workload.tokens.TokenCounter`
shape as the local ones).

:class:`ServerTokenCounter` asks the server's tokenize endpoint, described by a
:class:`TokenizeAPI` that each engine adapter gives (``runners/engines/adapters/``: vLLM's
``POST /tokenize``, SGLang's, LMDeploy's): one text per request, ``concurrency`` requests at once,
every count remembered per server and model. ``overhead_tokens`` is what the server adds to every
prompt on top of its text (BOS for completions; the chat template's tokens for chat), so the
context check can count a prompt as the server will.

Not every endpoint does what its body asks: SGLang's current serving_tokenize.py drops
``add_special_tokens`` and tokenizes a prompt as a completion request, BOS included, where its
0.5.4-era file honoured the field. So the counter tokenizes the empty text once, with the first
texts it counts: whatever comes back for it (0 where the body is honoured) is what the endpoint
adds to every text (:attr:`ServerTokenCounter.text_offset`), and is taken off each count, so a
BOS is counted once (in the overhead), not twice.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import aiohttp

from runners.engines.openai_client import header_secrets, redact
from runners.engines.tokenize_api import TokenizeAPI
from runners.errors import SchedlabError

#: /tokenize requests in flight at once while counting a workload's texts.
TOKENIZE_CONCURRENCY = 32
#: Seconds one /tokenize request may take.
TOKENIZE_TIMEOUT_S = 30.0
T = TypeVar("T")


class TokenizerUnavailable(SchedlabError):
    """A server cannot count tokens; the message says what was asked and what came back (API
    keys written as ***)."""


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
        #: tokens the endpoint adds to every text although the body asks for none (the empty
        #: text's count, asked with the first texts); None until then
        self.text_offset: int | None = None
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
        """The tokens of each text's own, without what the endpoint adds to every text (the first
        call also asks for the empty text, which measures that: :attr:`text_offset`)."""
        counts = self._counts
        new = [text for text in dict.fromkeys(texts) if text not in counts]
        if new:
            if self.text_offset is None and "" not in new:
                new.insert(0, "")
            bodies = [self.api.text_body(self.model, text) for text in new]
            raw = dict(zip(new, run_coroutine(lambda: self._count_all(bodies))))
            if self.text_offset is None:
                self.text_offset = raw[""]
            offset = self.text_offset
            counts.update((text, max(0, tokens - offset)) for text, tokens in raw.items())
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
