"""accel-data: shards data loaders across processes and keeps their order independent of N."""

from accel_data.__about__ import __version__
from accel_data.batch_sampler_shard import BatchSamplerShard, ShardingError
from accel_data.data_loader_shard import DataLoaderShard, LoaderStateError
from accel_data.dispatcher import DataLoaderDispatcher, DispatchError
from accel_data.even_batches import even_batches_overridden
from accel_data.iterable_shard import IterableDatasetShard
from accel_data.prepare import prepare_data_loader
from accel_data.rng_sync import synchronize_rng_states
from accel_data.seedable_sampler import SeedableRandomSampler
from accel_data.skip import SkipBatchSampler, skip_first_batches
from accel_data.synchronized_sampler import SynchronizedRandomSampler

__all__ = [
    "BatchSamplerShard",
    "DataLoaderDispatcher",
    "DataLoaderShard",
    "DispatchError",
    "IterableDatasetShard",
    "LoaderStateError",
    "SeedableRandomSampler",
    "ShardingError",
    "SkipBatchSampler",
    "SynchronizedRandomSampler",
    "__version__",
    "even_batches_overridden",
    "prepare_data_loader",
    "skip_first_batches",
    "synchronize_rng_states",
]
