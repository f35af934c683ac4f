"""Empty an attached server's prefix cache between two runs, so that a run's cache hits are its
own and not the blocks an earlier run on the same server left behind.

Which endpoint does it (read from each engine's server source):

- vLLM: ``POST /reset_prefix_cache``, served only when the server runs with
  ``VLLM_SERVER_DEV_MODE=1`` (otherwise 404);
- SGLang: ``POST /flush_cache`` (refused while requests are in flight);
- LMDeploy has no such endpoint: its cache cannot be emptied from outside.

:func:`reset_prefix_cache` tries them in that order and says, in one sentence, when none worked.
"""

from __future__ import annotations

from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

#: The paths tried, in order: vLLM's, then SGLang's.
RESET_PATHS = ("/reset_prefix_cache", "/flush_cache")
#: Seconds one reset request may take (a reset waits for the engine's step loop).
RESET_TIMEOUT_S = 60.0


def reset_prefix_cache(base_url: str, headers: dict[str, str] | None = None) -> str | None:
    """POST each of :data:`RESET_PATHS` to ``base_url`` (no trailing /v1) until one answers 2xx.
    None when the cache was emptied; otherwise why it could not be (a sentence naming the server
    and what to do). Never raises for an HTTP or network failure."""
    base = base_url.rstrip("/").removesuffix("/v1")
    answers = []
    for path in RESET_PATHS:
        try:
            with urlopen(Request(base + path, method="POST", headers=headers or {}), timeout=RESET_TIMEOUT_S) as reply:
                if 200 <= reply.status < 300:
                    return None
                answers.append(f"{path}: HTTP {reply.status}")
        except HTTPError as exc:
            answers.append(f"{path}: HTTP {exc.code}")
        except (URLError, OSError, ValueError) as exc:
            answers.append(f"{path}: {getattr(exc, 'reason', exc)}")
    return (
        f"the prefix cache of {base} could not be emptied ({'; '.join(answers)}): a run on it may hit "
        "blocks an earlier run left; start vLLM with VLLM_SERVER_DEV_MODE=1 to allow POST /reset_prefix_cache"
    )
