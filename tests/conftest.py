"""Shared fixtures. Tests never reach a hub: the datasets library is forced offline."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "results"
    folder.mkdir()
    return folder
