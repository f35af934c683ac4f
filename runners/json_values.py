"""Reading sections of JSON records (summaries, configs, study records, peer tools' exports)
whose shape is not guaranteed: a section that is missing or of the wrong kind reads as empty,
so one malformed field never stops a page or an import (the caller says what is missing)."""

from __future__ import annotations

from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object (a dict: itself, not a copy), else an empty dict."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array (a list: itself, not a copy), else an empty list."""
    return value if isinstance(value, list) else []
