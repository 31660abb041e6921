"""accel-state: launch environment, process group, device, shared state and collectives."""

from __future__ import annotations

import importlib
from typing import Any

from accel_state.__about__ import __version__

# Names are imported on first use (PEP 562), so that `from accel_state import env_vars`, as the
# CLI does, does not import torch: the package's modules below are the ones that do.
_HOMES = {
    "AcceleratorState": "accelerator_state",
    "MixedPrecisionError": "accelerator_state",
    "StateResetError": "partial_state",
    "Backend": "backend",
    "BackendFactory": "backend",
    "BackendNotAvailableError": "backend",
    "BackendOptions": "backend",
    "ExplicitOption": "backend",
    "ProcessGroupOptions": "backend",
    "ProcessSetup": "backend",
    "backend_factory": "backend",
    "create_backend": "backend",
    "joins_uneven_inputs": "backend",
    "BackendDefaults": "backend",
    "register_backend": "backend",
    "barrier": "collectives",
    "broadcast": "collectives",
    "broadcast_object_list": "collectives",
    "copy_tensor_to_devices": "collectives",
    "gather": "collectives",
    "gather_object": "collectives",
    "gather_uneven": "collectives",
    "pad_across_processes": "collectives",
    "reduce": "collectives",
    "Communicator": "communication",
    "TorchCommunicator": "communication",
    "CommHookOptions": "ddp_comm_hooks",
    "DDPCommunicationHookType": "ddp_comm_hooks",
    "DistributedType": "distributed_type",
    "resolve_distributed_type": "distributed_type",
    "EnvVarError": "env_vars",
    "FsdpBackend": "fsdp_backend",
    "FsdpConfigError": "fsdp_plugin",
    "FullyShardedDataParallelPlugin": "fsdp_plugin",
    "GradientAccumulationPlugin": "gradient_accumulation",
    "GradientState": "gradient_state",
    "KwargsHandler": "kwargs_handler",
    "LaunchEnvironment": "launch_env",
    "LaunchEnvironmentError": "launch_env",
    "detect_launch_environment": "launch_env",
    "NativeBackend": "native_backend",
    "find_executable_batch_size": "memory",
    "release_memory": "memory",
    "recursively_apply": "nested",
    "send_to_device": "nested",
    "PartialState": "partial_state",
    "FullPrecision": "precision_protocol",
    "Precision": "precision_protocol",
    "PreparedObjects": "prepared_objects",
    "get_rng_states": "seeding",
    "set_rng_states": "seeding",
    "set_seed": "seeding",
    "CollectiveShapeError": "shape_check",
    "DistributedOperationException": "shape_check",
    "use_per_thread_state": "shared_state",
    "CollectiveTimeoutError": "timeouts",
    "RankLeftError": "timeouts",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'accel_state' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"accel_state.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = [
    "FsdpBackend",
    "FsdpConfigError",
    "FullyShardedDataParallelPlugin",
    "AcceleratorState",
    "Backend",
    "BackendFactory",
    "BackendNotAvailableError",
    "BackendOptions",
    "ExplicitOption",
    "CollectiveShapeError",
    "CollectiveTimeoutError",
    "CommHookOptions",
    "Communicator",
    "DDPCommunicationHookType",
    "DistributedOperationException",
    "DistributedType",
    "EnvVarError",
    "FullPrecision",
    "GradientAccumulationPlugin",
    "GradientState",
    "KwargsHandler",
    "LaunchEnvironment",
    "LaunchEnvironmentError",
    "MixedPrecisionError",
    "NativeBackend",
    "PartialState",
    "Precision",
    "PreparedObjects",
    "ProcessGroupOptions",
    "RankLeftError",
    "ProcessSetup",
    "StateResetError",
    "TorchCommunicator",
    "__version__",
    "backend_factory",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "copy_tensor_to_devices",
    "create_backend",
    "joins_uneven_inputs",
    "BackendDefaults",
    "detect_launch_environment",
    "find_executable_batch_size",
    "gather",
    "gather_object",
    "gather_uneven",
    "get_rng_states",
    "pad_across_processes",
    "recursively_apply",
    "reduce",
    "register_backend",
    "release_memory",
    "resolve_distributed_type",
    "send_to_device",
    "set_rng_states",
    "set_seed",
    "use_per_thread_state",
]
