"""Iterable datasets on one process: `IterableDatasetShard` posing as rank r of N, the dispatch plan
for N ranks, and `DataLoaderDispatcher` itself on one process.

The property checked throughout: the ranks' batches of a step, concatenated in rank order, are the
stream's next items, then (on the last step only) padding; cutting the last step to `remainder`
gives every item exactly once.
"""

from __future__ import annotations

import itertools
from collections import namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from accel_data import (
    DataLoaderDispatcher,
    DataLoaderShard,
    IterableDatasetShard,
    ShardingError,
    prepare_data_loader,
)
from accel_data.loaders.dispatcher import plan_dispatch
from accel_data.sharding.batch_rows import concat_rows, count_rows, take_rows
from accel_state import GradientState

GRID = itertools.product(
    range(1, 5), range(0, 61), range(1, 8), (False, True), (False, True), (False, True)
)  # num_processes, length, batch_size, split_batches, even_batches, drop_last


class Stream(IterableDataset):
    """0, 1, ..., length-1; records the epochs it was given."""

    def __init__(self, length):
        self.length = length
        self.epochs = []

    def __iter__(self):
        return iter(range(self.length))

    def __len__(self):
        return self.length

    def set_epoch(self, epoch):
        self.epochs.append(epoch)


class Unsized(IterableDataset):
    def __init__(self, length):
        self.length = length

    def __iter__(self):
        return iter(range(self.length))


def _expected(length, window, drop_last):
    """The real items a pass covers: everything, or only the full windows with drop_last."""
    return list(range(length - length % window if drop_last else length))


def _by_step(per_rank):
    """The ranks' batches of each step, in rank order (a rank that has run out adds nothing)."""
    steps = max((len(batches) for batches in per_rank), default=0)
    return [[batches[s] for batches in per_rank if s < len(batches)] for s in range(steps)]


def _gathered(per_rank, remainder):
    """What gather_for_metrics returns over the pass: all steps, the last cut to `remainder`."""
    steps = _by_step(per_rank)
    items = [i for step in steps[:-1] for batch in step for i in batch]
    last = [i for batch in steps[-1] for i in batch] if steps else []
    return items + (last[:remainder] if remainder >= 0 else last)


def _shard_batches(shard):
    items = list(shard)
    share = shard.per_process_batch_size
    return [items[i : i + share] for i in range(0, len(items), share)]


def _shards(num_processes, length, batch_size, split_batches, even_batches, drop_last, dataset=None):
    return [
        IterableDatasetShard(
            Stream(length) if dataset is None else dataset,
            batch_size=batch_size,
            drop_last=drop_last,
            num_processes=num_processes,
            process_index=rank,
            split_batches=split_batches,
            even_batches=even_batches,
        )
        for rank in range(num_processes)
    ]


def _plan(num_processes, length, batch_size, split_batches, even_batches, drop_last, collate=None):
    size = batch_size if split_batches else batch_size * num_processes
    loader = DataLoader(Stream(length), batch_size=size, drop_last=drop_last, collate_fn=collate)
    return list(plan_dispatch(loader, num_processes, size, even_batches=even_batches, drop_last=drop_last))


def _plan_batches(steps, rank):
    return [m.batch.tolist() for step in steps for m in [step[rank]] if m.has_batch]


@pytest.mark.slow
def test_shards_and_dispatch_plan_agree_over_a_grid():
    checked = 0
    for n, length, batch_size, split, even, drop_last in GRID:
        if split and batch_size % n:
            with pytest.raises(ShardingError, match=f"batch_size={batch_size}"):
                _shards(n, length, batch_size, split, even, drop_last)
            continue
        where = (n, length, batch_size, split, even, drop_last)
        shards = _shards(n, length, batch_size, split, even, drop_last)
        per_rank = [_shard_batches(shard) for shard in shards]
        window = shards[0].window_size
        remainder = shards[0].remainder
        assert {shard.remainder for shard in shards} == {remainder}, where

        for shard, batches in zip(shards, per_rank, strict=True):
            assert len(shard) == sum(len(b) for b in batches), where
        if even or n == 1 or drop_last:
            assert len({len(batches) for batches in per_rank}) == 1, where
        if even and n > 1:
            assert all(len(b) == shards[0].per_process_batch_size for bs in per_rank for b in bs), where

        expected = _expected(length, window, drop_last)
        combined = [i for step in _by_step(per_rank) for batch in step for i in batch]
        assert combined[: len(expected)] == expected, where
        # Padding comes only after every real item, and only from the first window.
        assert set(combined[len(expected) :]) <= set(range(min(window, length))), where
        padded = len(combined) > len(expected)
        assert remainder == (length % window if padded else -1), where
        assert _gathered(per_rank, remainder) == expected, where

        # The main process dispatching the same stream hands every rank the same batches.
        steps = _plan(n, length, batch_size, split, even, drop_last)
        assert [_plan_batches(steps, rank) for rank in range(n)] == per_rank, where
        assert {m.remainder for m in steps[-1]} == {remainder}, where
        assert all(m.final for m in steps[-1]) and not any(m.final for s in steps[:-1] for m in s), where
        for rank in range(n):
            flags = [m.last_batch for step in steps for m in [step[rank]] if m.has_batch]
            assert flags == [False] * (len(flags) - 1) + [True] * bool(flags), where
        checked += 1
    assert checked > 10000


