"""ParallelismConfig: Accelerate's names and defaults, sizes from the launcher's variables, and a
one-line error naming the culprit for every size or mesh that cannot be."""

from __future__ import annotations

import pytest

from accel_state.parallelism.config import (
    ParallelismConfig,
    ParallelismConfigError,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
    parallelism_from_environment,
)

VARIABLES = (
    "ACCEL_USE_PARALLELISM_CONFIG",
    "ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE",
    "ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE",
    "ACCEL_PARALLELISM_CONFIG_TP_SIZE",
    "ACCEL_PARALLELISM_CONFIG_CP_SIZE",
)


@pytest.fixture(autouse=True)
def no_launcher_variables(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_defaults_and_accelerates_dimension_names():
    config = ParallelismConfig()
    assert (config.dp_replicate_size, config.dp_shard_size, config.tp_size, config.cp_size) == (1, 1, 1, 1)
    assert config.total_size == 1 and not config.needs_mesh_backend
    config = ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, tp_size=2)
    assert config.total_size == 8 and config.data_parallel_size == 4 and config.non_data_parallel_size == 2
    assert config.dp_dim_names == ["dp_replicate", "dp_shard"]
    assert config.non_dp_dim_names == ["tp"]
    assert config.dp_shard_cp_dim_names == ["dp_shard"]
    assert config.dp_cp_dim_names == ["dp_replicate", "dp_shard"]
    assert config.fsdp_dim_names == ["dp_replicate", "dp_shard_cp"]
    assert config.active_mesh_dims == ["dp_replicate", "dp_shard", "tp"]
    assert isinstance(config.tp_handler, TorchTensorParallelConfig) and config.cp_handler is None
    assert config.describe() == "dp_replicate=2 x dp_shard=2 x cp=1 x tp=2"
    assert ParallelismConfig(dp_replicate_size=4).needs_mesh_backend is False  # replicas only: DDP


def test_unset_sizes_come_from_the_launchers_variables(monkeypatch):
    assert parallelism_from_environment() is None
    monkeypatch.setenv("ACCEL_USE_PARALLELISM_CONFIG", "1")
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE", "2")
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_TP_SIZE", "2")
    config = parallelism_from_environment()
    assert config is not None and (config.dp_shard_size, config.tp_size) == (2, 2)
    assert ParallelismConfig(tp_size=4).tp_size == 4, "a size the script sets wins"


@pytest.mark.parametrize(
    ("kwargs", "variable", "message"),
    [
        (
            {"tp_size": 0},
            None,
            r"^ParallelismConfig\(tp_size=\.\.\.\) is 0; each size must be an integer of at least 1$",
        ),
        ({"dp_shard_size": 1.5}, None, r"^ParallelismConfig\(dp_shard_size=\.\.\.\) is 1\.5;"),
        ({"cp_size": True}, None, r"^ParallelismConfig\(cp_size=\.\.\.\) is True;"),
        (
            {},
            ("ACCEL_PARALLELISM_CONFIG_TP_SIZE", "two"),
            r"^ACCEL_PARALLELISM_CONFIG_TP_SIZE='two' is not an integer$",
        ),
        (
            {},
            ("ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE", "-2"),
            r"^ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE is -2;",
        ),
    ],
)
def test_a_bad_size_is_one_line_naming_it(monkeypatch, kwargs, variable, message):
    if variable:
        monkeypatch.setenv(*variable)
    with pytest.raises(ParallelismConfigError, match=message):
        ParallelismConfig(**kwargs)


def test_a_mesh_that_does_not_fit_the_job_names_the_sizes():
    with pytest.raises(ParallelismConfigError) as caught:
        ParallelismConfig(dp_shard_size=2, tp_size=2).check_world(8, on_cpu=True)
    assert str(caught.value) == (
        "ParallelismConfig spans 4 processes (dp_replicate=1 x dp_shard=2 x cp=1 x tp=2) but the job has 8: "
        "the sizes' product must equal the number of processes"
    )
    with pytest.raises(ParallelismConfigError, match=r"^cp_size is 2 on a CPU run: torch's context parallel"):
        ParallelismConfig(cp_size=2).check_world(2, on_cpu=True)
    ParallelismConfig(cp_size=2).check_world(2, on_cpu=False)  # on GPUs it is allowed


def test_handlers_check_their_options():
    assert TorchContextParallelConfig().cp_comm_strategy == "allgather"
    with pytest.raises(
        ParallelismConfigError, match=r"cp_comm_strategy is 'ring'; use 'allgather' or 'alltoall'"
    ):
        TorchContextParallelConfig(cp_comm_strategy="ring")
    assert TorchTensorParallelConfig(tp_plan={"a": "colwise"}).tp_plan == {"a": "colwise"}
