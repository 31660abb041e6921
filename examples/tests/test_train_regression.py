"""The basic loop on 2 processes recovers the line it was trained on."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_train_regression_recovers_weight_and_bias_on_two_processes(run_example):
    metrics = run_example("train_regression.py", ["--epochs", "3"])
    # y = 2x + 3 + noise of standard deviation 0.1: the loss cannot go below about 0.01.
    assert abs(metrics["weight"] - 2) < 0.05 and abs(metrics["bias"] - 3) < 0.05, metrics
    assert metrics["loss"] < 0.02, metrics
