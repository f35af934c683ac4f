"""Where schedlab may write a file the user names (``export -o``): only a regular file, new or
replaced, in a folder that already exists, and never inside a run or study folder, whose files are
contracts. Everything else is refused in one line naming the option, before anything is written:
a device, a pipe, a socket, a folder, a symbolic link (schedlab replaces files by renaming over
them, which would turn a link or a device into a plain file), a missing folder (never created
silently), an empty name."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from runners.errors import ConfigError

#: The name that means "standard output" instead of a file.
STDOUT = "-"


def _kind(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def checked_output_file(
    text: str | os.PathLike[str],
    option: str,
    results_root: str | Path | None = None,
    forbidden: Iterable[str | Path] = (),
) -> Path:
    """``text`` as a file schedlab may write (see the module docstring); ConfigError naming
    ``option`` otherwise. With ``results_root``, a path inside any folder of that results folder
    (a run's, a study's, the job folder) is refused too, the results folder itself allowed; and a
    path inside any folder of ``forbidden`` (a run folder named by its path)."""
    raw = os.fspath(text)
    if not raw.strip():
        raise ConfigError(option, f"{raw!r} is empty; expected a file name (or {STDOUT} for standard output)")
    if "\x00" in raw:
        raise ConfigError(option, "the name holds a NUL character; expected a file name")
    path = Path(raw)
    expected = "expected a new or regular file in an existing folder"
    try:
        if path.is_symlink():
            raise ConfigError(option, f"{raw}: is a symbolic link; schedlab writes only a regular file ({expected})")
        if path.exists():
            mode = path.stat().st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(option, f"{raw}: is {_kind(mode)}; {expected}")
        parent = path.parent
        if not parent.is_dir():
            raise ConfigError(
                option, f"{raw}: the folder {str(parent)!r} does not exist (schedlab does not create it); {expected}"
            )
        resolved = parent.resolve() / path.name
        if results_root is not None:
            root = Path(results_root).resolve()
            if _inside(resolved.parent, root) and resolved.parent != root:
                raise ConfigError(
                    option,
                    f"{raw}: is inside {resolved.parent}, a folder of the results folder {root}, whose files "
                    "schedlab writes itself; expected a file outside run and study folders",
                )
        for folder in forbidden:
            if _inside(resolved.parent, Path(folder).resolve()):
                raise ConfigError(
                    option, f"{raw}: is inside the run folder {folder}; expected a file outside run and study folders"
                )
    except OSError as exc:
        raise ConfigError(option, f"{raw}: unusable ({exc.strerror or exc}); {expected}") from None
    return path
