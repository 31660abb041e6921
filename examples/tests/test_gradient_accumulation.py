"""Accumulating 4 micro-batches on each of 2 processes gives the weights of one batch 8 times larger."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_accumulation_matches_one_large_batch_on_two_processes(run_example):
    metrics = run_example(
        "gradient_accumulation.py",
        [
            "--gradient_accumulation_steps",
            "4",
            "--batch_size",
            "8",
            "--steps_per_epoch",
            "30",
            "--epochs",
            "3",
        ],
    )
    assert metrics["samples_per_step"] == 8 * 4 * 2, metrics
    # fp32 sums in a different order: equal to rounding, far below what one extra or missing step changes.
    assert metrics["max_weight_difference"] < 1e-5, metrics
    assert abs(metrics["loss"] - metrics["reference_loss"]) < 1e-5, metrics
    assert metrics["loss"] < 0.8 * metrics["initial_loss"], metrics


def test_accumulation_with_uneven_micro_batches_still_matches(run_example):
    # 3 samples per micro-batch, 3 micro-batches: a step of 18 samples, nothing divides evenly.
    metrics = run_example(
        "gradient_accumulation.py",
        [
            "--gradient_accumulation_steps",
            "3",
            "--batch_size",
            "3",
            "--steps_per_epoch",
            "20",
            "--epochs",
            "2",
        ],
    )
    assert metrics["samples_per_step"] == 18, metrics
    assert metrics["max_weight_difference"] < 1e-5, metrics
