"""accel: run a plain PyTorch training loop on one or many processes, unchanged."""

from accel.__about__ import __version__
from accel.accelerator import Accelerator
from accel.checkpoint_errors import CheckpointError, CheckpointTargetError, CheckpointWriteError
from accel.dataloader_config import DataLoaderConfiguration
from accel.metrics import GatherForMetricsError
from accel.project_config import ProjectConfiguration
from accel_data import DispatchError, LoaderStateError, ShardingError
from accel_launch import ConfigError, LaunchOptionsError, NotebookLaunchError, notebook_launcher
from accel_state import (
    AcceleratorState,
    BackendNotAvailableError,
    CollectiveShapeError,
    CollectiveTimeoutError,
    DistributedType,
    EnvVarError,
    GradientState,
    LaunchEnvironmentError,
    MixedPrecisionError,
    PartialState,
    set_seed,
)

__all__ = [
    "Accelerator",
    "AcceleratorState",
    "BackendNotAvailableError",
    "CheckpointError",
    "CheckpointTargetError",
    "CheckpointWriteError",
    "CollectiveShapeError",
    "CollectiveTimeoutError",
    "ConfigError",
    "DataLoaderConfiguration",
    "DispatchError",
    "DistributedType",
    "EnvVarError",
    "GatherForMetricsError",
    "GradientState",
    "LaunchEnvironmentError",
    "LaunchOptionsError",
    "LoaderStateError",
    "MixedPrecisionError",
    "NotebookLaunchError",
    "PartialState",
    "ProjectConfiguration",
    "ShardingError",
    "__version__",
    "notebook_launcher",
    "set_seed",
]
