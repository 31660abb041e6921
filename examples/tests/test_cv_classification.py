"""The small CNN tells the four generated shapes apart on 2 processes, well above chance."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_cv_classification_beats_chance_on_two_processes(run_example):
    metrics = run_example(
        "cv_classification.py", ["--epochs", "2", "--train_size", "2000", "--eval_size", "400"]
    )
    # Four balanced classes: chance is 0.25.
    assert metrics["accuracy"] > 0.7, metrics
    assert metrics["epoch"] == 2, metrics
