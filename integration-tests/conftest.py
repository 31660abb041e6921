"""Integration tests launch real jobs through `accel launch`; these fixtures say where things are."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def example_script() -> Path:
    return REPO_ROOT / "examples" / "train_regression.py"
