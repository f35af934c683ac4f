"""User-facing errors: each names the field or file at fault and what was expected."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class SchedlabError(Exception):
    """Base class for errors caused by the user's input, printed as one line by the CLI."""


class ConfigError(SchedlabError):
    """A configuration value is invalid. ``field`` is a dotted path such as ``workload.rate``."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class DatasetError(SchedlabError):
    """A dataset file or hub dataset could not be read or held no usable entry."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        self.message = message
        super().__init__(f"{source}: {message}")


class UnknownNameError(ConfigError):
    """A scheduler or engine name is not in the registry."""

    def __init__(self, field: str, name: str, known: list[str]) -> None:
        super().__init__(field, f"unknown name {name!r}; expected one of: {', '.join(sorted(known))}")


class EnvironmentProblem(SchedlabError):
    """What was asked cannot run on this machine as it is, whatever the run's own settings: the
    engine is not installed in the chosen Python, the model folder does not exist (nor is the id
    in the hub cache when the hub is off), a port is taken, a server is unreachable. ``field``:
    the dotted config path to change (``engine.python``). Found before launch
    (:mod:`runners.app.preflight`); a study stops at the first member that meets one
    (:func:`runners.study.runner.environment_failure`): every later member would meet it too."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class RunStopped(Exception):
    """A run stopped early by its own rule (failure rule, dead engine, time limit); ``str`` says why."""


class RunCancelled(Exception):
    """Raised inside a driver when the user cancels a run; partial results are kept."""


#: The tags of tagged unions, by the field that holds the union (``{"engine": {"sim", "vllm",
#: ...}}``): a tag in an error location is not a field the user wrote. Filled by the module that
#: defines the union (runners.engines.kinds), so this module imports none of them.
UNION_TAGS: dict[str, frozenset[str]] = {}


def error_location(loc: "tuple[object, ...]") -> str:
    """A pydantic error location as the dotted field the user wrote (``engine.model``): a tagged
    union's tag (``engine.vllm.model``, :data:`UNION_TAGS`) is not a field, so it is dropped."""
    parts = [str(part) for part in loc]
    if len(parts) > 1 and parts[1] in UNION_TAGS.get(parts[0], ()):
        del parts[1]
    return ".".join(parts)


#: What a command interrupted before its own stop handling began says (Ctrl-C: runners.app.cli.main;
#: SIGTERM: runners/__main__.py); it exits 130.
STOPPED_LINE = "stopped: interrupted by a signal"
#: Longest piece of the user's input an error message quotes, characters.
QUOTED_INPUT_CHARS = 120
#: Longest error line the CLI prints, characters (the rest is cut, with its length said).
ERROR_LINE_CHARS = 2_000


def shortened(text: str, limit: int = QUOTED_INPUT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was when cut."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def validation_message(item: Mapping[str, Any]) -> str:
    """One pydantic error item as ``message (got value)``: pydantic's "Value error, " prefix
    dropped, the offending value shown (cut to :data:`QUOTED_INPUT_CHARS`) unless it is a whole
    object or list."""
    message = shortened(str(item.get("msg", "invalid value")).removeprefix("Value error, "), ERROR_LINE_CHARS // 4)
    value = item.get("input")
    shown = "" if isinstance(value, (dict, list)) or value is None else f" (got {shortened(repr(value))})"
    return f"{message}{shown}"


def format_validation_error(error: "object", prefix: str = "") -> str:
    """Turn a pydantic ValidationError into one line per problem: ``field: message (got value)``."""
    lines = []
    for item in error.errors():  # type: ignore[attr-defined]
        location = error_location(item.get("loc", ()))
        field = f"{prefix}.{location}" if prefix and location else (prefix or location or "config")
        lines.append(f"{field}: {validation_message(item)}")
    return "; ".join(lines)
