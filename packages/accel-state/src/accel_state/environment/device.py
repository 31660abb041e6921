"""Chooses the device and the process-group backend a process uses."""

from __future__ import annotations

import torch


def cuda_is_usable(cpu: bool) -> bool:
    """Return True when CUDA is present and the user did not ask for CPU."""
    return not cpu and torch.cuda.is_available()


def choose_device(cpu: bool, local_rank: int) -> torch.device:
    """Return the device for this process: its local GPU when there is one, else the CPU."""
    if cuda_is_usable(cpu):
        index = local_rank % torch.cuda.device_count()
        return torch.device("cuda", index)
    return torch.device("cpu")


def choose_process_group_backend(device: torch.device, requested: str | None = None) -> str:
    """Return the torch.distributed backend: `requested` when given, else nccl for GPUs and gloo
    for the CPU. Raises ValueError for nccl on a process without a GPU."""
    if requested is None:
        return "nccl" if device.type == "cuda" else "gloo"
    name = requested.strip().lower()
    if name == "nccl" and device.type != "cuda":
        raise ValueError(
            f"process group backend 'nccl' needs a CUDA device, but this process runs on {device}; "
            "use backend='gloo' (InitProcessGroupKwargs) or run on GPUs"
        )
    return name
