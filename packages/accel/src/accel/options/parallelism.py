"""`Accelerator(parallelism_config=...)`: which run a ParallelismConfig asks for, checked against the job.

A config given or asked for by the launcher (`accel launch --use_parallelism_config`) that shards
or splits the model (dp_shard, tp or cp above 1) runs on the backend that composes the device mesh
(FSDP2's); one of replicas only is plain data parallel, as Accelerate runs it. A config whose sizes
are all 1 on a job of several processes means replicas of every process, as in Accelerate.
"""

from __future__ import annotations

from typing import Any

from accel_state import DistributedType
from accel_state.parallelism.config import (
    ParallelismConfig,
    ParallelismConfigError,
    parallelism_from_environment,
)

MESH_TYPE = DistributedType.FSDP


def requested_parallelism(
    given: ParallelismConfig | None, plugin: Any, plugin_type: DistributedType | None
) -> tuple[ParallelismConfig | None, DistributedType | None]:
    """Return the run's config (None: none asked) and the distributed type it needs (None: any)."""
    config = given if given is not None else parallelism_from_environment()
    if config is None:
        return None, plugin_type
    if not isinstance(config, ParallelismConfig):
        raise TypeError(
            f"Accelerator(parallelism_config=...) takes a ParallelismConfig, got {type(config).__name__}"
        )
    if not config.needs_mesh_backend:
        return config, plugin_type
    if plugin_type is not None and plugin_type is not MESH_TYPE:
        raise ParallelismConfigError(
            f"ParallelismConfig({config.describe()}) shards the model over a device mesh (FSDP2 and tensor "
            f"parallel), which a {type(plugin).__name__} run does not do: pass one or the other"
        )
    return config, MESH_TYPE


def settle_for_job(config: ParallelismConfig | None, num_processes: int, device_type: str) -> None:
    """Check `config` against the job (one line naming the sizes); all sizes 1 means replicas."""
    if config is None:
        return
    if config.total_size == 1 and num_processes > 1:
        config.dp_replicate_size = num_processes
    config.check_world(num_processes, on_cpu=device_type == "cpu")
