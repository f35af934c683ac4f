"""How an engine counts tokens over HTTP (:class:`TokenizeAPI`): a plain record, kept apart from
the client in :mod:`runners.engines.server_tokens` so the engine adapters (and every config that
names an engine) load without the HTTP stack."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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
