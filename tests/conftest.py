"""Shared fixtures. Tests never reach a hub: the datasets library is forced offline."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # on sys.path through pyproject.toml (pytest pythonpath)
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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


def pytest_collection_modifyitems(config, items):
    """Markers from the layout: tests/e2e/ (and any test using an E2E fixture) ``e2e``,
    tests/integration/ ``integration``, tests/unit/ ``unit``; ``pytest -m "not e2e"`` is the
    quick loop."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "e2e" in parts or E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
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
