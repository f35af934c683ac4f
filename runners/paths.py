"""Questions about user-given paths that never raise: a name the file system cannot even look up
(too long, an embedded NUL, no permission on a parent) is simply not a file or folder, so the
caller's own "not found" error, naming the field or file, is what the user sees."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (the folder holding runners/): a vLLM server's PYTHONPATH gets it for
#: schedlab's in-engine scheduler classes.
ROOT = Path(__file__).resolve().parents[1]


def default_results_dir() -> Path:
    """The results folder when none is given: ``$SCHEDLAB_RESULTS_DIR``, else ``results/`` in the
    repository (read when called). :data:`runners.store.result_store.DEFAULT_RESULTS_DIR` holds it."""
    return Path(os.environ.get("SCHEDLAB_RESULTS_DIR") or ROOT / "results")


def is_file(path: str | Path) -> bool:
    """Whether ``path`` names a readable regular file (False instead of OSError/ValueError)."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: str | Path) -> bool:
    """Whether ``path`` names a folder (False instead of OSError/ValueError)."""
    try:
        return Path(path).is_dir()
    except (OSError, ValueError):
        return False


def exists(path: str | Path) -> bool:
    """Whether ``path`` exists (False instead of OSError/ValueError)."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False
