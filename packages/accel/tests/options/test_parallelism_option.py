"""Accelerator(parallelism_config=...): which run it asks for, and the refusals of meshes that cannot be."""

from __future__ import annotations

import pytest

from accel import Accelerator, ParallelismConfig, ParallelismConfigError
from accel.options.parallelism import requested_parallelism, settle_for_job
from accel_state import DistributedType


class OtherEnginePlugin:
    distributed_type = DistributedType.DEEPSPEED


def test_a_mesh_of_more_processes_than_the_job_is_one_line():
    with pytest.raises(ParallelismConfigError) as caught:
        Accelerator(cpu=True, parallelism_config=ParallelismConfig(dp_shard_size=2, tp_size=2))
    assert str(caught.value).startswith(
        "ParallelismConfig spans 4 processes (dp_replicate=1 x dp_shard=2 x cp=1 x tp=2) but the job has 1"
    )


def test_sizes_of_one_are_a_plain_run_and_all_ones_mean_replicas():
    accelerator = Accelerator(cpu=True, parallelism_config=ParallelismConfig())
    assert accelerator.parallelism_config.total_size == 1
    assert accelerator.distributed_type is not DistributedType.FSDP
    config = ParallelismConfig()
    settle_for_job(config, 4, "cpu")
    assert config.dp_replicate_size == 4, "as Accelerate: replicas of every process"


def test_which_run_a_config_asks_for():
    assert requested_parallelism(None, None, None) == (None, None)
    sharded = ParallelismConfig(dp_shard_size=2)
    assert requested_parallelism(sharded, None, None) == (sharded, DistributedType.FSDP)
    replicas = ParallelismConfig(dp_replicate_size=2)
    assert requested_parallelism(replicas, None, None) == (replicas, None)
    with pytest.raises(
        ParallelismConfigError, match=r"a OtherEnginePlugin run does not do: pass one or the other"
    ):
        requested_parallelism(ParallelismConfig(tp_size=2), OtherEnginePlugin(), DistributedType.DEEPSPEED)
    with pytest.raises(TypeError, match="takes a ParallelismConfig, got dict"):
        requested_parallelism({"tp_size": 2}, None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("config", [None, ParallelismConfig()])
def test_maybe_context_parallel_is_a_plain_region_without_cp(config):
    import torch

    accelerator = Accelerator(cpu=True, parallelism_config=config)
    tokens = torch.arange(8).view(2, 4)
    with accelerator.maybe_context_parallel(
        buffers=[tokens], buffer_seq_dims=[1], no_restore_buffers={tokens}
    ):
        assert tokens.shape == (2, 4)
    with pytest.raises(ParallelismConfigError, match="1 buffers but 0 buffer_seq_dims"):
        with accelerator.maybe_context_parallel(buffers=[tokens]):
            pass
