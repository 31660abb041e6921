"""accel: run a plain PyTorch training loop on one or many processes, unchanged."""

from typing import Any

from accel.__about__ import __version__
from accel.accelerator import Accelerator
from accel.adapter_names import ADAPTER_NAMES, adapter_name
from accel.checkpoint_errors import CheckpointError, CheckpointTargetError, CheckpointWriteError
from accel.dataloader_config import DataLoaderConfiguration
from accel.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from accel.metrics import GatherForMetricsError
from accel.project_config import ProjectConfiguration
from accel.tracking import GeneralTracker, LoggerType, TrackerError, TrackerNotInstalledError
from accel_data import DispatchError, LoaderStateError, ShardingError
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
    PartialState,
    set_seed,
)

__all__ = [
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
    "PartialState",
    "ProfileKwargs",
    "ProjectConfiguration",
    "ShardingError",
    "TrackerError",
    "TrackerNotInstalledError",
    "__version__",
    "notebook_launcher",
    "set_seed",
]


def __getattr__(name: str) -> Any:
    # DeepSpeedPlugin, DummyOptim, ...: from their adapter package, on first use.
    return adapter_name(name, __name__)


def __dir__() -> list[str]:
    return sorted([*__all__, *ADAPTER_NAMES])
