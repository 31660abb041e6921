"""The tiny GPT-2 learns the generated grammar on 2 processes: perplexity falls, embeddings stay tied."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_language_model_perplexity_falls_on_two_processes(run_example):
    metrics = run_example(
        "language_model.py", ["--epochs", "1", "--train_sentences", "3000", "--eval_sentences", "500"]
    )
    # Untrained, the model is about uniform over the 39 words; the grammar allows far fewer.
    assert metrics["first_perplexity"] > 25, metrics
    assert metrics["perplexity"] < metrics["first_perplexity"] / 3, metrics
    assert metrics["tied_embeddings"] is True, metrics
