"""Keep app.py's navigation on a server's first visit straight to a page (not a page itself).

Streamlit treats an app whose entry file has a ``pages/`` folder beside it as an old-style
(folder) multipage app until the entry file's ``st.navigation`` has run once in the server
process. A first visit straight to ``/Results`` therefore ran ``pages/2_Results.py`` under the
folder's navigation, and the sidebar read "app, Launch, Results, Demo" until someone opened ``/``.
:func:`use_app_navigation`, called first by every page, switches that mode off and reruns, once
per process, so app.py draws the sidebar (Home, Launch, Results, Demo) and shows the page asked
for. The helper modules live in ``pages/parts/``, a folder Streamlit never lists as pages.
"""

from __future__ import annotations

import streamlit as st

#: Whether this process has switched to app.py's navigation (Streamlit's flag is process-wide too;
#: AppTest resets it before each of its runs, where rerunning again would drop a widget's click).
_switched = {"done": False}


def use_app_navigation() -> None:
    """Rerun under app.py's ``st.navigation`` when Streamlit runs this page as a folder page, the
    first time in this process only."""
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory and not _switched["done"]:
        _switched["done"] = True
        PagesManager.uses_pages_directory = False  # what app.py's st.navigation sets on its first run
        st.rerun()
