"""Checks of a user's device map against the model, before anything is moved or loaded."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from accel_big_modeling.errors import BigModelingError

MapDevice = int | str | torch.device


def _covers(prefix: str, name: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def check_device_map(model: nn.Module, device_map: Mapping[str, MapDevice]) -> None:
    """Raise if the map names a module or tensor the model lacks, or leaves a parameter without a device."""
    known = {name for name, _ in model.named_modules()}
    known |= {name for name, _ in model.named_parameters(remove_duplicate=False)}
    known |= {name for name, _ in model.named_buffers(remove_duplicate=False)}
    for key, device in device_map.items():
        if key not in known:
            raise BigModelingError(
                f"device_map names {key!r}, which the model ({type(model).__name__}) lacks"
            )
        if not isinstance(device, (int, str, torch.device)) or isinstance(device, bool):
            raise BigModelingError(
                f"device_map[{key!r}] = {device!r} is not a device (int, 'cpu', 'disk', ...)"
            )
    keys = list(device_map)
    missing = [
        name
        for name, _ in model.named_parameters(remove_duplicate=False)
        if not any(_covers(key, name) for key in keys)
    ]
    if missing:
        shown = ", ".join(repr(name) for name in missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise BigModelingError(f"device_map gives no device for {len(missing)} parameter(s): {shown}")


def device_for(device_map: Mapping[str, MapDevice], name: str) -> MapDevice:
    """Return the device the map gives tensor `name` (its longest matching prefix)."""
    best = max((key for key in device_map if _covers(key, name)), key=len, default=None)
    if best is None:
        raise BigModelingError(f"device_map gives no device for {name!r}")
    return device_map[best]
