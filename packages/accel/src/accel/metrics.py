"""Cuts gathered evaluation data back to the samples that really exist."""

from __future__ import annotations

from typing import Any

import torch

from accel_state import recursively_apply


def truncate_to_remainder(data: Any, remainder: int) -> Any:
    """Return `data` keeping the first `remainder` samples; -1 means there is nothing to cut."""
    if remainder < 0:
        return data
    if isinstance(data, list) and not any(isinstance(d, torch.Tensor) for d in data):
        return data[:remainder]

    def cut(tensor: torch.Tensor) -> torch.Tensor:
        return tensor[:remainder]

    return recursively_apply(cut, data)
