"""accel: run a plain PyTorch training loop on one or many processes, unchanged.

Names load on first use (PEP 562), so `from accel import Accelerator` imports what the Accelerator
needs and not the CLI, the trackers or the checkpoint code.
"""

from accel import old_paths
from accel.__about__ import __version__
from accel.adapter_names import ADAPTER_NAMES, adapter_name

# `typing` alone costs more than the rest of `import accel`; type checkers read this name as True.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from accel.accelerator import Accelerator
    from accel.checkpointing.errors import CheckpointError, CheckpointTargetError, CheckpointWriteError
    from accel.options.dataloader_config import DataLoaderConfiguration
    from accel.options.kwargs_handlers import (
        AutocastKwargs,
        DistributedDataParallelKwargs,
        GradScalerKwargs,
        InitProcessGroupKwargs,
        ProfileKwargs,
    )
    from accel.options.project_config import ProjectConfiguration
    from accel.tracking.base import GeneralTracker, TrackerError, TrackerNotInstalledError
    from accel.tracking.registry import LoggerType
    from accel.training.metrics import GatherForMetricsError
    from accel_big_modeling import (
        BigModelingError,
        cpu_offload,
        cpu_offload_with_hook,
        disk_offload,
        dispatch_model,
        init_empty_weights,
        init_on_device,
        load_checkpoint_and_dispatch,
    )
    from accel_data import DispatchError, LoaderStateError, ShardingError, skip_first_batches
    from accel_launch import ConfigError, LaunchOptionsError, NotebookLaunchError, notebook_launcher
    from accel_state import (
        AcceleratorState,
        BackendNotAvailableError,
        CollectiveShapeError,
        CollectiveTimeoutError,
        DDPCommunicationHookType,
        DistributedOperationException,
        DistributedType,
        EnvVarError,
        FsdpConfigError,
        FullyShardedDataParallelPlugin,
        GradientAccumulationPlugin,
        GradientState,
        KwargsHandler,
        LaunchEnvironmentError,
        MixedPrecisionError,
        ParallelismConfig,
        ParallelismConfigError,
        PartialState,
        RankLeftError,
        TorchContextParallelConfig,
        TorchTensorParallelConfig,
        find_executable_batch_size,
        set_seed,
    )

# Public name -> the module that defines it.
_LAZY = {
    "cpu_offload": "accel_big_modeling",
    "cpu_offload_with_hook": "accel_big_modeling",
    "disk_offload": "accel_big_modeling",
    "dispatch_model": "accel_big_modeling",
    "init_empty_weights": "accel_big_modeling",
    "init_on_device": "accel_big_modeling",
    "load_checkpoint_and_dispatch": "accel_big_modeling",
    "BigModelingError": "accel_big_modeling",
    "Accelerator": "accel.accelerator",
    "AcceleratorState": "accel_state",
    "AutocastKwargs": "accel.options.kwargs_handlers",
    "BackendNotAvailableError": "accel_state",
    "CheckpointError": "accel.checkpointing.errors",
    "CheckpointTargetError": "accel.checkpointing.errors",
    "CheckpointWriteError": "accel.checkpointing.errors",
    "CollectiveShapeError": "accel_state",
    "CollectiveTimeoutError": "accel_state",
    "ConfigError": "accel_launch",
    "DDPCommunicationHookType": "accel_state",
    "DataLoaderConfiguration": "accel.options.dataloader_config",
    "DispatchError": "accel_data",
    "DistributedDataParallelKwargs": "accel.options.kwargs_handlers",
    "DistributedOperationException": "accel_state",
    "DistributedType": "accel_state",
    "EnvVarError": "accel_state",
    "FsdpConfigError": "accel_state",
    "FullyShardedDataParallelPlugin": "accel_state",
    "GatherForMetricsError": "accel.training.metrics",
    "GeneralTracker": "accel.tracking.base",
    "GradScalerKwargs": "accel.options.kwargs_handlers",
    "GradientAccumulationPlugin": "accel_state",
    "GradientState": "accel_state",
    "InitProcessGroupKwargs": "accel.options.kwargs_handlers",
    "KwargsHandler": "accel_state",
    "LaunchEnvironmentError": "accel_state",
    "LaunchOptionsError": "accel_launch",
    "LoaderStateError": "accel_data",
    "LoggerType": "accel.tracking.registry",
    "MixedPrecisionError": "accel_state",
    "NotebookLaunchError": "accel_launch",
    "ParallelismConfig": "accel_state",
    "ParallelismConfigError": "accel_state",
    "PartialState": "accel_state",
    "ProfileKwargs": "accel.options.kwargs_handlers",
    "ProjectConfiguration": "accel.options.project_config",
    "RankLeftError": "accel_state",
    "ShardingError": "accel_data",
    "TrackerError": "accel.tracking.base",
    "TorchContextParallelConfig": "accel_state",
    "TorchTensorParallelConfig": "accel_state",
    "TrackerNotInstalledError": "accel.tracking.base",
    "find_executable_batch_size": "accel_state",
    "notebook_launcher": "accel_launch",
    "set_seed": "accel_state",
    "skip_first_batches": "accel_data",
}

old_paths.install()  # accel.checkpoint_errors and the other paths of the flat layout still import

__all__ = [
    "cpu_offload",
    "cpu_offload_with_hook",
    "disk_offload",
    "dispatch_model",
    "init_empty_weights",
    "init_on_device",
    "load_checkpoint_and_dispatch",
    "BigModelingError",
    "Accelerator",
    "AcceleratorState",
    "AutocastKwargs",
    "BackendNotAvailableError",
    "CheckpointError",
    "CheckpointTargetError",
    "CheckpointWriteError",
    "CollectiveShapeError",
    "CollectiveTimeoutError",
    "ConfigError",
    "DDPCommunicationHookType",
    "DataLoaderConfiguration",
    "DispatchError",
    "DistributedDataParallelKwargs",
    "DistributedOperationException",
    "DistributedType",
    "EnvVarError",
    "FsdpConfigError",
    "FullyShardedDataParallelPlugin",
    "GatherForMetricsError",
    "GeneralTracker",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "GradientState",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "LaunchEnvironmentError",
    "LaunchOptionsError",
    "LoaderStateError",
    "LoggerType",
    "MixedPrecisionError",
    "NotebookLaunchError",
    "ParallelismConfig",
    "ParallelismConfigError",
    "PartialState",
    "ProfileKwargs",
    "ProjectConfiguration",
    "RankLeftError",
    "ShardingError",
    "TorchContextParallelConfig",
    "TorchTensorParallelConfig",
    "TrackerError",
    "TrackerNotInstalledError",
    "__version__",
    "find_executable_batch_size",
    "notebook_launcher",
    "set_seed",
    "skip_first_batches",
]


def __getattr__(name: str) -> "Any":
    import importlib

    module = _LAZY.get(name)
    if module is None:
        # DeepSpeedPlugin, DummyOptim, ...: from their adapter package, on first use.
        return adapter_name(name, __name__)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, *ADAPTER_NAMES])
