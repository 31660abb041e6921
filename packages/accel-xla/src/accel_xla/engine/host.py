"""Copies XLA tensors to the host, for files: a file holding XLA tensors loads only where XLA runs."""

from __future__ import annotations

from typing import Any

import torch

from accel_state.collectives.nested import recursively_apply, tensor_leaves


def to_host(data: Any) -> Any:
    """Return `data` with every XLA tensor copied to the CPU, after running what is pending.

    A tensor reached twice (tied weights in a state dict) gives one copy, so that the sharing a
    file format checks for is kept.
    """
    if not any(_on_xla(t) for t in tensor_leaves(data)):
        return data
    import torch_xla

    torch_xla.sync(wait=True)  # one graph for everything pending, not one per tensor read
    copies: dict[int, torch.Tensor] = {}

    def copy(tensor: torch.Tensor) -> torch.Tensor:
        if not _on_xla(tensor):
            return tensor
        if id(tensor) not in copies:
            copies[id(tensor)] = tensor.detach().cpu()
        return copies[id(tensor)]

    return recursively_apply(copy, data)


def _on_xla(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "xla"
