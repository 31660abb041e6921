"""accel-data: shards data loaders across processes and keeps their order independent of N."""

from accel_data.__about__ import __version__
from accel_data.loaders.dispatcher import DataLoaderDispatcher, DispatchError
from accel_data.loaders.even_batches import even_batches_overridden
from accel_data.loaders.prepare import prepare_data_loader
from accel_data.loaders.shard import DataLoaderShard, LoaderStateError
from accel_data.resume.skip import SkipBatchSampler, skip_first_batches
from accel_data.samplers.rng_sync import synchronize_rng_states
from accel_data.samplers.seedable import SeedableRandomSampler
from accel_data.samplers.synchronized import SynchronizedRandomSampler
from accel_data.sharding.batch_sampler import BatchSamplerShard, ShardingError
from accel_data.sharding.iterable import IterableDatasetShard

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
