"""`accel.parallelism_config`: Accelerate's path of the N-D mesh's configuration, the objects of
`accel_state.parallelism`."""

from accel_state.parallelism.config import (
    ParallelismConfig,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
)

__all__ = ["ParallelismConfig", "TorchContextParallelConfig", "TorchTensorParallelConfig"]
