"""`BatchSamplerShard` over a grid of sizes: lengths, coverage, and independence of the process count."""

from __future__ import annotations

import itertools

import pytest
from torch.utils.data import BatchSampler, SequentialSampler

from accel_data import BatchSamplerShard, ShardingError


def _shards(length, batch_size, drop_last, num_processes, split_batches, even_batches):
    sampler = BatchSampler(SequentialSampler(range(length)), batch_size, drop_last)
    return [
        BatchSamplerShard(
            sampler, num_processes, rank, split_batches=split_batches, even_batches=even_batches
        )
        for rank in range(num_processes)
    ]


def _check(length, batch_size, drop_last, num_processes, split_batches, even_batches):
    shards = _shards(length, batch_size, drop_last, num_processes, split_batches, even_batches)
    one_process = [i for batch in BatchSampler(range(length), batch_size, drop_last) for i in batch]
    per_rank = [list(shard) for shard in shards]
    where = (length, batch_size, drop_last, num_processes, split_batches, even_batches)

    for shard, batches in zip(shards, per_rank, strict=True):
        assert len(shard) == len(batches), where
        if even_batches and num_processes > 1:  # one process is never padded
            assert all(len(b) == shard.per_process_batch_size for b in batches), where
    if even_batches:
        assert len({len(b) for b in per_rank}) == 1, where

    # Step by step, in rank order: the 1-process order, then (only) padding.
    steps = max(len(b) for b in per_rank)
    combined = [i for s in range(steps) for batches in per_rank if s < len(batches) for i in batches[s]]
    assert combined[: len(one_process)] == one_process[: len(combined)], where
    assert set(combined) <= set(range(length)), where
    if not drop_last:
        assert combined[:length] == list(range(length)), where
        if not even_batches:
            assert combined == one_process, where


def test_grid_of_shards():
    checked = 0
    for num_processes, length, batch_size, split_batches, even_batches, drop_last in itertools.product(
        range(1, 5), range(1, 41), range(1, 8), (False, True), (False, True), (False, True)
    ):
        if split_batches and num_processes > 1 and batch_size % num_processes:
            with pytest.raises(ShardingError, match=f"batch_size={batch_size}"):
                _shards(length, batch_size, drop_last, num_processes, split_batches, even_batches)
            continue
        _check(length, batch_size, drop_last, num_processes, split_batches, even_batches)
        checked += 1
    assert checked > 5000


def test_round_robin_deals_batches_and_pads_from_the_start():
    shards = _shards(10, 2, False, 3, False, True)
    assert [list(s) for s in shards] == [
        [[0, 1], [6, 7]],
        [[2, 3], [8, 9]],
        [[4, 5], [0, 1]],
    ]


def test_split_batches_slices_each_batch():
    shards = _shards(7, 4, False, 2, True, True)
    assert [list(s) for s in shards] == [[[0, 1], [4, 5]], [[2, 3], [6, 0]]]
    assert shards[0].global_batch_size == 4 and shards[0].per_process_batch_size == 2


def test_uneven_batches_without_padding():
    shards = _shards(10, 2, False, 3, False, False)
    assert [list(s) for s in shards] == [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5]]]
    assert [len(s) for s in shards] == [2, 2, 1]


def test_drop_last_drops_the_incomplete_round():
    shards = _shards(10, 2, True, 3, False, True)
    assert [list(s) for s in shards] == [[[0, 1]], [[2, 3]], [[4, 5]]]


def test_split_batches_needs_a_divisible_batch_size():
    with pytest.raises(ShardingError, match="divisible by the 2 processes"):
        _shards(10, 3, False, 2, True, True)


def test_split_batches_needs_a_batch_size():
    with pytest.raises(ShardingError, match="batch_size attribute"):
        BatchSamplerShard([[0, 1], [2, 3]], num_processes=2, split_batches=True)


def test_batch_sampler_without_batch_size_pads_with_whole_batches():
    batches = [[0, 1], [2, 3], [4]]
    shards = [BatchSamplerShard(batches, 2, rank) for rank in range(2)]
    assert [list(s) for s in shards] == [[[0, 1], [4]], [[2, 3], [0, 1]]]
    assert [len(s) for s in shards] == [2, 2]
