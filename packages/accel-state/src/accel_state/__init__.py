"""accel-state: launch environment, process group, device, shared state and collectives."""

from accel_state.__about__ import __version__
from accel_state.accelerator_state import AcceleratorState, MixedPrecisionError
from accel_state.backend import (
    Backend,
    BackendNotAvailableError,
    Preparation,
    create_backend,
    register_backend,
)
from accel_state.collectives import (
    barrier,
    broadcast,
    broadcast_object_list,
    gather,
    gather_object,
    gather_uneven,
    pad_across_processes,
    reduce,
)
from accel_state.distributed_type import DistributedType
from accel_state.env_vars import EnvVarError
from accel_state.gradient_state import GradientState
from accel_state.launch_env import LaunchEnvironment, LaunchEnvironmentError, detect_launch_environment
from accel_state.native_backend import NativeBackend
from accel_state.nested import recursively_apply, send_to_device
from accel_state.partial_state import PartialState
from accel_state.seeding import get_rng_states, set_rng_states, set_seed
from accel_state.shape_check import CollectiveShapeError

__all__ = [
    "AcceleratorState",
    "Backend",
    "BackendNotAvailableError",
    "CollectiveShapeError",
    "DistributedType",
    "EnvVarError",
    "GradientState",
    "LaunchEnvironment",
    "LaunchEnvironmentError",
    "MixedPrecisionError",
    "NativeBackend",
    "PartialState",
    "Preparation",
    "__version__",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "create_backend",
    "detect_launch_environment",
    "gather",
    "gather_object",
    "gather_uneven",
    "get_rng_states",
    "pad_across_processes",
    "recursively_apply",
    "reduce",
    "register_backend",
    "send_to_device",
    "set_rng_states",
    "set_seed",
]
