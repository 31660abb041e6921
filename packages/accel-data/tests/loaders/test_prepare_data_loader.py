"""`prepare_data_loader` on one process, posing as rank r of N by passing both explicitly.

`data_seed` is always passed with N > 1 so that no rank has to broadcast its seed.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, TensorDataset

from accel_data import (
    DataLoaderShard,
    SeedableRandomSampler,
    ShardingError,
    SynchronizedRandomSampler,
    prepare_data_loader,
)
from accel_state import GradientState


def _dataset(length=10):
    return TensorDataset(torch.arange(length))


def _ranks(loader_factory, num_processes=2, **kwargs):
    return [
        prepare_data_loader(loader_factory(), num_processes=num_processes, process_index=rank, **kwargs)
        for rank in range(num_processes)
    ]


def _items(batches):
    return [batch[0].tolist() for batch in batches]


def _combined(per_rank):
    """Items of every step, ranks concatenated in rank order."""
    return [i for step in zip(*per_rank, strict=True) for batch in step for i in batch]


def test_shuffled_shards_cover_the_dataset_and_follow_the_one_process_order():
    def make():
        return DataLoader(_dataset(10), batch_size=2, shuffle=True)

    ranks = _ranks(make, use_seedable_sampler=True, data_seed=7)
    (single,) = _ranks(make, num_processes=1, use_seedable_sampler=True, data_seed=7)
    for _ in range(2):
        per_rank = [_items(loader) for loader in ranks]
        one_process = [i for batch in _items(single) for i in batch]
        combined = _combined(per_rank)
        assert sorted(combined[:10]) == list(range(10))
        assert combined[:10] == one_process
    assert ranks[0].epoch == 2


def test_epochs_differ():
    ranks = _ranks(
        lambda: DataLoader(_dataset(20), batch_size=2, shuffle=True), use_seedable_sampler=True, data_seed=1
    )
    first = [_items(shard) for shard in ranks]
    second = [_items(shard) for shard in ranks]
    assert first != second
    assert sorted(_combined(second)) == list(range(20))


def test_user_batch_sampler_over_a_random_sampler_is_shuffled_alike_on_every_rank():
    # Each rank is its own process with its own global torch seed; data_seed must decide the order.
    def make():
        dataset = _dataset(20)
        return DataLoader(dataset, batch_sampler=BatchSampler(RandomSampler(dataset), 2, False))

    ranks = _ranks(make, use_seedable_sampler=True, data_seed=5)
    per_rank = []
    for rank, loader in enumerate(ranks):
        torch.manual_seed(100 + rank)
        per_rank.append(_items(loader))
    assert sorted(_combined(per_rank)) == list(range(20))


def test_set_epoch_picks_the_order_deterministically():
    loader = prepare_data_loader(
        DataLoader(_dataset(20), batch_size=4, shuffle=True),
        num_processes=2,
        process_index=1,
        use_seedable_sampler=True,
        data_seed=0,
    )
    loader.set_epoch(3)
    epoch3 = _items(loader)
    loader.set_epoch(4)
    epoch4 = _items(loader)
    loader.set_epoch(3)
    assert _items(loader) == epoch3
    assert epoch4 != epoch3


def test_shuffle_uses_a_seedable_sampler_only_when_asked_to():
    loader = prepare_data_loader(
        DataLoader(_dataset(), batch_size=2, shuffle=True), use_seedable_sampler=True, data_seed=5
    )
    assert isinstance(loader.batch_sampler.batch_sampler.sampler, SeedableRandomSampler)
    assert loader.batch_sampler.batch_sampler.sampler.seed == 5
    # Accelerate's default: torch's own shuffle, drawn by the main process for every rank.
    for kept in (
        prepare_data_loader(DataLoader(_dataset(), batch_size=2, shuffle=True)),
        prepare_data_loader(DataLoader(_dataset(), batch_size=2, shuffle=True), use_seedable_sampler=False),
    ):
        sampler = kept.batch_sampler.batch_sampler.sampler
        assert isinstance(sampler, SynchronizedRandomSampler) and isinstance(sampler, RandomSampler)
        assert not isinstance(sampler, SeedableRandomSampler)


def test_seed_comes_from_the_loaders_generator_without_data_seed():
    def make():
        return DataLoader(
            _dataset(30), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(11)
        )

    assert _items(prepare_data_loader(make())) == _items(prepare_data_loader(make()))


def test_sequential_loader_keeps_its_order():
    (loader,) = _ranks(lambda: DataLoader(_dataset(7), batch_size=3), num_processes=1)
    assert _items(loader) == [[0, 1, 2], [3, 4, 5], [6]]


def test_length_per_process():
    ranks = _ranks(lambda: DataLoader(_dataset(10), batch_size=2), num_processes=2)
    assert [len(loader) for loader in ranks] == [3, 3]
    assert [len(list(loader)) for loader in ranks] == [3, 3]
    uneven = _ranks(lambda: DataLoader(_dataset(10), batch_size=2), num_processes=3, even_batches=False)
    assert [len(loader) for loader in uneven] == [2, 2, 1]


def test_batches_of_a_tensor_dataset_are_tensors():
    (loader,) = _ranks(lambda: DataLoader(_dataset(4), batch_size=2), num_processes=1)
    batch = next(iter(loader))
    assert isinstance(batch, list) and isinstance(batch[0], torch.Tensor)
    assert batch[0].tolist() == [0, 1]


def test_put_on_device_moves_batches():
    loader = prepare_data_loader(
        DataLoader(_dataset(4), batch_size=2), device=torch.device("cpu"), put_on_device=True
    )
    assert all(batch[0].device == torch.device("cpu") for batch in loader)
    on_meta = prepare_data_loader(
        DataLoader(_dataset(4), batch_size=2), device=torch.device("meta"), put_on_device=True
    )
    assert [batch[0].device.type for batch in on_meta] == ["meta", "meta"]
    off = prepare_data_loader(DataLoader(_dataset(4), batch_size=2), device=torch.device("meta"))
    assert [batch[0].device.type for batch in off] == ["cpu", "cpu"]


def test_end_of_dataloader_only_while_processing_the_last_batch():
    loader = prepare_data_loader(DataLoader(_dataset(7), batch_size=2), num_processes=1)
    gradient_state = GradientState()
    seen = []
    for _ in loader:
        assert gradient_state.active_dataloader is loader
        seen.append((loader.end_of_dataloader, gradient_state.end_of_dataloader))
    assert seen == [(False, False)] * 3 + [(True, True)]
    assert gradient_state.active_dataloader is None


def test_end_of_dataloader_resets_on_the_next_pass():
    loader = prepare_data_loader(DataLoader(_dataset(4), batch_size=2), num_processes=2, process_index=0)
    list(loader)
    assert loader.end_of_dataloader
    flags = [loader.end_of_dataloader for _ in loader]
    assert flags == [True]  # one batch per rank: it is the last
    loader2 = prepare_data_loader(DataLoader(_dataset(8), batch_size=2), num_processes=2, process_index=0)
    list(loader2)
    assert [loader2.end_of_dataloader for _ in loader2] == [False, True]


def test_remainder_counts_real_items_of_the_last_global_batch():
    make = lambda: DataLoader(_dataset(10), batch_size=4)  # noqa: E731
    assert [loader.remainder for loader in _ranks(make)] == [2, 2]
    assert _ranks(make, num_processes=1)[0].remainder == -1
    assert _ranks(lambda: DataLoader(_dataset(16), batch_size=4))[0].remainder == 8
    assert _ranks(make, even_batches=False)[0].remainder == -1
    assert _ranks(make)[0].total_batch_size == 8
    assert _ranks(make, split_batches=True)[0].total_batch_size == 4


class _Records(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, index):
        return {"x": torch.tensor([float(index)]), "text": f"item {index}"}


def test_dict_batches_keep_their_strings():
    loader = prepare_data_loader(
        DataLoader(_Records(), batch_size=2), device=torch.device("meta"), put_on_device=True
    )
    batch = next(iter(loader))
    assert batch["text"] == ["item 0", "item 1"]
    assert batch["x"].device.type == "meta"


def test_collate_fn_returning_strings_is_kept():
    loader = prepare_data_loader(
        DataLoader(_dataset(5), batch_size=2, collate_fn=lambda items: [f"#{int(x[0])}" for x in items]),
        num_processes=2,
        process_index=1,
        put_on_device=True,
    )
    assert list(loader) == [["#2", "#3"], ["#1", "#2"]]  # [4] padded with 0, then 1, 2


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(range(5))


def test_iterable_dataset_on_one_process_is_batched():
    loader = prepare_data_loader(DataLoader(_Stream(), batch_size=2))
    assert isinstance(loader, DataLoaderShard)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4]]


def test_iterable_dataset_across_processes_is_refused():
    with pytest.raises(ShardingError, match="_Stream is an IterableDataset"):
        prepare_data_loader(DataLoader(_Stream(), batch_size=2), num_processes=2, process_index=0)


def test_loader_without_automatic_batching_is_refused():
    with pytest.raises(ShardingError, match="batch_size=None"):
        prepare_data_loader(DataLoader(_dataset(), batch_size=None))


def test_unknown_rng_type_is_refused():
    with pytest.raises(ValueError, match="rng_types"):
        prepare_data_loader(DataLoader(_dataset(), batch_size=2), rng_types=["dice"])


def test_rng_types_on_one_process_leave_generators_as_a_plain_loader_does():
    torch.manual_seed(3)
    list(DataLoader(_dataset(4), batch_size=2))
    expected = torch.rand(1)
    torch.manual_seed(3)
    list(prepare_data_loader(DataLoader(_dataset(4), batch_size=2), rng_types=["torch", "python"]))
    assert torch.equal(torch.rand(1), expected)


class _ListIndexed(Dataset):
    """Answers a list of indices with one batch, as Hugging Face datasets do."""

    def __init__(self, length):
        self.data = torch.arange(length)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, index):
        return {"x": self.data[index]}


def _batch_sampler_as_sampler(length=16, shuffle=True):
    dataset = _ListIndexed(length)
    order = RandomSampler(dataset) if shuffle else range(length)
    return DataLoader(dataset, sampler=BatchSampler(order, batch_size=4, drop_last=False), batch_size=None)


def test_batch_sampler_given_as_sampler_is_sharded_like_its_one_process_order():
    one = prepare_data_loader(
        _batch_sampler_as_sampler(), num_processes=1, process_index=0, use_seedable_sampler=True, data_seed=5
    )
    expected = [batch["x"].tolist() for batch in one]
    assert sorted(i for batch in expected for i in batch) == list(range(16))
    assert all(len(batch) == 4 for batch in expected)
    ranks = _ranks(_batch_sampler_as_sampler, use_seedable_sampler=True, data_seed=5)
    per_rank = [[batch["x"].tolist() for batch in loader] for loader in ranks]
    assert [len(loader) for loader in ranks] == [2, 2]
    assert [batch for step in zip(*per_rank, strict=True) for batch in step] == expected


def test_batch_sampler_given_as_sampler_keeps_epochs_and_skips():
    from accel_data import skip_first_batches

    loader = prepare_data_loader(
        _batch_sampler_as_sampler(), num_processes=2, process_index=1, use_seedable_sampler=True, data_seed=5
    )
    epoch0 = [batch["x"].tolist() for batch in loader]
    epoch1 = [batch["x"].tolist() for batch in loader]
    assert epoch0 != epoch1  # the loader moved the shuffle on to epoch 1
    loader.set_epoch(1)
    assert [batch["x"].tolist() for batch in skip_first_batches(loader, 1)] == epoch1[1:]


def test_batch_sampler_given_as_sampler_without_shuffle_is_split_by_rank():
    ranks = _ranks(lambda: _batch_sampler_as_sampler(shuffle=False))
    assert [[batch["x"].tolist() for batch in loader] for loader in ranks] == [
        [[0, 1, 2, 3], [8, 9, 10, 11]],
        [[4, 5, 6, 7], [12, 13, 14, 15]],
    ]
