"""`optimizer.zero_grad()` inside `accumulate()`: either loop order trains like one big batch.

A plain PyTorch loop calls `zero_grad()` first. On the last micro-step of a window the step is a
sync step, so a wrapper that cleared on every sync step wiped the k-1 accumulated gradients just
before the last backward, training on a quarter of the data with k = 4.
"""

from __future__ import annotations

import pytest
import torch

from accel import Accelerator
from accel.testing import train_small_regression


def _train(batch_size, accumulation_steps, zero_grad_first, epochs=3):
    accelerator = Accelerator(gradient_accumulation_steps=accumulation_steps)
    model, final_loss = train_small_regression(
        accelerator, batch_size, epochs=epochs, zero_grad_first=zero_grad_first
    )
    return model.state_dict(), final_loss


@pytest.mark.parametrize("zero_grad_first", [True, False], ids=["zero_grad-first", "zero_grad-after-step"])
def test_accumulating_four_batches_of_8_matches_one_batch_of_32(zero_grad_first):
    big, big_loss = _train(32, 1, zero_grad_first)
    small, small_loss = _train(8, 4, zero_grad_first)
    for name in big:
        torch.testing.assert_close(small[name], big[name], rtol=0, atol=1e-5, msg=name)
    assert small_loss == pytest.approx(big_loss, rel=1e-4)


def test_zero_grad_first_without_accumulation_still_clears_every_step():
    accelerator = Accelerator()
    model = torch.nn.Linear(1, 1, bias=False)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0))
    grads = []
    for _ in range(3):
        optimizer.zero_grad()
        accelerator.backward(model(torch.ones(1, 1)).sum())
        grads.append(model.weight.grad.item())
        optimizer.step()
    assert grads == [1.0, 1.0, 1.0]


def test_zero_grad_inside_a_window_keeps_the_pending_gradients():
    accelerator = Accelerator(gradient_accumulation_steps=3)
    model = torch.nn.Linear(1, 1, bias=False)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0))
    seen = []
    for _ in range(6):
        with accelerator.accumulate(model):
            optimizer.zero_grad()  # first, as in a plain PyTorch loop
            accelerator.backward(model(torch.ones(1, 1)).sum())
            seen.append(round(model.weight.grad.item(), 6))
            optimizer.step()
    # Each micro-step adds 1/3; a new window starts from zero once the step applied the last one.
    assert seen == pytest.approx([1 / 3, 2 / 3, 1.0, 1 / 3, 2 / 3, 1.0])
