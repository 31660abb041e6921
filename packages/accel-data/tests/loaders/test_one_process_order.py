"""On one process a prepared loader yields exactly the plain loader's batches, epoch after epoch.

As in Accelerate: whatever the sampler, with or without `set_seed`, and with
`use_seedable_sampler` False (the default) or True (then a plain RandomSampler is replaced by a
SeedableRandomSampler, so the plain loader to compare with is one over that sampler). The random
generators are left as the plain loader leaves them, so the rest of a training run draws alike.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from accel_data import SeedableRandomSampler, prepare_data_loader

SIZE, BATCH, EPOCHS = 10, 4, 3


class _Chunks:
    """A custom batch sampler (not a BatchSampler): chunks of 3 of what its sampler yields."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __iter__(self):
        chunk = []
        for index in self.sampler:
            chunk.append(index)
            if len(chunk) == 3:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def __len__(self):
        return -(-len(self.sampler) // 3)


class _Shuffled(IterableDataset):
    """A stream that shuffles itself with torch's global generator at every pass."""

    def __iter__(self):
        yield from torch.randperm(SIZE).tolist()


def _data():
    return torch.arange(SIZE)


def _loaders(drop_last):
    """name -> (factory of the loader to prepare, factory of the plain loader it must equal when seedable)."""
    data = _data()

    def shuffled(seedable):
        if seedable:
            return DataLoader(
                data,
                batch_size=BATCH,
                drop_last=drop_last,
                sampler=SeedableRandomSampler(data, data_seed=torch.initial_seed()),
            )
        return DataLoader(data, batch_size=BATCH, shuffle=True, drop_last=drop_last)

    def shuffled_with_generator(seedable):
        generator = torch.Generator().manual_seed(5)
        if seedable:
            sampler = SeedableRandomSampler(data, generator=generator, data_seed=torch.initial_seed())
            return DataLoader(
                data, batch_size=BATCH, drop_last=drop_last, sampler=sampler, generator=generator
            )
        return DataLoader(data, batch_size=BATCH, shuffle=True, drop_last=drop_last, generator=generator)

    def batches_as_sampler(seedable):
        inner = (
            SeedableRandomSampler(data, data_seed=torch.initial_seed()) if seedable else RandomSampler(data)
        )
        return DataLoader(data, sampler=BatchSampler(inner, BATCH, drop_last), batch_size=None)

    def custom_batch_sampler(seedable):
        inner = (
            SeedableRandomSampler(data, data_seed=torch.initial_seed()) if seedable else RandomSampler(data)
        )
        return DataLoader(data, batch_sampler=_Chunks(inner))

    return {
        "sequential": lambda seedable: DataLoader(
            data, batch_size=BATCH, sampler=SequentialSampler(data), drop_last=drop_last
        ),
        "random": shuffled,
        "random_with_generator": shuffled_with_generator,
        "seedable": lambda seedable: DataLoader(
            data, batch_size=BATCH, drop_last=drop_last, sampler=SeedableRandomSampler(data, data_seed=11)
        ),
        "batch_sampler_as_sampler": batches_as_sampler,
        "custom_batch_sampler": custom_batch_sampler,
        "weighted": lambda seedable: DataLoader(
            data,
            batch_size=BATCH,
            drop_last=drop_last,
            sampler=WeightedRandomSampler(torch.linspace(0.1, 1.0, SIZE).tolist(), 12),
        ),
        "subset": lambda seedable: DataLoader(
            data,
            batch_size=BATCH,
            drop_last=drop_last,
            sampler=SubsetRandomSampler(list(range(0, SIZE, 2)) * 2),
        ),
        "iterable": lambda seedable: DataLoader(_Shuffled(), batch_size=BATCH, drop_last=drop_last),
    }


KINDS = list(_loaders(False))


def _run(loader):
    """Every batch of EPOCHS passes, and a draw from the global generator after them."""
    epochs = [[batch.tolist() for batch in loader] for _ in range(EPOCHS)]
    return epochs, torch.rand(3).tolist()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("seeded", [True, False])
@pytest.mark.parametrize("use_seedable_sampler", [False, True])
def test_prepared_loader_yields_the_plain_loaders_batches(kind, drop_last, seeded, use_seedable_sampler):
    factories = _loaders(drop_last)[kind]
    if seeded:
        torch.manual_seed(1234)
    else:
        torch.seed()  # a seed nobody chose, as a script without set_seed has
    start = torch.get_rng_state()
    expected = _run(factories(use_seedable_sampler))
    torch.set_rng_state(start)
    prepared = prepare_data_loader(factories(False), use_seedable_sampler=use_seedable_sampler)
    assert _run(prepared) == expected
    assert expected[0][0] != expected[0][1] or kind == "sequential", "each epoch should shuffle anew"


def test_seedable_sampler_true_replaces_torchs_shuffle():
    # With use_seedable_sampler=True (not the default) the order is the seedable sampler's, not torch's.
    torch.manual_seed(3)
    plain = [batch.tolist() for batch in DataLoader(_data(), batch_size=BATCH, shuffle=True)]
    torch.manual_seed(3)
    loader = prepare_data_loader(
        DataLoader(_data(), batch_size=BATCH, shuffle=True), use_seedable_sampler=True
    )
    assert [batch.tolist() for batch in loader] != plain
    torch.manual_seed(3)
    default = prepare_data_loader(DataLoader(_data(), batch_size=BATCH, shuffle=True))
    assert [batch.tolist() for batch in default] == plain
