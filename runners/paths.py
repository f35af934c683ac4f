"""Questions about user-given paths that never raise: a name the file system cannot even look up
(too long, an embedded NUL, no permission on a parent) is simply not a file or folder, so the
caller's own "not found" error, naming the field or file, is what the user sees."""

from __future__ import annotations

from pathlib import Path


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
