"""The umbrella re-exports the split packages' objects themselves, never look-alikes."""

from __future__ import annotations

import accel
import accel_state
from accel import AcceleratorState, DistributedType, PartialState, set_seed
from accel.accelerator import Accelerator


def test_names_are_the_split_packages_objects():
    assert accel.DistributedType is accel_state.DistributedType is DistributedType
    assert PartialState is accel_state.PartialState
    assert AcceleratorState is accel_state.AcceleratorState
    assert accel.GradientState is accel_state.GradientState
    assert set_seed is accel_state.set_seed
    assert accel.Accelerator is Accelerator


def test_all_lists_the_public_names():
    assert {"Accelerator", "DistributedType", "PartialState", "AcceleratorState", "set_seed"} <= set(
        accel.__all__
    )
    assert all(hasattr(accel, name) for name in accel.__all__)


ERRORS_AND_HOMES = {
    "CollectiveTimeoutError": "accel_state",
    "CollectiveShapeError": "accel_state",
    "RankLeftError": "accel_state",
    "DistributedOperationException": "accel_state",
    "BackendNotAvailableError": "accel_state",
    "EnvVarError": "accel_state",
    "LaunchEnvironmentError": "accel_state",
    "MixedPrecisionError": "accel_state",
    "ShardingError": "accel_data",
    "LoaderStateError": "accel_data",
    "DispatchError": "accel_data",
    "ConfigError": "accel_launch",
    "LaunchOptionsError": "accel_launch",
    "NotebookLaunchError": "accel_launch",
    "CheckpointError": "accel",
    "CheckpointTargetError": "accel",
    "CheckpointWriteError": "accel",
    "GatherForMetricsError": "accel",
    "TrackerError": "accel",
    "TrackerNotInstalledError": "accel",
}


def test_every_error_a_user_may_catch_is_exported_by_its_package_and_by_accel():
    import importlib

    for name, home in ERRORS_AND_HOMES.items():
        package = importlib.import_module(home)
        error = getattr(package, name)
        assert issubclass(error, Exception), name
        assert name in package.__all__, f"{home}.__all__ lacks {name}"
        assert getattr(accel, name) is error, name
        assert name in accel.__all__, name


def test_accelerates_last_top_level_helpers_are_the_packages_objects():
    import accel_data
    from accel_state.environment import memory

    assert accel.skip_first_batches is accel_data.skip_first_batches
    assert accel.find_executable_batch_size is memory.find_executable_batch_size
    assert {"skip_first_batches", "find_executable_batch_size"} <= set(accel.__all__)


def test_non_blocking_and_dispatch_batches_read_the_dataloader_configuration():
    from accel import DataLoaderConfiguration

    default = Accelerator()
    assert default.non_blocking is False and default.dispatch_batches is None
    config = DataLoaderConfiguration(non_blocking=True, dispatch_batches=False)
    accelerator = Accelerator(dataloader_config=config)
    assert accelerator.non_blocking is True and accelerator.dispatch_batches is False


def test_the_folders_public_names_are_the_objects_accel_exports():
    import accel.checkpointing
    import accel.tracking

    for name in ("CheckpointError", "CheckpointTargetError", "CheckpointWriteError"):
        assert getattr(accel.checkpointing, name) is getattr(accel, name)
    for name in ("GeneralTracker", "LoggerType", "TrackerError", "TrackerNotInstalledError"):
        assert getattr(accel.tracking, name) is getattr(accel, name)
    for module in (accel.checkpointing, accel.tracking):
        assert all(hasattr(module, name) for name in module.__all__), module.__name__
        assert set(module.__all__) <= set(dir(module))
    assert accel.checkpointing.save_state.__module__ == "accel.checkpointing.save_load"
