"""`SkipBatchSampler`: the batches of a batch sampler from batch n on, without loading the skipped ones.

The sampler's indices for the skipped batches are drawn and dropped, so skipping 10,000 batches
costs milliseconds. When the batch sampler is a plain `BatchSampler`, whole runs of indices are
dropped at once; any other batch sampler is stepped over batch by batch, still without loading data.

Across N processes (`BatchSamplerShard`) one batch of this rank is one round of N underlying
batches, or one underlying batch cut in N with `split_batches`. `even_batches` pads the last
round with the first samples of the epoch, so the resumed pass still sees the epoch's first round
(as indices only) to pad from exactly as an uninterrupted pass would.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from typing import Any

from torch.utils.data import BatchSampler, Sampler

from accel_data.sharding.batch_sampler import BatchSamplerShard


class SkipBatchSampler(BatchSampler):
    """Yields the batches of `batch_sampler` from batch `skip_batches` on, loading nothing skipped."""

    # BatchSampler declares both as always set; a batch sampler without them leaves None here.
    sampler: Sampler[int] | Iterable[int] | None  # type: ignore[assignment]
    batch_size: int | None  # type: ignore[assignment]

    def __init__(self, batch_sampler: Iterable[list[int]], skip_batches: int = 0) -> None:
        # BatchSampler's __init__ validates arguments we do not use; set the fields it would set.
        self.batch_sampler = batch_sampler
        self.skip_batches = skip_batches
        self.sampler = getattr(batch_sampler, "sampler", None)
        self.batch_size = getattr(batch_sampler, "batch_size", None)
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))

    @property
    def total_length(self) -> int:
        """Batches of a whole pass, skipped ones included."""
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return max(self.total_length - self.skip_batches, 0)

    def __iter__(self) -> Iterator[list[int]]:
        # A generator, so that nothing is drawn before the first batch is asked for: the DataLoader
        # draws its workers' base seed first, and a RandomSampler's seed must come after it.
        inner, skip = self.batch_sampler, self.skip_batches
        if skip == 0:
            yield from inner
        elif isinstance(inner, BatchSamplerShard) and inner.num_processes > 1:
            yield from _shard_batches_from(inner, skip)
        else:
            if isinstance(inner, BatchSamplerShard):
                inner = inner.batch_sampler  # one process: its batches are the underlying ones
            yield from _batches_from(inner, start=skip)


def _shard_batches_from(shard: BatchSamplerShard, skip: int) -> Iterator[list[int]]:
    """Yield this rank's batches of `shard` from its batch `skip` (>= 1) on."""
    per_batch = 1 if shard.split_batches else shard.num_processes  # underlying batches per rank batch
    underlying = shard.batch_sampler
    # The first round stays in the stream, as indices, to be the padding source; this rank's batch
    # of it is dropped below.
    stream = _BatchStream(_batches_from(underlying, start=skip * per_batch, head=per_batch), underlying)
    resumed = BatchSamplerShard(
        stream,
        num_processes=shard.num_processes,
        process_index=shard.process_index,
        split_batches=shard.split_batches,
        even_batches=shard.even_batches,
    )
    batches = iter(resumed)
    next(batches, None)
    yield from batches


def _batches_from(batch_sampler: Iterable[list[int]], start: int, head: int = 0) -> Iterator[list[int]]:
    """Yield the first `head` batches of `batch_sampler`, then its batches from `start` on."""
    if type(batch_sampler) is BatchSampler:
        # Every batch but the last is full, so batch k starts at index k * batch_size.
        size = batch_sampler.batch_size
        indices = iter(batch_sampler.sampler)
        kept = list(itertools.islice(indices, head * size))
        consume(indices, (start - head) * size)
        yield from BatchSampler(itertools.chain(kept, indices), size, batch_sampler.drop_last)
        return
    batches = iter(batch_sampler)
    kept_batches = list(itertools.islice(batches, head))
    consume(batches, start - head)
    yield from itertools.chain(kept_batches, batches)


def consume(iterator: Iterator[Any], count: int) -> None:
    """Advance `iterator` by `count` items, dropping them."""
    if count > 0:
        next(itertools.islice(iterator, count, count), None)


class _BatchStream:
    """One pass of batches standing in for the batch sampler they came from."""

    def __init__(self, batches: Iterator[list[int]], source: Any) -> None:
        self._batches = batches
        self.batch_size = getattr(source, "batch_size", None)
        self.sampler = getattr(source, "sampler", source)
        self.drop_last = bool(getattr(source, "drop_last", False))

    def __iter__(self) -> Iterator[list[int]]:
        return self._batches
