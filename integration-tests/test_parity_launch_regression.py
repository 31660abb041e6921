"""The example loop gives the same weights on 1 process and on 2, with and without split_batches."""

from __future__ import annotations

import pytest
import torch

from accel_launch.testing.ranks import launch_script

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5


def _train(script, tmp_path, name: str, num_processes: int, *args: str) -> dict[str, torch.Tensor]:
    weights = tmp_path / f"{name}.pt"
    result = launch_script(
        script, num_processes, ["--seed", "7", "--epochs", "3", "--save_weights", weights, *args], timeout=240
    )
    assert result.returncode == 0, result.stderr
    assert "epoch 2: loss" in result.stdout
    return torch.load(weights, weights_only=True)


def test_same_weights_on_one_and_two_processes_launch(example_script, tmp_path):
    one = _train(example_script, tmp_path, "one", 1, "--batch_size", "32")
    two = _train(example_script, tmp_path, "two", 2, "--batch_size", "16")
    split = _train(example_script, tmp_path, "split", 2, "--batch_size", "32", "--split_batches")
    for key, expected in one.items():
        assert torch.allclose(two[key], expected, atol=TOLERANCE), (key, two[key], expected)
        assert torch.allclose(split[key], expected, atol=TOLERANCE), (key, split[key], expected)
    # The run really trained: the regression's true weight is 2 and bias 3.
    assert abs(one["weight"].item() - 2) < 0.1 and abs(one["bias"].item() - 3) < 0.1
