"""Temporarily switches `even_batches` on prepared loaders (for `join_uneven_inputs`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from accel_data.batch_sampler_shard import BatchSamplerShard
from accel_data.data_loader_shard import DataLoaderShard


def _set_even_batches(loader: DataLoaderShard, sampler: BatchSamplerShard, even_batches: bool) -> None:
    sampler.even_batches = even_batches
    loader.pads_last_batch = sampler.num_processes > 1 and even_batches and not sampler.drop_last
    loader.remainder = loader._compute_remainder()


@contextlib.contextmanager
def even_batches_overridden(loaders: Iterable[Any], even_batches: bool | None) -> Iterator[None]:
    """Within the block, map-style prepared loaders use `even_batches`; None leaves them as they are.

    Loaders that are not sharded by index (iterable, dispatched) are refused by name, since their
    padding is decided elsewhere.
    """
    if even_batches is None:
        yield
        return
    changed: list[tuple[DataLoaderShard, BatchSamplerShard, bool]] = []
    for loader in loaders:
        sampler = getattr(loader, "batch_sampler", None)
        if not isinstance(loader, DataLoaderShard) or not isinstance(sampler, BatchSamplerShard):
            raise ValueError(
                "even_batches can only be overridden on map-style prepared loaders, "
                f"not {type(loader).__name__}"
            )
        changed.append((loader, sampler, sampler.even_batches))
    try:
        for loader, sampler, _ in changed:
            _set_even_batches(loader, sampler, even_batches)
        yield
    finally:
        for loader, sampler, previous in changed:
            _set_even_batches(loader, sampler, previous)
