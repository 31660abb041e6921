"""accel-data: shards data loaders across processes and keeps their order independent of N."""

from accel_data.__about__ import __version__
from accel_data.batch_sampler_shard import BatchSamplerShard, ShardingError
from accel_data.data_loader_shard import DataLoaderShard
from accel_data.prepare import prepare_data_loader
from accel_data.rng_sync import synchronize_rng_states
from accel_data.seedable_sampler import SeedableRandomSampler

__all__ = [
    "BatchSamplerShard",
    "DataLoaderShard",
    "SeedableRandomSampler",
    "ShardingError",
    "__version__",
    "prepare_data_loader",
    "synchronize_rng_states",
]
