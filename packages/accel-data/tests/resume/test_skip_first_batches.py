"""`skip_first_batches` on one process, posing as rank r of N by passing both explicitly."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler

from accel_data import DataLoaderShard, SkipBatchSampler, prepare_data_loader, skip_first_batches
from accel_state import GradientState


class _Counted(Dataset):
    """A range dataset that records every index it is asked for."""

    def __init__(self, length):
        self.length = length
        self.calls = []

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        self.calls.append(index)
        return index


def _items(batches):
    return [batch.tolist() for batch in batches]


def _shard(size, batch_size, num_processes, rank, split_batches, even_batches, drop_last, dataset=None):
    dataset = _Counted(size) if dataset is None else dataset
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=drop_last)
    return prepare_data_loader(
        loader,
        num_processes=num_processes,
        process_index=rank,
        split_batches=split_batches,
        even_batches=even_batches,
        use_seedable_sampler=True,
        data_seed=17,
    )


def _pass(loader):
    """Items of each batch, and (end_of_dataloader, remainder) as the step of each batch sees them."""
    gradient_state = GradientState()
    items, flags = [], []
    for batch in loader:
        items.append(batch.tolist())
        flags.append((gradient_state.end_of_dataloader, gradient_state.remainder))
    return items, flags


CONFIGS = [
    (n, split, even, drop)
    for n in (1, 2, 3)
    for split in (False, True)
    for even in (True, False)
    for drop in (False, True)
]


@pytest.mark.parametrize(("num_processes", "split_batches", "even_batches", "drop_last"), CONFIGS)
def test_skipped_loader_yields_the_rest_of_the_same_epoch(
    num_processes, split_batches, even_batches, drop_last
):
    batch_size = 2 * num_processes if split_batches else 2
    for size, rank in itertools.product((1, 5, 8, 13), range(num_processes)):
        args = (size, batch_size, num_processes, rank, split_batches, even_batches, drop_last)
        shard = _shard(*args)
        shard.set_epoch(3)
        full, full_flags = _pass(shard)
        next_epoch = _items(shard)
        for skip in range(len(full) + 2):
            case = (*args, skip)
            shard.set_epoch(3)
            skipped = skip_first_batches(shard, skip)
            assert isinstance(skipped, DataLoaderShard), case
            assert len(skipped) == len(full[skip:]), case
            items, flags = _pass(skipped)
            assert items == full[skip:], case
            assert flags == full_flags[skip:], case
            if items:
                assert flags[-1] == (True, shard.remainder), case
            # The skipping loader ended epoch 3 for the original too.
            assert shard.epoch == 4 and skipped.epoch == 4, case
            assert _items(shard) == next_epoch, case


def test_skipped_pass_loads_only_the_batches_it_yields():
    shard = _shard(12, 2, 3, 1, False, True, False)
    list(shard)
    dataset = shard.dataset
    shard.set_epoch(0)
    full = _items(shard)
    dataset.calls.clear()
    shard.set_epoch(0)
    # The padding of the last round comes from the first round, which is skipped: still not loaded.
    assert _items(skip_first_batches(shard, 1)) == full[1:]
    assert sorted(dataset.calls) == sorted(i for batch in full[1:] for i in batch)


@pytest.mark.parametrize("num_processes", [1, 2])
def test_skipping_10000_batches_loads_none_of_them(num_processes):
    # 320k rows and more: 10,000 batches of 32 in all are skipped, two per rank are left.
    batch_size, skip = 32, 10_000 // num_processes
    shard = _shard(batch_size * (10_000 + 2 * num_processes), batch_size, num_processes, 1 % num_processes,
                   False, True, False)  # fmt: skip
    dataset = shard.dataset
    skipped = skip_first_batches(shard, skip)
    assert len(skipped) == 2
    first = next(iter(skipped))
    # One batch yielded and one looked ahead: nothing else was read.
    shard.set_epoch(0)
    order = list(shard.batch_sampler)  # indices only
    assert first.tolist() == order[skip]
    assert dataset.calls == order[skip] + order[skip + 1]


def test_a_second_pass_of_the_skipping_loader_is_a_whole_epoch():
    shard = _shard(10, 2, 1, 0, False, True, False)
    reference = _shard(10, 2, 1, 0, False, True, False)
    epochs = [_items(reference) for _ in range(2)]
    skipped = skip_first_batches(shard, 3)
    assert _items(skipped) == epochs[0][3:]
    assert len(skipped) == 5
    assert _items(skipped) == epochs[1]


def test_skip_of_zero_and_past_the_end():
    shard = _shard(10, 4, 1, 0, False, True, False)
    full = _items(shard)
    shard.set_epoch(0)
    assert _items(skip_first_batches(shard, 0)) == full
    shard.set_epoch(0)
    beyond = skip_first_batches(shard, 7)
    assert len(beyond) == 0
    assert list(beyond) == [] and beyond.end_of_dataloader
    assert shard.epoch == 1


def test_negative_or_non_integer_counts_are_refused():
    shard = _shard(10, 4, 1, 0, False, True, False)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="num_batches must be an integer >= 0"):
            skip_first_batches(shard, bad)


def test_put_on_device_and_kept_arguments_survive():
    loader = prepare_data_loader(
        DataLoader(_Counted(9), batch_size=2, collate_fn=lambda items: {"x": torch.tensor(items)}),
        device=torch.device("meta"),
        put_on_device=True,
    )
    batches = list(skip_first_batches(loader, 2))
    assert [b["x"].device.type for b in batches] == ["meta"] * 3


def test_plain_dataloader_is_skipped_by_index():
    dataset = _Counted(11)
    loader = DataLoader(dataset, batch_size=3, shuffle=True)
    torch.manual_seed(5)
    full = _items(loader)
    dataset.calls.clear()
    torch.manual_seed(5)
    skipped = skip_first_batches(loader, 2)
    assert type(skipped) is DataLoader and isinstance(skipped.batch_sampler, SkipBatchSampler)
    assert len(skipped) == 2
    assert _items(skipped) == full[2:]
    assert sorted(dataset.calls) == sorted(i for batch in full[2:] for i in batch)


def test_plain_dataloader_with_drop_last():
    loader = DataLoader(_Counted(11), batch_size=3, drop_last=True)
    assert _items(skip_first_batches(loader, 1)) == [[3, 4, 5], [6, 7, 8]]
    assert len(skip_first_batches(loader, 1)) == 2


class _Pairs(BatchSampler):
    """A custom batch sampler: pairs of indices, yielded in reverse."""

    def __init__(self, length):
        self.length = length

    def __iter__(self):
        for start in reversed(range(0, self.length, 2)):
            yield list(range(start, min(start + 2, self.length)))

    def __len__(self):
        return (self.length + 1) // 2


@pytest.mark.parametrize("num_processes", [1, 2, 3])
def test_custom_batch_samplers_are_stepped_over_by_whole_batches(num_processes):
    for rank, skip in itertools.product(range(num_processes), range(5)):
        dataset = _Counted(9)
        shard = prepare_data_loader(
            DataLoader(dataset, batch_sampler=_Pairs(9)), num_processes=num_processes, process_index=rank
        )
        full = _items(shard)
        dataset.calls.clear()
        shard.set_epoch(0)
        assert _items(skip_first_batches(shard, skip)) == full[skip:], (num_processes, rank, skip)
        assert len(dataset.calls) == sum(len(batch) for batch in full[skip:])


def test_skip_batch_sampler_alone():
    base = BatchSampler(SequentialSampler(range(10)), 3, False)
    sampler = SkipBatchSampler(base, 2)
    assert list(sampler) == [[6, 7, 8], [9]]
    assert len(sampler) == 2 and sampler.total_length == 4
    assert list(sampler) == [[6, 7, 8], [9]]  # a sampler skips on every pass


class _Stream(IterableDataset):
    def __init__(self, length):
        self.length = length
        self.reads = 0

    def __iter__(self):
        for i in range(self.length):
            self.reads += 1
            yield i


def test_iterable_loaders_are_fast_forwarded():
    stream = _Stream(9)
    plain = skip_first_batches(DataLoader(stream, batch_size=2), 2)
    assert isinstance(plain, DataLoader)
    assert _items(plain) == [[4, 5], [6, 7], [8]]
    prepared = prepare_data_loader(DataLoader(_Stream(9), batch_size=2))
    skipped = skip_first_batches(prepared, 3)
    assert isinstance(skipped, DataLoaderShard)
    items, flags = _pass(skipped)
    assert items == [[6, 7], [8]]
    assert flags[-1][0] is True
    assert prepared.epoch == 1
    assert skipped.dataset.reads == 9  # fast-forwarding reads the skipped items


class _Subclass(DataLoader):
    def __iter__(self):
        for batch in super().__iter__():
            yield batch * 10


def test_unknown_dataloader_subclasses_keep_their_own_iteration():
    loader = _Subclass(_Counted(7), batch_size=2)
    skipped = skip_first_batches(loader, 1)
    assert isinstance(skipped, DataLoader)
    assert _items(skipped) == [[20, 30], [40, 50], [60]]
    assert len(skipped) == 3 and skipped.batch_size == 2


@pytest.mark.slow
def test_worker_processes_load_the_rest():
    def make():
        return DataLoader(_Counted(40), batch_size=4, shuffle=True, num_workers=2, persistent_workers=True)

    shard = prepare_data_loader(make(), use_seedable_sampler=True, data_seed=1)
    full = _items(shard)
    shard.set_epoch(0)
    assert _items(skip_first_batches(shard, 7)) == full[7:]
    resumed = prepare_data_loader(make(), use_seedable_sampler=True, data_seed=1)
    resumed.load_state_dict({"epoch": 0, "batches_yielded": 3})
    assert _items(resumed) == full[3:]
    # Both at epoch 1 now, through their own persistent workers.
    assert resumed.epoch == shard.epoch == 1
    assert _items(resumed) == _items(shard)