def _loader_pass(loader):
    """Batches of one pass with (loader's, GradientState's) end flag and remainder at each step."""
    state = GradientState()
    seen = []
    for batch in loader:
        assert state.active_dataloader is loader
        seen.append((batch.tolist(), loader.end_of_dataloader, state.end_of_dataloader, state.remainder))
    assert not state.in_dataloader
    return seen


def test_prepared_iterable_shards_end_and_remainder_let_gathering_keep_each_item_once():
    for n, length, batch_size, even, drop_last in itertools.product(
        range(2, 5), (0, 1, 5, 12, 13, 29), (1, 3, 4), (False, True), (False, True)
    ):
        where = (n, length, batch_size, even, drop_last)
        loaders = [
            prepare_data_loader(
                DataLoader(Stream(length), batch_size=batch_size, drop_last=drop_last),
                num_processes=n,
                process_index=rank,
                even_batches=even,
                dispatch_batches=False,
            )
            for rank in range(n)
        ]
        for _ in range(2):
            passes = [_loader_pass(loader) for loader in loaders]
            for seen in passes:
                ends = [end for _, end, _, _ in seen]
                assert ends == [False] * (len(seen) - 1) + [True] * bool(seen), where
                assert all(end == state_end for _, end, state_end, _ in seen), where
                assert all(r == -1 for _, end, _, r in seen if not end), where
            remainders = {seen[-1][3] for seen in passes if seen}
            assert len(remainders) <= 1, where
            remainder = remainders.pop() if remainders else -1
            per_rank = [[batch for batch, *_ in seen] for seen in passes]
            expected = _expected(length, batch_size * n, drop_last)
            assert _gathered(per_rank, remainder) == expected, where


def test_each_shard_loader_forwards_the_epoch_to_the_dataset():
    dataset = Stream(10)
    loader = prepare_data_loader(
        DataLoader(dataset, batch_size=2), num_processes=2, process_index=1, dispatch_batches=False
    )
    for _ in range(2):
        list(loader)
    loader.set_epoch(7)
    assert dataset.epochs[:2] == [0, 1] and dataset.epochs[-1] == 7


def test_split_batches_slices_each_batch():
    loaders = [
        prepare_data_loader(
            DataLoader(Stream(10), batch_size=4),
            num_processes=2,
            process_index=rank,
            split_batches=True,
            dispatch_batches=False,
        )
        for rank in range(2)
    ]
    assert [b.tolist() for b in loaders[0]] == [[0, 1], [4, 5], [8, 9]]
    assert [b.tolist() for b in loaders[1]] == [[2, 3], [6, 7], [0, 1]]
    assert loaders[1].remainder == 2 and loaders[1].total_batch_size == 4


def test_shard_of_an_unsized_stream_has_no_len():
    (shard,) = _shards(1, 5, 2, False, True, False, dataset=Unsized(5))
    with pytest.raises(TypeError):
        len(shard)
    assert list(shard) == [0, 1, 2, 3, 4]


Pair = namedtuple("Pair", ["x", "label"])


def _structured(samples):
    ids = torch.tensor(samples)
    return {"pair": Pair(ids, [f"s{i}" for i in samples]), "nested": [ids * 2, (ids.float(),)], "tag": None}


def test_dispatch_plan_slices_nested_batches_with_strings():
    steps = _plan(3, 8, 2, False, True, False, collate=_structured)
    pieces = [m.batch for step in steps for m in step]
    assert [p["pair"].x.tolist() for p in pieces] == [[0, 1], [2, 3], [4, 5], [6, 7], [0, 1], [2, 3]]
    assert [p["pair"].label for p in pieces][3:] == [["s6", "s7"], ["s0", "s1"], ["s2", "s3"]]
    assert all(isinstance(p["pair"], Pair) and p["tag"] is None for p in pieces)
    assert all(torch.equal(p["nested"][0], p["pair"].x * 2) for p in pieces)
    assert steps[-1][0].remainder == 2


