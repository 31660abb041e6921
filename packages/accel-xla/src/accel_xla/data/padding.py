"""Static shapes for XLA: pad a batch's tensors up to a multiple of a size, so that a few compiled
graphs serve every batch."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from accel_state.collectives.nested import recursively_apply


def pad_to_multiple_of(data: Any, multiple: int, dim: int = -1, value: float = 0) -> Any:
    """Return `data` (a tensor, or lists/tuples/dicts of them) with each tensor's `dim` padded at the
    end with `value` up to the next multiple of `multiple`. A tensor without that dim is unchanged.
    """
    if isinstance(multiple, bool) or not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"pad_to_multiple_of: multiple must be a positive integer, got {multiple!r}")

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.ndim == 0 or not -tensor.ndim <= dim < tensor.ndim:
            return tensor
        axis = dim % tensor.ndim
        missing = -tensor.shape[axis] % multiple
        if not missing:
            return tensor
        widths = [0, 0] * (tensor.ndim - axis - 1) + [0, missing]
        return F.pad(tensor, widths, value=value)

    return recursively_apply(pad, data)
