"""`prepare_data_loader`: rebuilds a user's DataLoader as this process's `DataLoaderShard`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler

from accel_data.loaders.arguments import kept_arguments
from accel_data.loaders.dispatcher import DataLoaderDispatcher
from accel_data.loaders.iterable import IterableDataLoaderShard
from accel_data.loaders.shard import DataLoaderShard
from accel_data.loaders.stateful import stateful_shard_class
from accel_data.samplers.rng_sync import validate_rng_types
from accel_data.samplers.seedable import SeedableRandomSampler
from accel_data.samplers.synchronized import SynchronizedRandomSampler
from accel_data.sharding.batch_sampler import BatchSamplerShard, ShardingError
from accel_data.sharding.iterable import IterableDatasetShard
from accel_state import PartialState, broadcast_object_list

# The attribute by which a dataset says it already yields only this rank's items.
SHARDS_ITSELF = "accel_shards_itself"


class _Sharding(NamedTuple):
    num_processes: int
    process_index: int
    split_batches: bool
    even_batches: bool


def _agreed_seed(data_seed: int | None, state: PartialState) -> int:
    """Return one shuffle seed for all ranks: `data_seed`, else torch's initial seed (Accelerate's).

    Without `data_seed`, ranks that were not seeded alike would each take their own initial seed:
    the main process's is used everywhere.
    """
    if data_seed is not None:
        return int(data_seed)
    seed = torch.random.initial_seed()
    if state.use_distributed:
        seed = broadcast_object_list([seed])[0]
    return int(seed)


def _replacement_sampler(
    sampler: Any, data_seed: int | None, state: PartialState, use_seedable_sampler: bool, synchronize: bool
) -> Any:
    """Return the sampler a prepared loader shuffles with in place of `sampler`, or None to keep it.

    With `use_seedable_sampler`, a RandomSampler becomes a `SeedableRandomSampler` over the same
    generator (one the user built keeps its seed); without, torch's own RandomSampler becomes a
    `SynchronizedRandomSampler`, which yields what it would (subclasses are kept as they are).
    """
    if not isinstance(sampler, RandomSampler) or isinstance(sampler, SeedableRandomSampler):
        return None
    if use_seedable_sampler:
        return SeedableRandomSampler(
            sampler.data_source,
            replacement=sampler.replacement,
            # torch's RandomSampler keeps the count the user asked for (None: the dataset's length at each
            # pass) only in this private attribute; the public `num_samples` would freeze today's length.
            num_samples=sampler._num_samples,
            generator=sampler.generator,
            data_seed=_agreed_seed(data_seed, state),
        )
    if type(sampler) is RandomSampler:
        return SynchronizedRandomSampler(sampler, synchronize=synchronize)
    return None


def _with_sampler(batch_sampler: Any, sampler: Any) -> Any:
    """Return `batch_sampler` drawing from `sampler`: a new BatchSampler, or the custom one changed."""
    if sampler is None:
        return batch_sampler
    if type(batch_sampler) is BatchSampler:
        return BatchSampler(sampler, batch_sampler.batch_size, batch_sampler.drop_last)
    # A custom batch sampler over a RandomSampler: swap the sampler it draws from in place.
    batch_sampler.sampler = sampler
    return batch_sampler


def _generator_to_synchronize(
    sampler: Any, dataloader: DataLoader, data_seed: int | None, state: PartialState, num_processes: int
) -> torch.Generator | None:
    """Return the generator whose state must agree across ranks each epoch (None when there is none).

    A custom sampler that shuffles with its own generator (SubsetRandomSampler, WeightedRandomSampler)
    would draw a different order on every rank; on N processes one that has no generator yet gets
    one, seeded alike (on one process it is left as it is, as Accelerate leaves it).
    """
    if isinstance(sampler, SynchronizedRandomSampler) and sampler.generator is not None:
        return sampler.generator
    if isinstance(sampler, RandomSampler):
        return dataloader.generator
    if hasattr(sampler, "generator"):
        if sampler.generator is None and num_processes > 1:
            seed = data_seed if data_seed is not None else torch.initial_seed()
            if state.use_distributed and data_seed is None:
                seed = broadcast_object_list([seed])[0]
            sampler.generator = torch.Generator().manual_seed(int(seed))
        if sampler.generator is not None:
            return sampler.generator
    return dataloader.generator


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
    use_seedable_sampler: bool = False,
    dispatch_batches: bool | None = None,
    use_stateful_dataloader: bool = False,
) -> DataLoader:
    """Return a loader that yields only this process's batches (on `device` if `put_on_device`).

    Map-style datasets are sharded by batch (see `BatchSamplerShard`). A RandomSampler keeps
    torch's order (that of the plain loader on one process), drawn by the main process for every
    rank (`SynchronizedRandomSampler`); with `use_seedable_sampler` it is replaced by a
    `SeedableRandomSampler`, whose order depends on seed and epoch only. A custom sampler with its
    own generator has that generator synchronised from the main process at the start of every pass
    (`rng_types` defaults to ["generator"] then; pass a list to choose).

    `dispatch_batches` (default: True for an IterableDataset, False otherwise): the main process
    reads every global batch and sends each rank its slice (`DataLoaderDispatcher`). With False, an
    IterableDataset is read by every rank, each keeping its slice (`IterableDatasetShard`). A
    dataset that already yields only this rank's items sets the attribute
    `accel_shards_itself = True`: every rank then iterates it as it is, unsharded, and only device
    placement and end-of-data tracking are added.

    `use_stateful_dataloader` builds the loader on torchdata's `StatefulDataLoader` (see
    `accel_data.loaders.stateful`); dispatched and per-rank iterable loaders do not support it.
    """
    state = PartialState()
    num_processes = state.num_processes if num_processes is None else num_processes
    process_index = state.process_index if process_index is None else process_index
    if device is None:
        device = state.device
    explicit_rng_types = rng_types
    rng_types = validate_rng_types(rng_types)
    dataset = dataloader.dataset
    common = dict(
        device=device if put_on_device else None,
        non_blocking=non_blocking,
        rng_types=rng_types,
        synchronized_generator=dataloader.generator,
    )
    sharding = _Sharding(num_processes, process_index, split_batches, even_batches)
    loader_class = stateful_shard_class() if use_stateful_dataloader else DataLoaderShard
    if isinstance(dataset, IterableDataset):
        loader = _prepare_iterable(dataloader, state, sharding, dispatch_batches, common, loader_class)
        _check_stateful(loader, use_stateful_dataloader)
        return loader
    # With batch_size=None, a BatchSampler given as the sampler yields whole batches (Accelerate shards it).
    sampler_is_batches = dataloader.batch_sampler is None and isinstance(dataloader.sampler, BatchSampler)
    if dataloader.batch_sampler is None and not sampler_is_batches:
        raise ShardingError(
            "a DataLoader with batch_size=None (no automatic batching) cannot be sharded unless its "
            f"sampler is a BatchSampler; got {type(dataloader.sampler).__name__}"
        )
    batch_sampler: Any = dataloader.sampler if sampler_is_batches else dataloader.batch_sampler
    sampler = getattr(batch_sampler, "sampler", None)
    dispatching = bool(dispatch_batches) and num_processes > 1
    # A dispatched loader is read by the main process alone: nothing to synchronise in its sampler.
    synchronize = num_processes > 1 and not dispatching
    if use_seedable_sampler or not dispatching:
        replacement = _replacement_sampler(sampler, data_seed, state, use_seedable_sampler, synchronize)
        batch_sampler = _with_sampler(batch_sampler, replacement)
        sampler = getattr(batch_sampler, "sampler", None)
    generator = _generator_to_synchronize(sampler, dataloader, data_seed, state, num_processes)
    common["synchronized_generator"] = generator
    if generator is not None and explicit_rng_types is None and num_processes > 1:
        common["rng_types"] = ["generator"]
    if dispatching:
        dispatcher = _dispatcher(dataloader, state, sharding, common, sampler=sampler)
        _check_stateful(dispatcher, use_stateful_dataloader)
        return dispatcher
    shard = BatchSamplerShard(
        batch_sampler,
        num_processes=num_processes,
        process_index=process_index,
        split_batches=split_batches,
        even_batches=even_batches,
    )
    batching: dict[str, Any] = (
        {"sampler": shard, "batch_size": None} if sampler_is_batches else {"batch_sampler": shard}
    )
    return loader_class(
        dataset,
        **batching,
        total_dataset_length=_sample_count(batch_sampler, dataset),
        global_batch_size=shard.global_batch_size,
        pads_last_batch=num_processes > 1 and even_batches and not shard.drop_last,
        **common,
        **kept_arguments(dataloader),
    )


def _check_stateful(loader: DataLoader, use_stateful_dataloader: bool) -> None:
    if use_stateful_dataloader and not isinstance(loader, stateful_shard_class()):
        raise ShardingError(
            f"use_stateful_dataloader=True: {type(loader.dataset).__name__} would be read through "
            f"{type(loader).__name__}, which torchdata's StatefulDataLoader cannot drive; use a map-style "
            "dataset, or dispatch_batches=False with a dataset that shards itself"
        )


def _dispatcher(
    dataloader: DataLoader, state: PartialState, sharding: _Sharding, common: dict[str, Any], **sampling: Any
) -> DataLoaderDispatcher:
    """Return a `DataLoaderDispatcher` for `dataloader`, refusing ranks that were not launched."""
    num_processes, process_index = sharding.num_processes, sharding.process_index
    dataset = dataloader.dataset
    kind = "an IterableDataset" if isinstance(dataset, IterableDataset) else "a map-style dataset"
    if (num_processes, process_index) != (state.num_processes, state.process_index):
        raise ShardingError(
            f"{type(dataset).__name__} is {kind}: dispatching its batches to num_processes={num_processes} "
            f"(as rank {process_index}) needs that many launched processes, but this is rank "
            f"{state.process_index} of {state.num_processes}; pass dispatch_batches=False to shard it in "
            "each process"
        )
    if dataloader.batch_size is None:
        raise ShardingError(
            f"dispatch_batches=True needs a DataLoader with a batch_size, not a custom batch_sampler "
            f"({type(dataloader.batch_sampler or dataloader.sampler).__name__})"
        )
    return DataLoaderDispatcher(
        dataset,
        dataloader.batch_size,
        split_batches=sharding.split_batches,
        even_batches=sharding.even_batches,
        drop_last=dataloader.drop_last,
        device=common["device"],
        non_blocking=common["non_blocking"],
        **sampling,
        **kept_arguments(dataloader),
    )


def _prepare_iterable(
    dataloader: DataLoader,
    state: PartialState,
    sharding: _Sharding,
    dispatch_batches: bool | None,
    common: dict[str, Any],
    loader_class: type[DataLoaderShard] = DataLoaderShard,
) -> DataLoader:
    """Return the loader for an IterableDataset: unsharded, dispatched, or sharded on every rank."""
    dataset = dataloader.dataset
    name = type(dataset).__name__
    kept = kept_arguments(dataloader)
    shards_itself = bool(getattr(dataset, SHARDS_ITSELF, False))
    if shards_itself and dispatch_batches:
        raise ShardingError(
            f"{name} shards itself ({SHARDS_ITSELF}=True), so dispatch_batches=True would send every "
            "rank slices of the main process's shard only; leave dispatch_batches unset"
        )
    if shards_itself or sharding.num_processes == 1:
        return loader_class(
            dataset, batch_size=dataloader.batch_size, drop_last=dataloader.drop_last, **common, **kept
        )
    if dataloader.batch_size is None:
        raise ShardingError(
            f"{name} is an IterableDataset in a DataLoader with batch_size=None: its items cannot be "
            f"shared by {sharding.num_processes} processes without a batch size; set batch_size, or set "
            f"{SHARDS_ITSELF} = True on a dataset that yields only its rank's items"
        )
    if dispatch_batches is None or dispatch_batches:
        return _dispatcher(dataloader, state, sharding, common)
    if dataloader.num_workers > 0:
        raise ShardingError(
            f"{name}: dispatch_batches=False shards the stream in the main process of each rank, but "
            f"num_workers={dataloader.num_workers} would give each worker its own windows and padding; "
            f"use dispatch_batches=True, num_workers=0, or {SHARDS_ITSELF} = True"
        )
    shard = IterableDatasetShard(
        dataset,
        batch_size=dataloader.batch_size,
        drop_last=dataloader.drop_last,
        num_processes=sharding.num_processes,
        process_index=sharding.process_index,
        split_batches=sharding.split_batches,
        even_batches=sharding.even_batches,
    )
    return IterableDataLoaderShard(
        shard, batch_size=shard.per_process_batch_size, global_batch_size=shard.window_size, **common, **kept
    )
