"""`accel.local_sgd.LocalSGD` on 2 real ranks: weights drift apart between averages and agree after."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def train_with_local_sgd(local_sgd_steps, total_steps):
    import torch

    from accel import Accelerator
    from accel.local_sgd import LocalSGD
    from accel_state import gather_object

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)  # the same start on both ranks
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    data = torch.Generator().manual_seed(100 + accelerator.process_index)  # each rank its own data
    agree_after_step = []
    with LocalSGD(accelerator, model, local_sgd_steps=local_sgd_steps) as local_sgd:
        for _ in range(total_steps):
            x = torch.randn(8, 4, generator=data)
            y = torch.randn(8, 1, generator=data)
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            local_sgd.step()
            weights = torch.cat([p.detach().flatten() for p in model.parameters()])
            everyone = gather_object([weights.tolist()])
            agree_after_step.append(everyone[0] == everyone[1])
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = gather_object([weights.tolist()])
    return {
        "enabled": local_sgd.enabled,
        "agree": agree_after_step,
        "agree_at_exit": everyone[0] == everyone[1],
    }


def test_ranks_agree_every_k_steps_and_differ_between_launch():
    results = run_on_ranks(train_with_local_sgd, 2, 3, 7)
    for got in results:
        assert got["enabled"]
        # Steps 3 and 6 end with an average; the others with each rank's own update.
        assert got["agree"] == [False, False, True, False, False, True, False]
        assert got["agree_at_exit"]  # leaving the block averages once more
