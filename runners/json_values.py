"""Reading sections of JSON records (configs, peer tools' exports) whose shape is not guaranteed:
a section that is missing or of the wrong kind reads as empty, so one malformed field never stops
a page or an import (the caller says what is missing); and values by dotted path in typed records
(runners.store.models) or mappings alike."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object (a dict: itself, not a copy), else an empty dict."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array (a list: itself, not a copy), else an empty list."""
    return value if isinstance(value, list) else []


def dotted_value(record: Any, dotted: str) -> Any:
    """The value at ``dotted`` (``"G"``, ``"ttft_s.p99"``, a field kept from the file that this
    version does not declare) in nested records or mappings; None when a part is missing."""
    value: Any = record
    for part in dotted.split("."):
        if isinstance(value, BaseModel):
            value = getattr(value, part, None)
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def is_stored(record: Any, name: str) -> bool:
    """Whether the file (or mapping) ``record`` was read from holds the top-level field ``name``."""
    if isinstance(record, BaseModel):
        return name in record.model_fields_set or name in (record.model_extra or {})
    return isinstance(record, dict) and name in record
