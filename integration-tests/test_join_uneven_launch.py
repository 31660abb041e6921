"""even_batches=False with join_uneven_inputs: ranks with fewer batches shadow the others, no hang."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def train_on_uneven_shards(use_override):
    import torch
    from torch.utils.data import DataLoader

    from accel import Accelerator

    accelerator = Accelerator(even_batches=use_override)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    # 10 samples in batches of 4: 3 batches, so rank 0 gets 2 and rank 1 gets 1 without even_batches.
    loader = DataLoader(torch.arange(20.0).view(10, 2), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = 0
    with accelerator.join_uneven_inputs([model], even_batches=False if use_override else None):
        for batch in loader:
            optimizer.zero_grad()
            accelerator.backward(model(batch).pow(2).mean())
            optimizer.step()
            batches += 1
    weights = accelerator.unwrap_model(model).weight.detach().flatten().tolist()
    return {"batches": batches, "weights": weights, "even_after": loader.batch_sampler.even_batches}


def test_join_uneven_inputs_lets_ranks_finish_different_batch_counts_launch():
    for use_override in (False, True):
        first, second = run_on_ranks(train_on_uneven_shards, 2, use_override, timeout=120)
        assert (first["batches"], second["batches"]) == (2, 1)
        assert first["weights"] == second["weights"], "the joined rank kept the model in sync"
        # The override applies only inside the block.
        assert first["even_after"] == use_override


def join_under_another_distributed_type():
    import warnings

    import torch

    from accel import Accelerator, DistributedType

    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(1, 1))
    original = accelerator.state.distributed_type
    # As Accelerate's test_distributed_data_loop does to reach the branch of non-DDP types.
    accelerator.state.distributed_type = DistributedType.FSDP
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with accelerator.join_uneven_inputs([model]) as joined:
                inside = joined
    finally:
        accelerator.state.distributed_type = original
    with warnings.catch_warnings(record=True) as kept:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([model], even_batches=False):
            pass
    return {
        "messages": [str(w.message) for w in caught if issubclass(w.category, UserWarning)],
        "inside": inside,
        "ddp_warnings": [str(w.message) for w in kept if "join_uneven_inputs" in str(w.message)],
    }


def test_join_uneven_inputs_warns_and_does_nothing_under_fsdp_launch():
    for outcome in run_on_ranks(join_under_another_distributed_type, 2, timeout=120):
        assert outcome["inside"] is None, "no Join context was entered"
        assert len(outcome["messages"]) == 1
        message = outcome["messages"][0]
        assert "only supported for multi-GPU" in message and "distributed_type=FSDP" in message
        assert outcome["ddp_warnings"] == [], "multi-CPU DDP joins without a warning"
