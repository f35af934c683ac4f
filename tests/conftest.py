"""Shared fixtures. Tests never reach a hub: the datasets library is forced offline."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # on sys.path through pyproject.toml (pytest pythonpath)
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the real CPU vLLM servers the tests start skip torch.compile's warm-up (--enforce-eager):
# bench/vllm_cpu_common.py's EAGER_ENV; bench/vllm_startup.py measures what it saves
os.environ.setdefault("SCHEDLAB_VLLM_EAGER", "1")


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    folder.mkdir()
    return folder


@pytest.fixture(autouse=True)
def _restore_main_module():
    """Streamlit's AppTest leaves the page it ran as ``sys.modules['__main__']``; a process pool
    started later (studies spawn their workers) would import and run that page in every worker.
    Each test starts and ends with the real main module."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny random Llama the real-CPU-vLLM tests serve, built once per session (skips the test
    without ``SCHEDLAB_VLLM_PYTHON``)."""
    from bench.vllm_cpu_common import tiny_model as build
    from tests.real_vllm import VLLM_PYTHON

    if not VLLM_PYTHON:
        pytest.skip("set SCHEDLAB_VLLM_PYTHON to a Python with vllm-cpu")
    folder = build(tmp_path_factory.mktemp("tiny-llama"))
    assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    return folder


#: Fixtures that start a real engine or a real browser: a test using one is end-to-end wherever
#: its file lives (a module may mix unit tests of an in-engine policy with its real-vLLM run).
E2E_FIXTURES = {"tiny_model", "browser", "dashboard"}

#: pytest-xdist groups (``--dist loadgroup``, pyproject.toml): every test that starts a real CPU
#: vLLM runs on one worker, one after another (two vLLM servers at once on 2 cores would starve
#: each other and the timings some tests check); the browser tests run on one worker too and share
#: its dashboard server (tests/e2e/test_browser.py's module fixtures). Everything else is spread
#: over the workers as they free up.
VLLM_GROUP, BROWSER_GROUP = "real-vllm", "browser"


def _starts_real_vllm(item) -> bool:
    """The test starts the real CPU vLLM: it uses the ``tiny_model`` fixture, or carries
    tests/real_vllm.py's ``needs_vllm`` mark."""
    from tests.real_vllm import needs_vllm

    if "tiny_model" in getattr(item, "fixturenames", ()):
        return True
    return any(mark == needs_vllm.mark for mark in item.iter_markers("skipif"))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config, items):
    """Markers from the layout: tests/e2e/ (and any test that starts the real vLLM, uses an E2E
    fixture or carries the ``browser`` mark) ``e2e``, tests/integration/ ``integration``,
    tests/unit/ ``unit``; a test marked ``e2e`` where it lives (a whole program run as a user runs
    it: a bench script, the tutorial, a Ray cluster) keeps that mark alone. ``pytest -m "not e2e"``
    is the quick loop. Real-vLLM and browser tests also get their xdist group
    (:data:`VLLM_GROUP`, :data:`BROWSER_GROUP`)."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        real_vllm = _starts_real_vllm(item)
        browser = item.get_closest_marker("browser") is not None
        if real_vllm or browser or "e2e" in parts or E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.xdist_group(VLLM_GROUP if real_vllm else BROWSER_GROUP))
        elif item.get_closest_marker("e2e") is not None:
            continue  # a whole program marked end-to-end where it lives (pyproject.toml's e2e marker)
        elif "integration" in parts:
            item.add_marker(pytest.mark.integration)
        elif "unit" in parts:
            item.add_marker(pytest.mark.unit)


@pytest.fixture
def server_factory():
    """``make(**options)`` starts a :class:`tests.fakes.fault_server.FaultServer`; all are stopped after the test."""
    from tests.fakes.fault_server import FaultServer

    servers: list[FaultServer] = []

    def make(**options) -> FaultServer:
        server = FaultServer(**options).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()
