"""`accel.utils.operations`: the cross-process operations, where Accelerate's scripts import them."""

from __future__ import annotations

from typing import Any

from accel_amp.precision.policies import convert_to_fp32
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
from accel_state import reduce as _reduce


def reduce(tensor: Any, reduction: str = "mean", scale: float = 1.0) -> Any:
    """Return the element-wise mean (or `reduction="sum"`) over ranks of every tensor, times `scale`.

    Accelerate's `utils.reduce` averages by default while `Accelerator.reduce` sums; this keeps
    both defaults. The work is `accel_state.reduce`'s.
    """
    return _reduce(tensor, reduction=reduction, scale=scale)


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
