"""`IterableDatasetShard`: this process's slice of every window of an iterable dataset's stream.

Every rank reads the whole stream and keeps its slice of each window of `batch_size * N` items
(`batch_size` items with `split_batches`): rank r keeps items [r*b, (r+1)*b) of every window, b
being the per-process batch size. Batched by b, one window is one step, and the ranks' batches of
a step concatenated in rank order give the window. So every rank must see the same stream in the
same order (for a dataset that shuffles with a global generator, pass `rng_types`).

The last, partial window is dropped with `drop_last`. Otherwise, with `even_batches` (and N > 1)
it is completed with items from the start of the epoch's stream, placed after all its real items,
and `remainder` says how many items of it are real; with `even_batches=False` each rank takes what
is there, possibly fewer items or none.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset

from accel_data.sharding.batch_sampler import ShardingError


def check_sharding(
    batch_size: int | None, num_processes: int, process_index: int, split_batches: bool
) -> None:
    """Raise ShardingError when `batch_size` cannot be shared by `num_processes` as asked."""
    if num_processes < 1 or not 0 <= process_index < num_processes:
        raise ShardingError(
            f"process_index={process_index} is not a rank of num_processes={num_processes} processes"
        )
    if batch_size is None or batch_size < 1:
        raise ShardingError(f"sharding needs a batch_size of at least 1, got batch_size={batch_size}")
    if split_batches and batch_size % num_processes:
        raise ShardingError(
            f"split_batches=True needs a batch size divisible by the {num_processes} processes, "
            f"got batch_size={batch_size}"
        )


class IterableDatasetShard(IterableDataset):
    """Yields the items of `dataset` that belong to process `process_index` (see the module doc)."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        check_sharding(batch_size, num_processes, process_index, split_batches)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.epoch = 0
        # Real items of the last window when it was padded, else -1 (set while iterating).
        self.remainder = -1

    @property
    def per_process_batch_size(self) -> int:
        """Samples each process gets per batch."""
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size

    @property
    def window_size(self) -> int:
        """Items consumed per step across all processes."""
        return self.per_process_batch_size * self.num_processes

    @property
    def _pads(self) -> bool:
        return self.num_processes > 1 and self.even_batches and not self.drop_last

    def set_epoch(self, epoch: int) -> None:
        """Record the epoch and pass it on to the dataset, if it takes one."""
        self.epoch = int(epoch)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(self.epoch)

    def __len__(self) -> int:
        """Items this process yields; a TypeError when the dataset's length is unknown."""
        total = len(self.dataset)
        share = self.per_process_batch_size
        full, left = divmod(total, self.window_size)
        if left == 0 or self.drop_last:
            return full * share
        if self._pads:
            return (full + 1) * share
        return full * share + min(max(left - self.process_index * share, 0), share)

    def __iter__(self) -> Iterator[Any]:
        self.remainder = -1
        window = self.window_size
        start = self.process_index * self.per_process_batch_size
        stop = start + self.per_process_batch_size
        first: list[Any] = []
        current: list[Any] = []
        for item in self.dataset:
            current.append(item)
            if len(current) == window:
                yield from current[start:stop]
                first = first or current
                current = []
        if not current or self.drop_last:
            return
        if self._pads:
            # Padding comes from the first window (or this one, when it is the only one) and goes
            # after every real item, so `remainder` real items followed by padding is the order.
            filler = itertools.cycle(first or list(current))
            self.remainder = len(current)
            current = current + [next(filler) for _ in range(window - len(current))]
        yield from current[start:stop]
