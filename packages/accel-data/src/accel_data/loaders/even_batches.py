"""Temporarily switches `even_batches` on prepared loaders (for `join_uneven_inputs`)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from accel_data.loaders.shard import DataLoaderShard
from accel_data.sharding.batch_sampler import BatchSamplerShard


def _set_even_batches(loader: DataLoaderShard, sampler: BatchSamplerShard, even_batches: bool) -> None:
    sampler.even_batches = even_batches
    loader.pads_last_batch = sampler.num_processes > 1 and even_batches and not sampler.drop_last
    loader.remainder = loader._compute_remainder()


@contextlib.contextmanager
def even_batches_overridden(loaders: Iterable[Any], even_batches: bool | None) -> Iterator[None]:
    """Within the block, map-style prepared loaders use `even_batches`; None leaves them as they are.

    Loaders that are not sharded by index (iterable, dispatched) decide their padding elsewhere:
    as Accelerate does, they are left alone with a warning naming them.
    """
    if even_batches is None:
        yield
        return
    changed: list[tuple[DataLoaderShard, BatchSamplerShard, bool]] = []
    left_alone: list[str] = []
    for loader in loaders:
        sampler = loader.index_batches if isinstance(loader, DataLoaderShard) else None
        if not isinstance(sampler, BatchSamplerShard):
            left_alone.append(_name(loader))
            continue
        changed.append((loader, sampler, sampler.even_batches))
    if left_alone:
        warnings.warn(
            f"Overriding even_batches (to {even_batches}) is only supported for map-style datasets; "
            f"left alone: {', '.join(left_alone)} (iterable or dispatched: they pad as prepared)",
            stacklevel=3,
        )
    try:
        for loader, sampler, _ in changed:
            _set_even_batches(loader, sampler, even_batches)
        yield
    finally:
        for loader, sampler, previous in changed:
            _set_even_batches(loader, sampler, previous)


def _name(loader: Any) -> str:
    dataset = getattr(loader, "dataset", None)
    return (
        f"{type(loader).__name__} over {type(dataset).__name__}"
        if dataset is not None
        else type(loader).__name__
    )
