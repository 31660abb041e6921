"""A rank's batches sliced from the pass's indices are the batches dealt from the underlying batches
(round robin, or each batch cut in N with split_batches)."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

from accel_data.samplers.seedable import SeedableRandomSampler
from accel_data.samplers.synchronized import SynchronizedRandomSampler
from accel_data.sharding.batch_sampler import BatchSamplerShard


class _OtherBatchSampler(BatchSampler):
    """Torch's BatchSampler under another type: dealt by the generic loop, index by index."""


def _sampler(kind: str, size: int) -> object:
    if kind == "sequential":
        return SequentialSampler(range(size))
    return SynchronizedRandomSampler(RandomSampler(range(size)), synchronize=False)


def _batches(batch_sampler_type: type, kind: str, size: int, batch: int, n: int, rank: int,
             drop_last: bool, even: bool, split: bool) -> list[list[int]]:  # fmt: skip
    torch.manual_seed(size * 1000 + batch)  # the same shuffle for both ways of dealing
    batches = batch_sampler_type(_sampler(kind, size), batch * n if split else batch, drop_last)
    shard = BatchSamplerShard(
        batches, num_processes=n, process_index=rank, even_batches=even, split_batches=split
    )
    return list(shard)


@pytest.mark.parametrize("split", [False, True], ids=["round robin", "split batches"])
@pytest.mark.parametrize("kind", ["sequential", "shuffled"])
def test_sliced_batches_equal_the_batches_dealt_index_by_index(kind: str, split: bool) -> None:
    checked = 0
    for size, batch, n, drop_last, even in itertools.product(
        [0, 1, 5, 31, 32, 33, 64, 100], [1, 3, 8, 32], [2, 3, 4], [False, True], [False, True]
    ):
        if size == 0 and kind == "shuffled":
            continue  # torch's RandomSampler refuses an empty dataset
        for rank in range(n):
            arguments = (kind, size, batch, n, rank, drop_last, even, split)
            sliced = _batches(BatchSampler, *arguments)
            dealt = _batches(_OtherBatchSampler, *arguments)
            assert sliced == dealt, arguments
            assert all(type(batch) is list for batch in sliced), arguments
            checked += len(sliced)
    assert checked > 1000


def test_the_sliced_path_is_taken_only_where_a_pass_is_one_list() -> None:
    shuffled = BatchSamplerShard(BatchSampler(_sampler("shuffled", 10), 2, False), num_processes=2)
    assert shuffled._pass_indices() is not None
    # A sequential pass holds no index until a batch is cut from it (no list of every row of a large set).
    huge = BatchSamplerShard(BatchSampler(SequentialSampler(range(10**6)), 2, False), num_processes=2)
    assert huge._pass_indices() == range(10**6)
    assert next(iter(huge)) == [0, 1]
    own_generator = SynchronizedRandomSampler(
        RandomSampler(range(10), generator=torch.Generator().manual_seed(0)), synchronize=False
    )
    state = own_generator.generator.get_state()
    dealt = BatchSamplerShard(BatchSampler(own_generator, 2, False), num_processes=2)
    assert dealt._pass_indices() is None
    assert torch.equal(own_generator.generator.get_state(), state), "nothing drawn when not sliced"
    assert BatchSamplerShard(_OtherBatchSampler(range(10), 2, False), num_processes=2)._pass_indices() is None


def _seedable_passes(batch_sampler_type: type, size: int, batch: int, n: int, rank: int, drop_last: bool,
                     even: bool, split: bool) -> tuple[list[list[list[int]]], int, torch.Tensor]:  # fmt: skip
    sampler = SeedableRandomSampler(range(size), data_seed=7)
    batches = batch_sampler_type(sampler, batch * n if split else batch, drop_last)
    shard = BatchSamplerShard(
        batches, num_processes=n, process_index=rank, even_batches=even, split_batches=split
    )
    passes = [list(shard), list(shard)]  # no set_epoch between them: a pass run to its end advances it
    assert sampler.generator is not None
    return passes, sampler.epoch, sampler.generator.get_state()


@pytest.mark.parametrize("split", [False, True], ids=["round robin", "split batches"])
def test_a_seedable_sampler_sliced_yields_and_ends_each_pass_as_when_dealt(split: bool) -> None:
    # use_seedable_sampler=True: the order is seed + epoch's, and a pass run to its end moves the
    # sampler to the next epoch and leaves its generator as torch's RandomSampler leaves it.
    checked = 0
    for size, batch, n, drop_last, even in itertools.product(
        [0, 1, 5, 33, 64, 100], [1, 3, 8], [2, 3], [False, True], [False, True]
    ):
        for rank in range(n):
            arguments = (size, batch, n, rank, drop_last, even, split)
            sliced, sliced_epoch, sliced_state = _seedable_passes(BatchSampler, *arguments)
            dealt, dealt_epoch, dealt_state = _seedable_passes(_OtherBatchSampler, *arguments)
            assert sliced == dealt, arguments
            assert sliced_epoch == dealt_epoch == 2, arguments
            assert torch.equal(sliced_state, dealt_state), arguments
            if size >= 33 and not (drop_last and len(sliced[0]) == 0):
                assert sliced[0] != sliced[1], arguments  # the second pass shuffled anew
            checked += len(sliced[0])
    assert checked > 300


def test_a_seedable_pass_left_early_does_not_advance_the_epoch() -> None:
    sampler = SeedableRandomSampler(range(100), data_seed=7)
    shard = BatchSamplerShard(BatchSampler(sampler, 3, False), num_processes=2)
    batches = iter(shard)
    first = next(batches)
    del batches
    assert sampler.epoch == 0
    assert next(iter(shard)) == first  # the same epoch's order again
    replaced = SeedableRandomSampler(range(10), replacement=True, data_seed=7)
    assert BatchSamplerShard(BatchSampler(replaced, 2, False), num_processes=2)._pass_indices() is None


@pytest.mark.parametrize("kind", ["sequential", "shuffled"])
def test_a_round_robin_pass_runs_no_python_frame_of_ours_between_its_first_and_last_round(kind: str) -> None:
    import sys

    torch.manual_seed(100 * 1000 + 4)  # the shuffle `_batches` draws
    shard = BatchSamplerShard(BatchSampler(_sampler(kind, 100), 4, False), num_processes=2, process_index=1)
    batches = iter(shard)
    first = next(batches)
    ours: list[str] = []

    def record(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and "accel_data" in frame.f_code.co_filename:
            ours.append(frame.f_code.co_name)

    sys.setprofile(record)
    try:
        middle = [next(batches) for _ in range(9)]
    finally:
        sys.setprofile(None)
    assert ours == [], ours
    rest = list(batches)  # the last round (and the pass's end) run our code again
    assert [first, *middle, *rest] == _batches(_OtherBatchSampler, kind, 100, 4, 2, 1, False, True, False)
    assert len(rest) == 3 and all(type(batch) is list for batch in middle)


def test_iter_alone_draws_no_shuffle() -> None:
    sampler = SeedableRandomSampler(range(10), data_seed=3)
    shard = BatchSamplerShard(BatchSampler(sampler, 2, False), num_processes=2)
    epoch = sampler.epoch
    assert sampler.generator is None  # seeded by the first draw of a pass
    batches = iter(shard)
    assert sampler.generator is None, "iter alone drew the pass"
    assert len(next(batches)) == 2
    list(batches)
    assert sampler.epoch == epoch + 1  # the pass ran to its end
