"""`accel.utils.dataclasses`: the configuration dataclasses, where Accelerate's scripts import them."""

from __future__ import annotations

from typing import Any

from accel.adapter_names import adapter_name
from accel.options.dataloader_config import DataLoaderConfiguration
from accel.options.kwargs_handlers import (
    AutocastKwargs,
    DistributedDataParallelKwargs,
    GradScalerKwargs,
    InitProcessGroupKwargs,
    ProfileKwargs,
)
from accel.options.project_config import ProjectConfiguration
from accel.tracking.registry import LoggerType
from accel_state import (
    DDPCommunicationHookType,
    DistributedType,
    FullyShardedDataParallelPlugin,
    GradientAccumulationPlugin,
    KwargsHandler,
    ParallelismConfig,
)
from accel_state.compilation.plugin import DynamoBackend, TorchDynamoPlugin
from accel_state.parallelism.config import TorchContextParallelConfig, TorchTensorParallelConfig

__all__ = [
    "AutocastKwargs",
    "DDPCommunicationHookType",
    "DataLoaderConfiguration",
    "DistributedDataParallelKwargs",
    "DistributedType",
    "FullyShardedDataParallelPlugin",
    "GradScalerKwargs",
    "GradientAccumulationPlugin",
    "InitProcessGroupKwargs",
    "KwargsHandler",
    "DynamoBackend",
    "TorchDynamoPlugin",
    "ParallelismConfig",
    "TorchContextParallelConfig",
    "TorchTensorParallelConfig",
    "LoggerType",
    "ProfileKwargs",
    "ProjectConfiguration",
]


def __getattr__(name: str) -> Any:
    # DeepSpeedPlugin: from accel-deepspeed, on first use.
    return adapter_name(name, __name__)
