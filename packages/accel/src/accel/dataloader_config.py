"""`DataLoaderConfiguration`: how `prepare` shards data loaders (Accelerate's names)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DataLoaderConfiguration:
    """Options for the loaders an Accelerator prepares."""

    split_batches: bool = False
    even_batches: bool = True
    use_seedable_sampler: bool = True
    non_blocking: bool = False
    data_seed: int | None = None
    # None: the main process reads and dispatches batches of iterable datasets, map-style ones are
    # sharded by index on every rank.
    dispatch_batches: bool | None = None
