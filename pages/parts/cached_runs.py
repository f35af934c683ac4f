"""The dashboard's one cached reader of saved runs, shared by the Results and Demo pages (not a
page itself: app.py's st.navigation lists the pages). A run is read again only when its
summary.json is rewritten (a run still going, a rename)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from runners.store import result_store


def summary_stamp(folder: Path) -> float:
    """Seconds of the last write of ``folder``'s summary.json (0.0 when there is none): the key
    that makes a cached run stale."""
    try:
        return (folder / "summary.json").stat().st_mtime_ns / 1e9
    except OSError:
        return 0.0


@st.cache_resource(show_spinner=False, max_entries=256)
def load_run_cached(folder: str, stamp: float) -> result_store.RunData:
    """The run in ``folder`` as last written (``stamp``: its summary_stamp); SchedlabError naming
    the file when it cannot be read."""
    return result_store.load_run(Path(folder).parent, Path(folder).name)


def load_member(base: Path, run_id: str) -> result_store.RunData:
    """The run ``run_id`` inside ``base`` (a study member, by its exact id), cached."""
    return load_run_cached(str(base / run_id), summary_stamp(base / run_id))
