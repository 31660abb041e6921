"""Gives each process its share of the batches of an underlying batch sampler.

Without `split_batches`, batches are dealt round-robin: in each round of N batches, rank r takes
batch r. With `split_batches`, each batch is cut into N equal slices and rank r takes slice r.
Either way, concatenating the ranks' batches of one step in rank order gives the global batch of
the same step on one process, so training does not depend on the number of processes.

With `even_batches` (the default) the last round is completed with samples from the start of the
epoch, so every rank runs the same number of equally sized steps; the padding always comes after
every real sample in that order, which is what lets `gather_for_metrics` cut it off exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import cast

from torch.utils.data import BatchSampler, Sampler, SequentialSampler


class ShardingError(ValueError):
    """The loader cannot be sharded as asked."""


class BatchSamplerShard(BatchSampler):
    """Yields the batches of `batch_sampler` that belong to process `process_index`."""

    # BatchSampler declares an int; a batch sampler without a batch_size attribute leaves None here.
    batch_size: int | None  # type: ignore[assignment]

    def __init__(
        self,
        batch_sampler: Iterable[list[int]],
        num_processes: int = 1,
        process_index: int = 0,
        split_batches: bool = False,
        even_batches: bool = True,
    ) -> None:
        batch_size = getattr(batch_sampler, "batch_size", None)
        if split_batches and batch_size is not None and batch_size % num_processes != 0:
            raise ShardingError(
                f"split_batches=True needs a batch size divisible by the {num_processes} processes, "
                f"got batch_size={batch_size}"
            )
        if split_batches and batch_size is None:
            raise ShardingError("split_batches=True needs a batch sampler with a batch_size attribute")
        # BatchSampler's __init__ validates arguments we do not use; set the fields it would set.
        self.batch_sampler = batch_sampler
        self.sampler: Sampler | Iterable = getattr(batch_sampler, "sampler", batch_sampler)
        self.num_processes = num_processes
        self.process_index = process_index
        self.split_batches = split_batches
        self.even_batches = even_batches
        self.batch_size = batch_size
        self.drop_last = bool(getattr(batch_sampler, "drop_last", False))

    # The size of one step across all ranks, and of each rank's batch.
    @property
    def per_process_batch_size(self) -> int | None:
        """Samples each process gets per batch (None for a sampler without a batch size)."""
        if self.batch_size is None:
            return None
        return self.batch_size // self.num_processes if self.split_batches else self.batch_size

    @property
    def global_batch_size(self) -> int | None:
        """Samples all processes together get per batch (None for a sampler without a batch size)."""
        size = self.per_process_batch_size
        return None if size is None else size * self.num_processes

    def __len__(self) -> int:
        underlying = len(self.batch_sampler)  # type: ignore[arg-type]
        if self.num_processes == 1:
            return underlying
        if self.split_batches:
            if self.even_batches or self.drop_last:
                return underlying
            last_size = self._last_batch_size()
            share = self.per_process_batch_size or 1
            return underlying - 1 + (1 if last_size > self.process_index * share else 0)
        if self.drop_last:
            return underlying // self.num_processes
        if self.even_batches:
            return -(-underlying // self.num_processes)
        rounds, left = divmod(underlying, self.num_processes)
        return rounds + (1 if self.process_index < left else 0)

    def _last_batch_size(self) -> int:
        total = len(self.sampler)  # type: ignore[arg-type]
        size = self.batch_size or 1
        return total - (len(self.batch_sampler) - 1) * size  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[list[int]]:
        if self.num_processes == 1:
            return iter(self.batch_sampler)
        if self.split_batches:
            return self._iter_split()
        return self._iter_round_robin()

    def _padding_source(self, first_items: Sequence[int]) -> Iterator[int]:
        if not first_items:
            raise ShardingError("cannot pad batches: the sampler yielded no samples")
        return itertools.cycle(first_items)

    def _pass_indices(self) -> list[int] | range | None:
        """Return the pass's sample indices when its batches are consecutive slices of them (torch's
        own BatchSampler over a sampler that hands a pass over whole), else None: a sequential
        sampler's as a range, which holds no index until a batch is cut from it.

        Then this rank's batches are slices of that list and the other ranks' batches are never
        built: dealing every rank's batch and keeping the round in a list cost about 1.3 us a
        batch, as much as the rest of a prepared loader's bookkeeping beside torch's own.
        """
        batch_sampler = self.batch_sampler
        if type(batch_sampler) is not BatchSampler:
            return None
        sampler = batch_sampler.sampler
        if type(sampler) is SequentialSampler:
            return range(len(sampler))
        whole_pass = getattr(sampler, "pass_indices", None)
        return whole_pass() if callable(whole_pass) else None

    def _pass_ended(self) -> None:
        """Tell a sampler that handed its pass over whole that the pass ran to its end (a
        `SeedableRandomSampler` then finishes it as its own iterator would: the next epoch)."""
        ended = getattr(self.sampler, "pass_ended", None)
        if callable(ended):
            ended()

    def _iter_round_robin(self) -> Iterator[list[int]]:
        # The loader asks for a batch per step: its whole rounds come from a chain of C iterators
        # (no Python frame of ours resumed a batch); only the pass's start and end run here.
        return itertools.chain.from_iterable(self._round_robin_pieces())

    def _round_robin_pieces(self) -> Iterator[Iterable[list[int]]]:
        """Yield this rank's batches of one pass in pieces: the whole rounds, then the last round."""
        n, rank, size = self.num_processes, self.process_index, self.batch_size
        pad_needed = self.even_batches and not self.drop_last
        # Drawn here, at the first batch asked for: nothing is drawn by `iter` alone.
        indices = self._pass_indices() if size is not None else None
        if indices is None or size is None:
            yield self._round_robin_from_batches(pad_needed)
            return
        total, stride = len(indices), n * size
        whole_rounds = (total // size) // n  # rounds of n full batches, this rank's taken as they come
        starts = range(rank * size, whole_rounds * stride, stride)
        slices = map(indices.__getitem__, map(slice, starts, map(size.__add__, starts)))
        # A list's slices are lists already; a range's are ranges.
        yield cast(Iterable[list[int]], slices) if type(indices) is list else map(list, slices)
        batches = total // size if self.drop_last else -(-total // size)
        pending = [list(indices[k * size : (k + 1) * size]) for k in range(whole_rounds * n, batches)]
        # Padding takes the first round's samples (a batch size is known: no whole batches needed).
        first_items = list(indices[: n * size]) if pad_needed else []
        yield self._last_round(pending, first_items, [])
        self._pass_ended()

    def _round_robin_from_batches(self, pad_needed: bool) -> Iterator[list[int]]:
        """Deal the underlying batch sampler's batches as they come (any batch sampler)."""
        n, rank, size = self.num_processes, self.process_index, self.batch_size
        first_items: list[int] = []
        first_batches: list[list[int]] = []
        pending: list[list[int]] = []
        for batch in self.batch_sampler:
            if pad_needed and len(first_batches) < n:
                first_batches.append(list(batch))
                first_items.extend(batch)
            pending.append(batch)
            if len(pending) == n and (size is None or len(batch) == size):
                yield pending[rank]
                pending = []
        yield from self._last_round(pending, first_items, first_batches)

    def _last_round(
        self, pending: list[list[int]], first_items: list[int], first_batches: list[list[int]]
    ) -> Iterator[list[int]]:
        """Yield this rank's batch of the pass's incomplete last round, padded under even_batches."""
        n, rank, size = self.num_processes, self.process_index, self.batch_size
        if pending and not self.drop_last and not self.even_batches:
            if rank < len(pending):
                yield pending[rank]
        elif pending and not self.drop_last:
            if size is None:
                # Without a known batch size, whole batches from the start fill the round.
                filler_batches = itertools.cycle(first_batches)
                while len(pending) < n:
                    pending.append(next(filler_batches))
            else:
                filler = self._padding_source(first_items)
                pending[-1] = list(pending[-1]) + [next(filler) for _ in range(size - len(pending[-1]))]
                while len(pending) < n:
                    pending.append([next(filler) for _ in range(size)])
            yield pending[rank]

    def _iter_split(self) -> Iterator[list[int]]:
        share = self.per_process_batch_size
        assert share is not None and self.batch_size is not None
        start, end = self.process_index * share, (self.process_index + 1) * share
        indices = self._pass_indices()
        if indices is not None:
            size, whole = self.batch_size, len(indices) // self.batch_size * self.batch_size
            for offset in range(0, whole, size):
                yield list(indices[offset + start : offset + end])
            last = list(indices[whole:]) if not self.drop_last else []
            if last and self.even_batches:
                filler = self._padding_source(indices[:size])
                last += [next(filler) for _ in range(size - len(last))]
            if last[start:end]:
                yield last[start:end]
            self._pass_ended()
            return
        first_items: list[int] = []
        for batch in self.batch_sampler:
            if not first_items:
                first_items = list(batch)
            if len(batch) < self.batch_size and self.even_batches:
                filler = self._padding_source(first_items)
                batch = list(batch) + [next(filler) for _ in range(self.batch_size - len(batch))]
            piece = batch[start:end]
            if piece:
                yield piece
