"""Integration tests launch real jobs through `accel launch`; these fixtures say where things are."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    """Keep the environment as the session was started (replaces the accel_state.testing plugin's
    fixture of that name here): the jobs these tests launch inherit it, ACCEL_DEBUG_MODE included."""
    yield


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def example_script() -> Path:
    return REPO_ROOT / "examples" / "train_regression.py"
