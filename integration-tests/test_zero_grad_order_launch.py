"""Both loop orders of `zero_grad()` inside `accumulate()` train like one big batch, on 2 ranks too."""

from __future__ import annotations

import pytest
import torch

from accel_launch.testing import run_on_ranks

pytestmark = pytest.mark.slow


def train(batch_size, accumulation_steps, zero_grad_first):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accel import Accelerator, set_seed
    from accel.testing import train_steps

    accelerator = Accelerator(gradient_accumulation_steps=accumulation_steps)
    set_seed(3)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for _ in range(2):
        train_steps(accelerator, model, optimizer, loader, zero_grad_first=zero_grad_first)
    return {k: v.tolist() for k, v in accelerator.unwrap_model(model).state_dict().items()}


@pytest.mark.parametrize("zero_grad_first", [True, False], ids=["zero_grad-first", "zero_grad-after-step"])
def test_two_ranks_accumulating_match_one_big_batch_launch(zero_grad_first):
    (big,) = run_on_ranks(train, 1, 32, 1, zero_grad_first)
    for rank in run_on_ranks(train, 2, 4, 4, zero_grad_first):
        for name, value in big.items():
            torch.testing.assert_close(torch.tensor(rank[name]), torch.tensor(value), rtol=0, atol=1e-5)
