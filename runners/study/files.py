"""Where a study's record lives: :data:`STUDY_FILE` in the study's folder, and
:func:`find_study`, which the command line asks before it knows whether a name is a study or a
run (kept apart from :mod:`runners.study.runner` so that answering costs no config or policy
imports)."""

from __future__ import annotations

from pathlib import Path

from runners.store.result_store import results_folder
from runners.store.run_ids import RUN_ID_PATTERN

#: The study record's file name inside the study's folder.
STUDY_FILE = "study.json"


def find_study(root: str | Path, name: str) -> Path | None:
    """The folder of study ``name`` (an id inside ``root``, or a path to a study folder) when it
    holds study.json; None otherwise (then it may be a run)."""
    if not isinstance(name, str) or not name.strip():
        return None
    candidates = []
    if RUN_ID_PATTERN.match(name):
        candidates.append(results_folder(root) / name)
    candidates.append(Path(name))
    for folder in candidates:
        try:
            if not folder.is_symlink() and (folder / STUDY_FILE).is_file():
                return folder
        except OSError:
            continue
    return None