def test_dispatch_plan_regroups_short_batches_from_several_workers():
    # Two workers each end their stream with a short batch: 3+2 rows, then 3+1.
    batches = [torch.arange(0, 3), torch.arange(3, 5), torch.arange(5, 8), torch.arange(8, 9)]
    steps = list(plan_dispatch(batches, 3, 3, even_batches=True))
    pieces = [[m.batch.tolist() for m in step] for step in steps]
    assert pieces == [[[0], [1], [2]], [[3], [4], [5]], [[6], [7], [8]]]
    assert steps[-1][0].remainder == -1


def test_sliced_tensors_hold_only_their_rows():
    # A view would pickle the whole global batch to every rank.
    piece = take_rows(torch.arange(1000), slice(10, 12))
    assert piece.untyped_storage().nbytes() == 2 * 8


def test_rows_of_a_batch_must_agree():
    assert count_rows({"a": torch.zeros(3, 2), "b": ["x", "y", "z"]}) == 3
    with pytest.raises(ShardingError, match=r"different numbers of rows \[2, 3\]"):
        count_rows({"a": torch.zeros(3), "b": ["x", "y"]})
    with pytest.raises(ShardingError, match="holds no tensor"):
        count_rows(None)
    with pytest.raises(ShardingError, match=r"shapes \(2, 5\) and \(1, 4\)"):
        concat_rows(torch.zeros(2, 5), torch.zeros(1, 4))


def test_dispatcher_on_one_process_is_a_plain_loader():
    dataset = Stream(7)
    loader = prepare_data_loader(DataLoader(dataset, batch_size=3), put_on_device=True, dispatch_batches=True)
    assert isinstance(loader, DataLoaderShard)  # nothing to dispatch on one process
    dispatcher = DataLoaderDispatcher(dataset, batch_size=3, device=torch.device("cpu"))
    assert len(dispatcher) == 3 and dispatcher.total_batch_size == 3
    seen = _loader_pass(dispatcher)
    assert seen == [([0, 1, 2], False, False, -1), ([3, 4, 5], False, False, -1), ([6], True, True, -1)]
    assert [b.tolist() for b in loader] == [b for b, *_ in seen]
    assert dataset.epochs == [0, 0]  # one pass of each loader
    assert list(DataLoaderDispatcher(Stream(0), batch_size=3)) == []


def test_dispatcher_on_one_process_raises_the_datasets_own_error():
    class Failing(IterableDataset):
        def __iter__(self):
            yield 1
            raise ValueError("disk gone")

    with pytest.raises(ValueError, match="disk gone"):
        list(DataLoaderDispatcher(Failing(), batch_size=1))
    assert not GradientState().in_dataloader


class SelfSharding(Stream):
    accel_shards_itself = True


def test_dataset_that_shards_itself_is_iterated_as_it_is():
    loader = prepare_data_loader(
        DataLoader(SelfSharding(5), batch_size=2, drop_last=True), num_processes=3, process_index=2
    )
    assert isinstance(loader, DataLoaderShard) and loader.remainder == -1
    assert _loader_pass(loader) == [([0, 1], False, False, -1), ([2, 3], True, True, -1)]
    with pytest.raises(ShardingError, match="accel_shards_itself=True"):
        prepare_data_loader(DataLoader(SelfSharding(5)), num_processes=3, dispatch_batches=True)


@pytest.mark.parametrize(
    ("loader_kwargs", "prepare_kwargs", "message"),
    [
        ({"batch_size": 2}, {}, r"Stream is an IterableDataset: dispatching .* num_processes=2"),
        ({"batch_size": None}, {"dispatch_batches": False}, r"batch_size=None: .* 2 processes"),
        ({"batch_size": 3}, {"split_batches": True, "dispatch_batches": False}, "got batch_size=3"),
        ({"batch_size": 2, "num_workers": 1}, {"dispatch_batches": False}, "num_workers=1"),
        ({"batch_size": 2}, {"dispatch_batches": False, "process_index": 2}, "process_index=2 is not a rank"),
    ],
)
def test_impossible_requests_are_refused_in_one_line(loader_kwargs, prepare_kwargs, message):
    kwargs = {"num_processes": 2, "process_index": 0, **prepare_kwargs}
    with pytest.raises(ShardingError, match=message) as raised:
        prepare_data_loader(DataLoader(Stream(8), **loader_kwargs), **kwargs)
    assert "\n" not in str(raised.value)


def test_dispatcher_refuses_a_batch_size_that_cannot_be_split():
    with pytest.raises(ShardingError, match="batch_size=0"):
        DataLoaderDispatcher(Stream(4), batch_size=0)
