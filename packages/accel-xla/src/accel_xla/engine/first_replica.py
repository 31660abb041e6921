"""Every replica starts from replica 0's weights, as every rank starts from rank 0's when DDP wraps a model.

On XLA's CPU device the replicas are threads sharing torch's host generator, so a model that each
replica builds after `torch.manual_seed(0)` gets other initial weights on each; processes seeded
apart do too. One all-reduce of (the tensor on replica 0, zeros elsewhere) over every parameter
and buffer copies replica 0's values to all in one graph, the same graph on every replica (the
choice travels as data, as in `accel_xla.engine.communicator`: no rank-dependent graph).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def model_tensors(models: Iterable[torch.nn.Module]) -> list[torch.Tensor]:
    """Return the parameters and buffers of `models`, each tensor once (tied weights are one)."""
    seen: dict[int, torch.Tensor] = {}
    for model in models:
        for tensor in [*model.parameters(), *model.buffers()]:
            seen.setdefault(id(tensor), tensor)
    return list(seen.values())


def copy_from_first_replica(tensors: list[torch.Tensor], ordinal: int) -> None:
    """Overwrite `tensors` (on the XLA device) on every replica with replica 0's values."""
    if not tensors:
        return
    import torch_xla
    import torch_xla.core.xla_model as xm

    keep = torch.tensor(ordinal == 0).to(tensors[0].device)
    with torch.no_grad():
        # Sums of bools are not bools: those travel as bytes. `where`, not a product: 0 * inf is nan.
        sent = [torch.where(keep, t if t.dtype != torch.bool else t.to(torch.uint8), 0) for t in tensors]
        # The collective's graph starts from data: a replica's own values (a scalar XLA may fold
        # into the graph as a constant) must not make its graph differ from the others'.
        torch_xla.sync(wait=True)
        xm.all_reduce(xm.REDUCE_SUM, sent, pin_layout=False)
        for tensor, value in zip(tensors, sent, strict=True):
            tensor.copy_(value if value.dtype == tensor.dtype else value.to(tensor.dtype))
    torch_xla.sync(wait=True)  # later graphs read the result as data, not the collective again
