"""Putting one named tensor of a module on a device, with a new value or its own."""

from __future__ import annotations

import torch
from torch import nn

from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.memory.sizes import as_dtype
from accel_big_modeling.tied import get_submodule_and_name

DeviceLike = int | str | torch.device


def _castable(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def set_module_tensor_to_device(
    module: nn.Module,
    tensor_name: str,
    device: DeviceLike,
    value: torch.Tensor | None = None,
    dtype: str | torch.dtype | None = None,
    copy: bool = False,
) -> None:
    """Replace parameter or buffer `tensor_name` of `module` by `value` (or itself) on `device`.

    Floating values take `dtype`, or the dtype the module declares; integer tensors keep theirs.
    `copy=True` forces a private copy (used for values that are views of a memory-mapped file).
    """
    owner, name = get_submodule_and_name(module, tensor_name)
    is_param = name in owner._parameters
    if not is_param and name not in owner._buffers:
        raise BigModelingError(f"{type(module).__name__} has no parameter or buffer {tensor_name!r}")
    old = owner._parameters[name] if is_param else owner._buffers[name]
    if value is None:
        if old is None:
            return
        value = old
        if value.device.type == "meta" and torch.device(device).type != "meta":
            raise BigModelingError(f"{tensor_name!r} is on the meta device: pass its value to materialise it")
    elif old is not None and tuple(old.shape) != tuple(value.shape):
        raise BigModelingError(
            f"{tensor_name!r}: value has shape {tuple(value.shape)} but the model expects {tuple(old.shape)}"
        )
    given = value
    wanted = as_dtype(dtype) if dtype is not None else None
    target = wanted if wanted is not None else (old.dtype if old is not None else None)
    if target is not None and _castable(value.dtype) and _castable(target):
        value = value.to(target)
    target_device = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    moved = value.to(target_device)
    if copy and moved is given and target_device.type != "meta":
        moved = moved.clone()
    if is_param:
        requires_grad = old.requires_grad if old is not None else False
        if isinstance(old, nn.Parameter) and type(old) is not nn.Parameter:
            extra = {k: v for k, v in old.__dict__.items() if k != "requires_grad"}
            new: torch.Tensor = type(old)(moved, requires_grad=requires_grad, **extra)
        else:
            new = nn.Parameter(moved, requires_grad=requires_grad and _castable(moved.dtype))
        owner._parameters[name] = new  # type: ignore[assignment]
    else:
        owner._buffers[name] = moved
