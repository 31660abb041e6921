"""`prepare_data_loader`: rebuilds a user's DataLoader as this process's `DataLoaderShard`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from accel_data.batch_sampler_shard import BatchSamplerShard, ShardingError
from accel_data.data_loader_shard import DataLoaderShard
from accel_data.rng_sync import validate_rng_types
from accel_data.seedable_sampler import SeedableRandomSampler
from accel_state import PartialState, broadcast_object_list

# DataLoader arguments carried over unchanged to the rebuilt loader.
_KEPT_ARGUMENTS = (
    "num_workers",
    "collate_fn",
    "pin_memory",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)


def _kept_arguments(loader: DataLoader) -> dict[str, Any]:
    kept = {name: getattr(loader, name) for name in _KEPT_ARGUMENTS if hasattr(loader, name)}
    if loader.num_workers == 0:
        # DataLoader rejects these without workers.
        kept.pop("prefetch_factor", None)
        kept["persistent_workers"] = False
    kept["multiprocessing_context"] = getattr(loader, "_multiprocessing_context", None) or None
    return kept


def _agreed_seed(sampler: RandomSampler, data_seed: int | None, state: PartialState) -> int:
    """Return one shuffle seed for all ranks: `data_seed`, the sampler's generator, or torch's seed."""
    if data_seed is not None:
        return int(data_seed)
    seed = sampler.generator.initial_seed() if sampler.generator is not None else torch.initial_seed()
    if state.use_distributed:
        seed = broadcast_object_list([seed])[0]
    return int(seed)


def _seedable(sampler: Any, data_seed: int | None, state: PartialState) -> Any:
    if not isinstance(sampler, RandomSampler):
        return sampler
    return SeedableRandomSampler(
        sampler.data_source,
        seed=_agreed_seed(sampler, data_seed, state),
        replacement=sampler.replacement,
        num_samples=sampler._num_samples,
    )


def _with_seedable_sampler(
    batch_sampler: Any, data_seed: int | None, state: PartialState, enabled: bool
) -> Any:
    """Return `batch_sampler` drawing from a seedable sampler wherever it shuffled with a RandomSampler."""
    sampler = getattr(batch_sampler, "sampler", None)
    if not enabled or not isinstance(sampler, RandomSampler):
        return batch_sampler
    seedable = _seedable(sampler, data_seed, state)
    if type(batch_sampler) is BatchSampler:
        return BatchSampler(seedable, batch_sampler.batch_size, batch_sampler.drop_last)
    # A custom batch sampler over a RandomSampler: swap the sampler it draws from in place.
    batch_sampler.sampler = seedable
    return batch_sampler


def _sample_count(batch_sampler: Any, dataset: Any) -> int | None:
    sampler = getattr(batch_sampler, "sampler", None)
    for source in (sampler, dataset):
        try:
            return len(source)  # type: ignore[arg-type]
        except TypeError:
            continue
    return None


def prepare_data_loader(
    dataloader: DataLoader,
    device: torch.device | None = None,
    num_processes: int | None = None,
    process_index: int | None = None,
    split_batches: bool = False,
    put_on_device: bool = False,
    rng_types: Sequence[str] | None = None,
    even_batches: bool = True,
    data_seed: int | None = None,
    non_blocking: bool = False,
    use_seedable_sampler: bool = True,
) -> DataLoaderShard:
    """Return a loader that yields only this process's batches (on `device` if `put_on_device`).

    Map-style datasets are sharded by batch (see `BatchSamplerShard`); a shuffling sampler is
    replaced by one whose order depends on seed and epoch only, the same on every rank.
    """
    state = PartialState()
    num_processes = state.num_processes if num_processes is None else num_processes
    process_index = state.process_index if process_index is None else process_index
    if device is None:
        device = state.device
    rng_types = validate_rng_types(rng_types)
    dataset = dataloader.dataset
    common = dict(
        device=device if put_on_device else None,
        non_blocking=non_blocking,
        rng_types=rng_types,
        synchronized_generator=dataloader.generator,
    )
    if isinstance(dataset, IterableDataset):
        if num_processes > 1:
            raise ShardingError(
                f"{type(dataset).__name__} is an IterableDataset: sharding iterable datasets across "
                f"{num_processes} processes is not supported yet; use a map-style dataset"
            )
        kwargs = _kept_arguments(dataloader)
        return DataLoaderShard(
            dataset, batch_size=dataloader.batch_size, drop_last=dataloader.drop_last, **common, **kwargs
        )
    if dataloader.batch_sampler is None:
        raise ShardingError("a DataLoader with batch_size=None (no automatic batching) cannot be sharded")

    batch_sampler = _with_seedable_sampler(dataloader.batch_sampler, data_seed, state, use_seedable_sampler)
    shard = BatchSamplerShard(
        batch_sampler,
        num_processes=num_processes,
        process_index=process_index,
        split_batches=split_batches,
        even_batches=even_batches,
    )
    return DataLoaderShard(
        dataset,
        batch_sampler=shard,
        total_dataset_length=_sample_count(batch_sampler, dataset),
        global_batch_size=shard.global_batch_size,
        pads_last_batch=num_processes > 1 and even_batches and not shard.drop_last,
        **common,
        **_kept_arguments(dataloader),
    )
