"""Shared fixtures: one torch thread per test process, and where the Multi30k files are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from transformer_book.util.env import torch_threads

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_MULTI30K = REPO_ROOT.parent / "shared" / "data" / "multi30k"


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Every test runs torch on one intra-op thread: the models are tiny, and each of the
    two pytest-xdist workers keeps to its own core instead of spin-waiting on the other."""
    with torch_threads(1):
        yield


def _multi30k_dir() -> Path | None:
    configured = os.environ.get("TRANSFORMER_BOOK_DATA")
    for candidate in (Path(configured) if configured else None, SHARED_MULTI30K):
        if candidate is not None and (candidate / "val.de.gz").exists():
            return candidate
    return None


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """The folder holding Multi30k's ``{split}.{lang}.gz`` files (never the network)."""
    found = _multi30k_dir()
    if found is None:
        pytest.skip("Multi30k not found: set TRANSFORMER_BOOK_DATA to the folder with val.de.gz")
    return found
