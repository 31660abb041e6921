"""Both loop orders of `zero_grad()` inside `accumulate()` train like one big batch, on 2 ranks too."""

from __future__ import annotations

import pytest
import torch

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def train(batch_size, accumulation_steps, zero_grad_first):
    from accel import Accelerator
    from accel.testing import train_small_regression

    accelerator = Accelerator(gradient_accumulation_steps=accumulation_steps)
    model, _ = train_small_regression(accelerator, batch_size, epochs=2, zero_grad_first=zero_grad_first)
    return {k: v.tolist() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("zero_grad_first", [True, False], ids=["zero_grad-first", "zero_grad-after-step"])
def test_two_ranks_accumulating_match_one_big_batch_launch(zero_grad_first):
    (big,) = run_on_ranks(train, 1, 32, 1, zero_grad_first)
    for rank in run_on_ranks(train, 2, 4, 4, zero_grad_first):
        for name, value in big.items():
            torch.testing.assert_close(torch.tensor(rank[name]), torch.tensor(value), rtol=0, atol=1e-5)
