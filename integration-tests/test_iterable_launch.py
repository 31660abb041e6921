"""Iterable datasets on 2 and 3 real ranks: each item is gathered exactly once, whichever way the
loader shares the stream (dispatched by the main process, sharded on every rank, or sharded by the
dataset itself), and a stream that breaks on the main process fails the job instead of hanging it.
"""

from __future__ import annotations

import time

import pytest
from torch.utils.data import IterableDataset

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow

CASES = [
    # stream length, batch size, split_batches, how the loader is prepared
    (24, 4, False, "dispatch"),  # 24 divides by 2*4 and 3*4
    (23, 4, False, "dispatch"),
    (5, 3, False, "dispatch"),  # shorter than one global batch
    (0, 2, False, "dispatch"),
    (30, 6, True, "dispatch"),
    (19, 6, True, "dispatch"),
    (24, 4, False, "shard"),
    (17, 3, False, "shard"),
    (31, 6, True, "shard"),
    (21, 3, False, "self"),
    (23, 4, False, "map"),  # a shuffled map-style dataset, dispatched when asked
]


def _rank():
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


class Numbers(IterableDataset):
    """0 .. length-1 as ints or as strings; with `main_only`, any rank but 0 reading it is a bug."""

    def __init__(self, length, words=False, main_only=False):
        self.length, self.words, self.main_only = length, words, main_only

    def __iter__(self):
        if self.main_only and _rank() != 0:
            raise AssertionError(f"rank {_rank()} read a dataset that only the main process should read")
        for i in range(self.length):
            yield f"item-{i}" if self.words else i

    def __len__(self):
        return self.length


class RankShards(Numbers):
    """Yields only its rank's items, as datasets that shard themselves do."""

    accel_shards_itself = True

    def __len__(self):
        import torch.distributed as dist

        return len(range(_rank(), self.length, dist.get_world_size()))

    def __iter__(self):
        import torch.distributed as dist

        for i in range(_rank(), self.length, dist.get_world_size()):
            yield f"item-{i}" if self.words else i


class BreaksMidway(IterableDataset):
    def __iter__(self):
        for i in range(100):
            if i == 20:
                raise RuntimeError("the stream broke at item 20")
            yield i


def _prepared(accelerator, dataset, batch_size, how):
    from torch.utils.data import DataLoader

    from accel_data import prepare_data_loader

    if how == "accelerator":
        return accelerator.prepare(DataLoader(dataset, batch_size=batch_size))
    dispatch = {"shard": False, "map": True}[how]
    return prepare_data_loader(
        DataLoader(dataset, batch_size=batch_size, shuffle=how == "map"),
        device=accelerator.device,
        put_on_device=True,
        split_batches=accelerator.split_batches,
        data_seed=3,
        dispatch_batches=dispatch,
    )


def _dataset(length, how, words):
    if how == "map":
        return [f"item-{i}" if words else i for i in range(length)]
    kind = RankShards if how == "self" else Numbers
    return kind(length, words=words, main_only=how == "dispatch")


def gather_every_case(cases):
    import torch

    from accel import Accelerator

    outcomes = []
    for length, batch_size, split_batches, how in cases:
        accelerator = Accelerator(split_batches=split_batches)
        prepared_as = how if how in ("shard", "map") else "accelerator"
        numbers = _prepared(accelerator, _dataset(length, how, words=False), batch_size, prepared_as)
        words = _prepared(accelerator, _dataset(length, how, words=True), batch_size, prepared_as)
        for epoch in range(2):
            seen, local_batches = [], 0
            for batch in numbers:
                local_batches += 1
                seen.extend(accelerator.gather_for_metrics(batch).tolist())
            objects = []
            for batch in words:
                objects.extend(accelerator.gather_for_metrics(batch, use_gather_object=True))
            outcomes.append({
                "case": (length, batch_size, split_batches, how, epoch),
                "seen": seen,
                "objects": objects,
                "counts": accelerator.gather(torch.tensor([local_batches])).tolist(),
                "len": len(numbers),
                "kind": type(numbers).__name__,
            })  # fmt: skip
    return outcomes


@pytest.mark.parametrize("num_processes", [2, 3])
def test_each_item_gathered_exactly_once_launch(num_processes):
    per_rank = run_on_ranks(gather_every_case, num_processes, CASES, timeout=120)
    for outcomes in zip(*per_rank, strict=True):
        first = outcomes[0]
        length, _, _, how, _ = first["case"]
        expected_kind = {
            "dispatch": "DataLoaderDispatcher",
            "map": "DataLoaderDispatcher",
            "shard": "IterableDataLoaderShard",
        }
        for outcome in outcomes:
            assert outcome["kind"] == expected_kind.get(how, "DataLoaderShard"), outcome["case"]
            if how in ("self", "map"):  # own items per rank, or shuffled
                assert sorted(outcome["seen"]) == list(range(length)), outcome["case"]
            else:
                assert outcome["seen"] == list(range(length)), outcome["case"]
            assert sorted(outcome["objects"]) == sorted(f"item-{i}" for i in range(length)), outcome["case"]
            assert outcome["counts"] == [outcome["len"]] * num_processes, outcome["case"]
            assert outcome["seen"] == first["seen"]


def read_breaking_stream():
    from torch.utils.data import DataLoader

    from accel import Accelerator

    accelerator = Accelerator()
    try:
        for batch in accelerator.prepare(DataLoader(BreaksMidway(), batch_size=2)):
            accelerator.gather_for_metrics(batch)
    except RuntimeError:
        # Give the other ranks time to record their own error before the launcher stops them.
        time.sleep(1.0 if accelerator.is_main_process else 0.0)
        raise


def test_stream_breaking_on_the_main_process_fails_every_rank_launch():
    started = time.monotonic()
    with pytest.raises(AssertionError) as failed:
        run_on_ranks(read_breaking_stream, 3, timeout=90)
    report = str(failed.value)
    assert "RuntimeError: the stream broke at item 20" in report
    # With 3 ranks of 2 items, steps 0 and 1 (items 0-11) arrived; step 2 needs items up to 23.
    assert "DispatchError: the main process failed while preparing step 2" in report
    assert "LaunchTimeoutError" not in report and time.monotonic() - started < 60
