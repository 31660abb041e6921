"""Property tests of map-style sharding, computed in-process for every rank (no process group).

For N in 1..4 ranks, dataset sizes 1..200, batch sizes 1..17 and every flag combination:
the ranks together cover every index, a gather_for_metrics-style trim of the last step yields
each index exactly once, ranks agree on the number of batches with even_batches, and the
global order (steps in order, ranks in order within a step) is the 1-process order.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from accel_data import SeedableRandomSampler, prepare_data_loader

SEED = 1234


def _one_process_order(size: int, shuffle: bool) -> list[int]:
    if not shuffle:
        return list(range(size))
    return list(SeedableRandomSampler(range(size), seed=SEED))


def _rank_batches(size, batch_size, n, split, even, drop_last, shuffle):
    loaders, batches = [], []
    for rank in range(n):
        raw = DataLoader(torch.arange(size), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)
        loader = prepare_data_loader(
            raw,
            num_processes=n,
            process_index=rank,
            split_batches=split,
            even_batches=even,
            use_seedable_sampler=True,
            data_seed=SEED,
        )
        loaders.append(loader)
        batches.append([batch.tolist() for batch in loader])
    return loaders, batches


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(
    n=st.integers(1, 4),
    size=st.integers(1, 200),
    per_rank=st.integers(1, 17),
    split=st.booleans(),
    even=st.booleans(),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
)
def test_sharding_properties(n, size, per_rank, split, even, drop_last, shuffle):
    batch_size = per_rank * n if split else per_rank
    loaders, batches = _rank_batches(size, batch_size, n, split, even, drop_last, shuffle)
    stream = _one_process_order(size, shuffle)

    for loader, own in zip(loaders, batches, strict=True):
        assert len(loader) == len(own)
    if even:
        assert len({len(own) for own in batches}) == 1, [len(own) for own in batches]

    # Steps in order, ranks in order within a step: the global order.
    steps = max(len(own) for own in batches)
    global_steps = [[i for own in batches if s < len(own) for i in own[s]] for s in range(steps)]
    flat = [i for step in global_steps for i in step]

    if drop_last:
        assert flat == stream[: len(flat)]
        assert len(flat) == len(set(flat))
        return
    if not even or n == 1:
        assert flat == stream, "every index exactly once, in the 1-process order"
        return
    # Padded: the real samples come first and in order; trimming the last step is exact.
    assert flat[:size] == stream
    remainder = loaders[0].remainder
    kept = [i for step in global_steps[:-1] for i in step] + global_steps[-1][:remainder]
    assert kept == stream
    assert all(loader.total_batch_size == per_rank * n for loader in loaders)


def test_epochs_reshuffle_identically_on_every_rank():
    loaders, _ = _rank_batches(50, 5, 2, False, True, False, True)
    epoch_one = [[b.tolist() for b in loader] for loader in loaders]
    for loader in loaders:
        loader.set_epoch(0)
    epoch_zero = [[b.tolist() for b in loader] for loader in loaders]
    assert epoch_zero != epoch_one
    union = sorted(i for own in epoch_zero for batch in own for i in batch)
    assert union == list(range(50))
