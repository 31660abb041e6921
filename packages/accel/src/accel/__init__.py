"""accel: run a plain PyTorch training loop on one or many processes, unchanged."""

from accel.__about__ import __version__
from accel.accelerator import Accelerator
from accel.dataloader_config import DataLoaderConfiguration
from accel.project_config import ProjectConfiguration
from accel_state import (
    AcceleratorState,
    DistributedType,
    GradientState,
    PartialState,
    set_seed,
)

__all__ = [
    "Accelerator",
    "AcceleratorState",
    "DataLoaderConfiguration",
    "DistributedType",
    "GradientState",
    "PartialState",
    "ProjectConfiguration",
    "__version__",
    "set_seed",
]
