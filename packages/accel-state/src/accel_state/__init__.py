"""accel-state: launch environment, process group, device, shared state and collectives."""

from __future__ import annotations

import importlib
from typing import Any

from accel_state.__about__ import __version__

# Names are imported on first use (PEP 562), so that `from accel_state.environment import env_vars`, as the
# CLI does, does not import torch: the package's modules below are the ones that do.
_HOMES = {
    "AcceleratorState": "shared_state.accelerator_state",
    "MixedPrecisionError": "shared_state.accelerator_state",
    "StateResetError": "shared_state.partial_state",
    "Backend": "seam.backend",
    "BackendFactory": "seam.backend",
    "BackendNotAvailableError": "seam.backend",
    "BackendOptions": "seam.backend",
    "ExplicitOption": "seam.backend",
    "ProcessGroupOptions": "seam.backend",
    "ProcessSetup": "seam.backend",
    "backend_factory": "seam.backend",
    "create_backend": "seam.backend",
    "joins_uneven_inputs": "seam.backend",
    "BackendDefaults": "seam.backend",
    "register_backend": "seam.backend",
    "barrier": "collectives.operations",
    "broadcast": "collectives.operations",
    "broadcast_object_list": "collectives.operations",
    "copy_tensor_to_devices": "collectives.operations",
    "gather": "collectives.operations",
    "gather_object": "collectives.operations",
    "gather_uneven": "collectives.operations",
    "pad_across_processes": "collectives.operations",
    "reduce": "collectives.operations",
    "Communicator": "seam.communication",
    "TorchCommunicator": "seam.communication",
    "CommHookOptions": "backends.native.ddp_comm_hooks",
    "DDPCommunicationHookType": "backends.native.ddp_comm_hooks",
    "DdpOptions": "backends.native.ddp_options",
    "DistributedType": "environment.distributed_type",
    "resolve_distributed_type": "environment.distributed_type",
    "EnvVarError": "environment.env_vars",
    "FsdpBackend": "backends.fsdp.backend",
    "FsdpConfigError": "backends.fsdp.plugin",
    "FullyShardedDataParallelPlugin": "backends.fsdp.plugin",
    "GradientAccumulationPlugin": "shared_state.gradient_accumulation",
    "GradientState": "shared_state.gradient_state",
    "KwargsHandler": "environment.kwargs_handler",
    "LaunchEnvironment": "environment.launch_env",
    "LaunchEnvironmentError": "environment.launch_env",
    "detect_launch_environment": "environment.launch_env",
    "NativeBackend": "backends.native.backend",
    "find_executable_batch_size": "environment.memory",
    "release_memory": "environment.memory",
    "recursively_apply": "collectives.nested",
    "send_to_device": "collectives.nested",
    "PartialState": "shared_state.partial_state",
    "FullPrecision": "seam.precision_protocol",
    "Precision": "seam.precision_protocol",
    "PreparedObjects": "seam.prepared_objects",
    "get_rng_states": "shared_state.seeding",
    "set_rng_states": "shared_state.seeding",
    "set_seed": "shared_state.seeding",
    "CollectiveShapeError": "collectives.shape_check",
    "DistributedOperationException": "collectives.shape_check",
    "use_per_thread_state": "shared_state.storage",
    "CollectiveTimeoutError": "process_group.timeouts",
    "RankLeftError": "process_group.timeouts",
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
    "DdpOptions",
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
