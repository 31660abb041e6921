"""Moving a forward's inputs and outputs between devices."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from accel_state import send_to_device as send_all_to_device
from accel_state.environment.device import choose_device


def send_to_device(
    data: Any, device: int | str | torch.device, skip_keys: list[str] | str | None = None
) -> Any:
    """Return `data` with its tensors on `device`; values under keys in `skip_keys` stay put."""
    target = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if not skip_keys:
        return send_all_to_device(data, target)
    skipped = [skip_keys] if isinstance(skip_keys, str) else list(skip_keys)
    if isinstance(data, Mapping):
        moved = {
            key: value if key in skipped else send_to_device(value, target, skipped)
            for key, value in data.items()
        }
        return type(data)(moved)  # type: ignore[call-arg]
    if isinstance(data, (list, tuple)):
        items = [send_to_device(item, target, skipped) for item in data]
        return type(data)(*items) if hasattr(data, "_fields") else type(data)(items)
    return send_all_to_device(data, target)


def find_device(data: Any) -> torch.device | None:
    """Return the device of the first tensor inside `data`, None when it holds none."""
    if isinstance(data, torch.Tensor):
        return data.device
    if isinstance(data, Mapping):
        data = list(data.values())
    if isinstance(data, (list, tuple)):
        for item in data:
            found = find_device(item)
            if found is not None:
                return found
    return None


def default_execution_device() -> torch.device:
    """Return the device offloaded weights run on by default: this process's GPU if any, else the CPU."""
    return choose_device(cpu=False, local_rank=int(os.environ.get("LOCAL_RANK", "0")))
