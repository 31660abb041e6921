"""The norm of gradients spread over a device mesh, counted once each, and clipping by it.

A gradient that is a DTensor holds on each rank a piece (a shard) or a copy (a replica) of the
whole, on a mesh that may span only some of the processes (a tensor parallel group), every other
group holding the same pieces again. Each rank adds |g|^p of its pieces, each weighed by how many
ranks of the whole job hold the same values, and one all-reduce over the job sums them: the norm of
the full gradients, the same on every rank, whatever the mix of meshes and placements. A plain
tensor gradient is the same on every rank (a replicated model after its all-reduce).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.distributed as dist


def mesh_grad_norm(gradients: Iterable[torch.Tensor], norm_type: float = 2.0) -> torch.Tensor:
    """Return the `norm_type` norm of all of `gradients` as if each were whole (collective)."""
    from torch.distributed.tensor import DTensor

    world = dist.get_world_size() if dist.is_initialized() else 1
    norm_type = float(norm_type)
    device: torch.device | None = None
    total: torch.Tensor | None = None
    for gradient in gradients:
        if isinstance(gradient, DTensor):
            if any(p.is_partial() for p in gradient.placements):
                from torch.distributed.tensor import Replicate

                whole = [Replicate() if p.is_partial() else p for p in gradient.placements]
                gradient = gradient.redistribute(gradient.device_mesh, whole)
            local = gradient.to_local()
            copies = world // gradient.device_mesh.size()  # other groups holding the same pieces
            for dimension, placement in enumerate(gradient.placements):
                if placement.is_replicate():
                    copies *= gradient.device_mesh.size(dimension)
        else:
            local, copies = gradient, world
        device = local.device
        if local.numel() == 0:
            continue
        if math.isinf(norm_type):
            part = local.detach().abs().max().to(torch.float32)
            total = part if total is None else torch.maximum(total, part)
        else:
            part = torch.linalg.vector_norm(local.detach(), norm_type, dtype=torch.float32) ** norm_type
            total = part / copies if total is None else total + part / copies
    if total is None:
        total = torch.zeros((), device=device or "cpu")
    if world > 1:
        dist.all_reduce(total, op=dist.ReduceOp.MAX if math.isinf(norm_type) else dist.ReduceOp.SUM)
    return total if math.isinf(norm_type) else total ** (1.0 / norm_type)


def clip_by_mesh_norm(gradients: list[torch.Tensor], max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """Scale `gradients` in place so that their mesh-wide norm is at most `max_norm`; return the
    norm before clipping (collective)."""
    from torch.distributed.tensor import DTensor

    norm = mesh_grad_norm(gradients, norm_type)
    coefficient = torch.clamp(float(max_norm) / (norm + 1e-6), max=1.0)
    with torch.no_grad():
        for gradient in gradients:
            local = gradient.to_local() if isinstance(gradient, DTensor) else gradient
            local.mul_(coefficient.to(local.device, local.dtype))
    return norm
