"""`accel.utils.operations`: the cross-process operations, where Accelerate's scripts import them."""

from __future__ import annotations

from accel.utils import reduce
from accel_amp.precision import convert_to_fp32
from accel_state import (
    DistributedOperationException,
    broadcast,
    broadcast_object_list,
    copy_tensor_to_devices,
    gather,
    gather_object,
    pad_across_processes,
    recursively_apply,
    send_to_device,
)

__all__ = [
    "DistributedOperationException",
    "broadcast",
    "broadcast_object_list",
    "convert_to_fp32",
    "copy_tensor_to_devices",
    "gather",
    "gather_object",
    "pad_across_processes",
    "recursively_apply",
    "reduce",
    "send_to_device",
]
