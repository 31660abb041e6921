"""The tiny BERT learns the generated reviews on 2 processes: accuracy and F1 well above chance."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_nlp_classification_beats_chance_on_two_processes(run_example):
    # The default length (3 epochs of 3000 reviews): the model finds the negations during epoch 2.
    metrics = run_example("nlp_classification.py", ["--eval_size", "400"])
    # Two balanced classes (chance: 0.5); 5% of the labels are flipped, so about 0.95 is the ceiling.
    assert metrics["accuracy"] > 0.85, metrics
    assert metrics["f1"] > 0.85, metrics
    assert metrics["epoch"] == 3 and metrics["train_loss"] < 0.4, metrics


def test_nlp_classification_stops_at_max_steps(run_example):
    metrics = run_example(
        "nlp_classification.py", ["--max_steps", "3", "--train_size", "400", "--eval_size", "100"]
    )
    assert metrics["step"] == 3 and metrics["epoch"] == 1, metrics
