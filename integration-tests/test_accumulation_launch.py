"""Gradient accumulation: same weights as one big batch, and no all-reduce on non-sync steps."""

from __future__ import annotations

import pytest
import torch

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5


def train_with_accumulation(batch_size, accumulation_steps, epochs=2):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accel import Accelerator, set_seed
    from accel.testing import train_steps

    accelerator = Accelerator(gradient_accumulation_steps=accumulation_steps)
    set_seed(3)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(96, 4, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(96, 1, generator=generator)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    syncs = []
    for _ in range(epochs):
        syncs += [step.sync_gradients for step in train_steps(accelerator, model, optimizer, loader)]
    state = accelerator.unwrap_model(model).state_dict()
    return {"weights": {k: v.tolist() for k, v in state.items()}, "syncs": syncs}


def _close(a, b):
    return all(torch.allclose(torch.tensor(a[k]), torch.tensor(b[k]), atol=TOLERANCE) for k in a)


def test_accumulation_matches_one_big_batch_launch():
    (big,) = run_on_ranks(train_with_accumulation, 1, 32, 1)
    (small,) = run_on_ranks(train_with_accumulation, 1, 8, 4)
    two = run_on_ranks(train_with_accumulation, 2, 4, 4)
    assert small["syncs"][:4] == [False, False, False, True]
    assert _close(small["weights"], big["weights"])
    for rank in two:
        assert _close(rank["weights"], big["weights"])


def count_all_reduces(accumulation_steps):
    import torch

    from accel import Accelerator
    from accel.testing import all_reduces_per_step

    accelerator = Accelerator(gradient_accumulation_steps=accumulation_steps)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.randn(48, 4), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    return all_reduces_per_step(accelerator, model, optimizer, loader)


def test_no_all_reduce_on_non_sync_steps_launch():
    for per_step in run_on_ranks(count_all_reduces, 2, 3):
        assert len(per_step) == 6
        for sync, reduces in per_step:
            assert (reduces > 0) == sync, per_step
        assert [sync for sync, _ in per_step] == [False, False, True, False, False, True]


def two_models_accumulating():
    import torch

    from accel import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=2)
    torch.manual_seed(0)
    first, second = accelerator.prepare(torch.nn.Linear(4, 1), torch.nn.Linear(4, 1))
    x = torch.full((2, 4), float(accelerator.process_index + 1))  # rank 0 ones, rank 1 twos
    seen = []
    for _ in range(2):
        with accelerator.accumulate(first, second):
            accelerator.backward(first(x).sum() + second(x).sum())
            weights = (first.module.weight.grad[0, 0].item(), second.module.weight.grad[0, 0].item())
            seen.append([accelerator.sync_gradients, *weights])
    return seen


def test_accumulate_over_two_models_keeps_both_local_until_the_sync_step_launch():
    rank0, rank1 = run_on_ranks(two_models_accumulating, 2)
    # The first step stays local on every model (each rank its own half-loss gradient), the
    # second all-reduces both: the mean of 2 and 4 on either rank.
    assert rank0 == [[False, 1.0, 1.0], [True, 3.0, 3.0]]
    assert rank1 == [[False, 2.0, 2.0], [True, 3.0, 3.0]]
