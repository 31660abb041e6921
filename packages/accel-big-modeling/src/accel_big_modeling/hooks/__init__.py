"""Forward hooks (Accelerate's `accelerate.hooks`): device alignment, offload, and their attachment."""

from accel_big_modeling.hooks.align import AlignDevicesHook
from accel_big_modeling.hooks.attach import (
    attach_align_device_hook,
    attach_align_device_hook_on_blocks,
    attach_execution_device_hook,
)
from accel_big_modeling.hooks.base import (
    ModelHook,
    SequentialHook,
    add_hook_to_module,
    remove_hook_from_module,
    remove_hook_from_submodules,
)
from accel_big_modeling.hooks.cpu_offload import CpuOffload, UserCpuOffloadHook

__all__ = [
    "AlignDevicesHook",
    "CpuOffload",
    "ModelHook",
    "SequentialHook",
    "UserCpuOffloadHook",
    "add_hook_to_module",
    "attach_align_device_hook",
    "attach_align_device_hook_on_blocks",
    "attach_execution_device_hook",
    "remove_hook_from_module",
    "remove_hook_from_submodules",
]
