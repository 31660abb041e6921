"""Collectives over nested structures of tensors: gather, broadcast, reduce, pad.

On one process each is the identity (or its trivial result), so single-process code pays nothing.
In debug mode (`ACCEL_DEBUG_MODE=1`) shape-sensitive collectives first compare shapes across
ranks and raise an error naming each rank's shape instead of hanging.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from accel_state.nested import recursively_apply
from accel_state.partial_state import PartialState
from accel_state.shape_check import verify_shapes_match
from accel_state.timeouts import names_collective

# torch 2.13 renamed all_gather_into_tensor (now deprecated); older releases only have the old name.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _state() -> PartialState:
    return PartialState()


def _check_shapes(operation: str, data: Any, ignore_dim: int | None = None) -> None:
    if _state().debug:
        verify_shapes_match(operation, data, ignore_dim=ignore_dim)


@names_collective("barrier")
def barrier() -> None:
    """Wait for every process; a no-op when not distributed."""
    if _state().use_distributed:
        dist.barrier()


def _gather_one(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.ndim == 0:
        tensor = tensor.unsqueeze(0)
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    out = torch.empty(
        (tensor.shape[0] * dist.get_world_size(),) + tuple(tensor.shape[1:]),
        dtype=tensor.dtype,
        device=tensor.device,
    )
    _all_gather_single(out, tensor)
    return out


@names_collective("gather")
def gather(data: Any) -> Any:
    """Return every rank's tensors concatenated along dim 0, in rank order, on every rank."""
    state = _state()
    if not state.use_distributed:
        return data
    _check_shapes("gather", data)
    return recursively_apply(_gather_one, data, error_on_other_type=True, name="gather")


@names_collective("gather_object")
def gather_object(obj: Any) -> list[Any]:
    """Return every rank's picklable `obj`; lists and tuples are concatenated in rank order."""
    state = _state()
    if not state.use_distributed:
        return list(obj) if isinstance(obj, (list, tuple)) else [obj]
    per_rank: list[Any] = [None] * state.num_processes
    dist.all_gather_object(per_rank, obj)
    if all(isinstance(o, (list, tuple)) for o in per_rank):
        return [item for o in per_rank for item in o]
    return per_rank


@names_collective("broadcast")
def broadcast(data: Any, from_process: int = 0) -> Any:
    """Return `data` as held by rank `from_process`, on every rank (tensors are updated in place)."""
    state = _state()
    if not state.use_distributed:
        return data
    _check_shapes("broadcast", data)

    def send(tensor: torch.Tensor) -> torch.Tensor:
        dist.broadcast(tensor, src=from_process)
        return tensor

    return recursively_apply(send, data, error_on_other_type=True, name="broadcast")


@names_collective("broadcast_object_list")
def broadcast_object_list(objects: list[Any], from_process: int = 0) -> list[Any]:
    """Fill the list `objects` in place with rank `from_process`'s picklable items and return it."""
    if _state().use_distributed:
        dist.broadcast_object_list(objects, src=from_process)
    return objects


_REDUCTIONS = ("sum", "mean", "none")


@names_collective("reduce")
def reduce(data: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
    """Return the element-wise sum (or mean) over ranks of every tensor, times `scale`."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduce: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    state = _state()
    if state.use_distributed:
        _check_shapes("reduce", data)

    def combine(tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        if state.use_distributed and reduction != "none":
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
            if reduction == "mean":
                out = out / state.num_processes
        return out * scale if scale != 1.0 else out

    return recursively_apply(combine, data, error_on_other_type=True, name="reduce")


@names_collective("pad_across_processes")
def pad_across_processes(data: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Return tensors padded with `pad_index` along `dim` to the largest size any rank holds."""
    state = _state()
    if not state.use_distributed:
        return data
    _check_shapes("pad_across_processes", data, ignore_dim=dim)

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.ndim == 0 or dim >= tensor.ndim or dim < -tensor.ndim:
            return tensor
        axis = dim % tensor.ndim
        size = torch.tensor([tensor.shape[axis]], device=tensor.device)
        sizes = _gather_one(size)
        longest = int(sizes.max())
        if longest == tensor.shape[axis]:
            return tensor
        new_shape = list(tensor.shape)
        new_shape[axis] = longest
        out = tensor.new_full(new_shape, pad_index)
        index = [slice(None)] * tensor.ndim
        index[axis] = (
            slice(longest - tensor.shape[axis], longest) if pad_first else slice(0, tensor.shape[axis])
        )
        out[tuple(index)] = tensor
        return out

    return recursively_apply(pad, data, error_on_other_type=True, name="pad_across_processes")


@names_collective("gather_uneven")
def gather_uneven(data: Any) -> Any:
    """Like `gather`, but each rank's tensors may differ in size along dim 0 (other dims must match)."""
    state = _state()
    if not state.use_distributed:
        return data
    _check_shapes("gather_uneven", data, ignore_dim=0)

    def gather_one(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.ndim == 0:
            tensor = tensor.unsqueeze(0)
        sizes = _gather_one(torch.tensor([tensor.shape[0]], device=tensor.device)).tolist()
        longest = max(sizes)
        padded = tensor
        if tensor.shape[0] < longest:
            filler = tensor.new_zeros((longest - tensor.shape[0],) + tuple(tensor.shape[1:]))
            padded = torch.cat([tensor, filler])
        chunks = _gather_one(padded).split(longest)
        return torch.cat([chunk[:size] for chunk, size in zip(chunks, sizes, strict=True)])

    return recursively_apply(gather_one, data, error_on_other_type=True, name="gather_uneven")
