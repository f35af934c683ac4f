"""Run, study and job ids: what a valid id is (a folder name, never a path or pattern) and how a
fresh one is made. Kept apart from the result store so a config validates its ``run_id``
without loading pandas or pyarrow."""

from __future__ import annotations

import os
import re

from runners.errors import ConfigError
from runners.timestamps import id_stamp

#: 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit.
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def validate_run_id(run_id: str) -> str:
    """``run_id`` when it is a valid run id; ConfigError naming ``run_id`` otherwise."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id):
        shown = (
            repr(run_id)
            if isinstance(run_id, str) and len(run_id) <= 140
            else (f"a {len(run_id)}-character name" if isinstance(run_id, str) else f"a {type(run_id).__name__}")
        )
        raise ConfigError(
            "run_id",
            f"{shown} is not allowed; expected 1 to 128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
        )
    return run_id


def new_run_id(scheduler: str, engine: str) -> str:
    """``YYYYmmdd-HHMMSS-<scheduler>-<engine>-<4 hex>`` (UTC)."""
    return f"{id_stamp()}-{scheduler}-{engine}-{os.urandom(2).hex()}"
