"""Collectives over nested structures of tensors: gather, broadcast, reduce, pad.

On one process each is the identity (or its trivial result), so single-process code pays nothing.
Across processes the ranks first agree on what they bring (`shape_check`: one small header
exchange), so mismatched inputs raise CollectiveShapeError on every rank, naming each rank's
shape, dtype or structure, instead of returning garbage or aborting a rank. Padding and uneven
gathers read the sizes they need from that same exchange, and small inputs (gather, uneven gathers,
broadcast, the pickled objects: up to 64 KB per rank, once the sizes seen lately call for it, see
`capacity`) travel in it: for them the check is the collective. A gather of one tensor up to 4 MB
whose size the calls before it foresaw travels in a second all_gather beside the check's, both in
flight at once.
`ACCEL_CHECK_COLLECTIVES=0` skips the check for gather, broadcast and reduce; debug mode
(`ACCEL_DEBUG_MODE=1`) compares full descriptions every time.
"""

from __future__ import annotations

import math
import pickle
import sys
from typing import Any

import numpy
import torch

from accel_state.collectives.header import (
    INLINE_CEILING,
    OUT_OF_RANGE,
    Description,
    describe,
    describe_object,
    numpy_dtype,
    payload_bytes,
    payload_layout,
    tensor_bytes,
    unpack_beside,
    unpack_gathered,
    unpack_one,
    unpack_rows,
    unpack_spans,
)
from accel_state.collectives.nested import recursively_apply, tensor_leaves
from accel_state.collectives.shape_check import Agreement, agree_across_ranks
from accel_state.process_group.timeouts import names_collective
from accel_state.shared_state.partial_state import PartialState


def _state() -> PartialState:
    return PartialState()


def _whole(data: Any) -> Any:
    """Return `data` with each DTensor (a sharded or tensor parallel output) as its full tensor.

    Every rank of the DTensor's mesh calls this (it is a collective on that mesh), as they all call
    the gather or reduce it precedes. Nothing is walked where no DTensor can exist: torch's tensor
    module is imported by whatever makes one.
    """
    module = sys.modules.get("torch.distributed.tensor")
    if module is None:
        return data
    if isinstance(data, torch.Tensor):  # the common case, without the walk
        return data.full_tensor() if isinstance(data, module.DTensor) else data
    if not any(isinstance(t, module.DTensor) for t in tensor_leaves(data)):
        return data
    return recursively_apply(lambda t: t.full_tensor() if isinstance(t, module.DTensor) else t, data)


def _agree(
    state: PartialState,
    description: Description,
    pieces: list[torch.Tensor] | None = None,
    beside_ok: bool = False,
) -> Agreement:
    return agree_across_ranks(state, description, full=state.debug, pieces=pieces, beside_ok=beside_ok)


def _agree_inline(
    state: PartialState, operation: str, data: Any, arguments: str = "", beside_ok: bool = False
) -> tuple[Agreement, list[torch.Tensor]] | None:
    """Agree on `data`, sending its tensors along when they fit; None when checks are off.

    Whether they travelled (`Agreement.all_inline`, `Agreement.beside`) is the same on every rank:
    it depends only on what the ranks agreed on.
    """
    if not state.check_collectives:
        return None
    tensors = [data] if isinstance(data, torch.Tensor) else tensor_leaves(data)
    description = describe(operation, data, arguments=arguments)
    return _agree(state, description, tensor_bytes(tensors, state.device), beside_ok), tensors


def _check_source(state: PartialState, operation: str, from_process: int) -> None:
    # After the ranks agreed on it, so that a bad value is refused by all of them.
    if not 0 <= from_process < state.num_processes:
        raise ValueError(
            f"{operation}: from_process must be a rank of this job (0 to {state.num_processes - 1}), "
            f"got {from_process}"
        )


@names_collective("barrier")
def barrier() -> None:
    """Wait for every process; a no-op when not distributed."""
    state = _state()
    if state.use_distributed:
        state.communicator.barrier()


def _gather_one(tensor: torch.Tensor, state: PartialState | None = None) -> torch.Tensor:
    # Results are detached, as Accelerate's: torch writes into views that autograd would refuse.
    if tensor.requires_grad:
        tensor = tensor.detach()
    if not tensor.ndim:
        tensor = tensor.unsqueeze(0)
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    if state is None:
        state = _state()
    shape = list(tensor.shape)
    shape[0] *= state.num_processes
    out = tensor.new_empty(shape)
    state.communicator.all_gather_into(out, tensor)
    return out


@names_collective("gather", checks_itself=True)
def gather(data: Any) -> Any:
    """Return every rank's tensors concatenated along dim 0, in rank order, on every rank (a
    DTensor's full tensor)."""
    state = _state()
    if type(data) is torch.Tensor and not state.check_collectives and state.num_processes > 1:
        return _gather_one(data, state)  # the common case with the check off: no walk, no DTensor
    data = _whole(data)
    if not state.use_distributed:
        return data
    agreed = _agree_inline(state, "gather", data, beside_ok=isinstance(data, torch.Tensor))
    if agreed is not None and agreed[0].beside is not None:  # one tensor, foreseen (`capacity`)
        return unpack_beside(agreed[0].beside, state.num_processes, data)
    if agreed is None or not agreed[0].all_inline():
        return recursively_apply(_gather_one, data, error_on_other_type=True, name="gather")
    agreement, tensors = agreed
    payloads = agreement.payloads
    assert payloads is not None  # all_inline
    offsets = agreement.offsets
    if isinstance(data, torch.Tensor):
        return unpack_gathered(payloads, offsets[0], data)
    gathered = iter([unpack_gathered(payloads, o, t) for t, o in zip(tensors, offsets, strict=True)])
    return recursively_apply(lambda _: next(gathered), data, error_on_other_type=True, name="gather")


def _pickled(obj: Any) -> tuple[bytes, str]:
    """Return `obj` pickled, or nothing and why it cannot be (before any rank starts sending)."""
    try:
        return pickle.dumps(obj), ""
    except Exception as error:  # noqa: BLE001 - whatever pickling raised, every rank must hear of it
        return b"", f"cannot send its object: it does not pickle ({type(error).__name__}: {error})"


def _inline_bytes(state: PartialState, pickled: bytes) -> list[torch.Tensor] | None:
    """Return `pickled` as the payload's one piece, or None when it is too long to travel inline."""
    if not pickled or len(pickled) > INLINE_CEILING:
        return None
    return [torch.frombuffer(bytearray(pickled), dtype=torch.uint8).to(state.device)]


@names_collective("gather_object", checks_itself=True)
def gather_object(obj: Any) -> list[Any]:
    """Return every rank's picklable `obj`; lists and tuples are concatenated in rank order."""
    state = _state()
    if not state.use_distributed:
        return list(obj) if isinstance(obj, (list, tuple)) else [obj]
    pickled, problem = _pickled(obj)
    agreement = _agree(
        state, describe_object("gather_object", problem=problem), _inline_bytes(state, pickled)
    )
    if agreement.all_inline():
        lengths = enumerate(agreement.payload_lengths)
        payloads = [payload_bytes(agreement.payloads, rank, length) for rank, length in lengths]
    else:
        payloads = state.communicator.all_gather_object(pickled, state.num_processes)
    per_rank = [pickle.loads(p) for p in payloads]
    if all(isinstance(o, (list, tuple)) for o in per_rank):
        return [item for o in per_rank for item in o]
    return per_rank


@names_collective("broadcast", checks_itself=True)
def broadcast(data: Any, from_process: int = 0) -> Any:
    """Return `data` as held by rank `from_process`, on every rank (tensors are updated in place)."""
    state = _state()
    if not state.use_distributed:
        return data
    agreed = _agree_inline(state, "broadcast", data, f"from_process={from_process}")
    _check_source(state, "broadcast", from_process)
    if agreed is None or not agreed[0].all_inline():

        def send(tensor: torch.Tensor) -> torch.Tensor:
            detached = tensor.detach()  # shares the storage: the tensor is still updated in place
            state.communicator.broadcast(detached, from_process)
            return detached

        return recursively_apply(send, data, error_on_other_type=True, name="broadcast")
    agreement, tensors = agreed
    payloads = agreement.payloads
    assert payloads is not None  # all_inline
    if state.process_index != from_process:
        with torch.no_grad():  # in place, as torch.distributed.broadcast writes them
            for tensor, offset in zip(tensors, agreement.offsets, strict=True):
                tensor.copy_(unpack_one(payloads, from_process, offset, tensor))
    return recursively_apply(torch.Tensor.detach, data, error_on_other_type=True, name="broadcast")


@names_collective("broadcast_object_list", checks_itself=True)
def copy_tensor_to_devices(tensor: torch.Tensor | None = None) -> torch.Tensor | None:
    """Return the main process's `tensor` on every process's device; the others pass None
    (Accelerate's helper: a tensor that exists on one process only)."""
    state = _state()
    if not state.use_distributed:
        return tensor
    held = [tensor.detach().cpu() if tensor is not None and state.is_main_process else None]
    (copy,) = broadcast_object_list(held, from_process=0)
    if copy is None:
        raise ValueError("copy_tensor_to_devices: the main process passed None; it must pass the tensor")
    return copy.to(state.device)


def broadcast_object_list(objects: list[Any], from_process: int = 0) -> list[Any]:
    """Fill the list `objects` in place with rank `from_process`'s picklable items and return it."""
    state = _state()
    if not state.use_distributed:
        return objects
    is_source = state.process_index == from_process
    pickled, problem = _pickled(list(objects)) if is_source else (b"", "")
    arguments = f"from_process={from_process}, items={len(objects)}"
    payload = _inline_bytes(state, pickled) if is_source else None
    agreement = _agree(state, describe_object("broadcast_object_list", arguments, problem), payload)
    _check_source(state, "broadcast_object_list", from_process)
    if agreement.payloads is not None and agreement.payload_lengths[from_process] >= 0:
        length = agreement.payload_lengths[from_process]
        pickled = payload_bytes(agreement.payloads, from_process, length)
    else:
        holder = [pickled]
        state.communicator.broadcast_object_list(holder, from_process)
        pickled = holder[0]
    if not is_source:  # the source keeps its own objects, as with torch.distributed
        objects[:] = pickle.loads(pickled)
    return objects


_REDUCTIONS = ("sum", "mean", "max", "min", "none")


def _combinable_inline(tensors: list[torch.Tensor], reduction: str) -> bool:
    """Return True when the ranks can combine `tensors` from the header exchange themselves.

    Real and integer dtypes only (a bool or complex reduce takes the transport's own rules). The
    answer depends on what the ranks agree on (dtypes, the reduction), so it is the same on all.
    """
    return reduction in ("sum", "mean", "max", "min") and all(
        not (t.dtype.is_complex or t.dtype == torch.bool) for t in tensors
    )


def _combined(agreement: Agreement, tensors: list[torch.Tensor], reduction: str) -> list[torch.Tensor]:
    """Return each tensor combined over every rank's copy in the payloads, in rank order.

    Every rank combines the same rows in the same order, element by element, so every rank holds
    the same bits.
    """
    payloads = agreement.payloads
    assert payloads is not None  # all_inline
    results = []
    for tensor, offset in zip(tensors, agreement.offsets, strict=True):
        as_numpy = numpy_dtype(tensor.dtype)
        if isinstance(payloads, numpy.ndarray) and as_numpy is not None:
            # numpy's operators cost a fraction of torch's per call, with the same arithmetic.
            rows = payloads[:, offset : offset + tensor.numel() * tensor.element_size()].view(as_numpy)
            combined = rows[0].copy()
            for row in rows[1:]:
                _NUMPY_COMBINE[reduction](combined, row, out=combined)
            results.append(torch.from_numpy(combined.reshape(tensor.shape)))
            continue
        stacked = unpack_rows(payloads, offset, tensor)  # a new tensor: combined in its first row
        out = stacked[0]
        for row in stacked[1:]:
            if reduction == "max":
                torch.maximum(out, row, out=out)
            elif reduction == "min":
                torch.minimum(out, row, out=out)
            else:
                out += row
        results.append(out if out.device == tensor.device else out.to(tensor.device))
    return results


_NUMPY_COMBINE = {"max": numpy.maximum, "min": numpy.minimum, "sum": numpy.add, "mean": numpy.add}


def _all_reduce(state: PartialState, tensor: torch.Tensor, reduction: str) -> None:
    communicator = state.communicator
    combine = {"max": communicator.all_reduce_max, "min": communicator.all_reduce_min}
    combine.get(reduction, communicator.all_reduce_sum)(tensor)


@names_collective("reduce", checks_itself=True)
def reduce(data: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
    """Return the element-wise sum (mean, max or min) over ranks of every tensor, times `scale`.

    "none" returns each rank's own tensors (times `scale`). Results are detached copies; a
    DTensor is reduced as its full tensor. Small inputs travel in the check's own exchange and
    are combined there: one round trip.
    """
    state = _state()
    data = _whole(data)
    combined = None
    if state.use_distributed and state.check_collectives:
        tensors = [data] if isinstance(data, torch.Tensor) else tensor_leaves(data)
        inline = _combinable_inline(tensors, reduction)
        description = describe("reduce", data, arguments=f"reduction={reduction!r}")
        agreement = _agree(state, description, tensor_bytes(tensors, state.device) if inline else None)
        if agreement.all_inline():
            combined = iter(_combined(agreement, tensors, reduction))
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduce: reduction must be one of {_REDUCTIONS}, got {reduction!r}")

    def combine(tensor: torch.Tensor) -> torch.Tensor:
        if combined is not None:
            out = next(combined)
        else:
            out = tensor.detach().clone()
            if state.use_distributed and reduction != "none":
                _all_reduce(state, out, reduction)
        if state.use_distributed and reduction == "mean":
            out = out / state.num_processes
        return out * scale if scale != 1.0 else out

    return recursively_apply(combine, data, error_on_other_type=True, name="reduce")


@names_collective("pad_across_processes", checks_itself=True)
def pad_across_processes(data: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
    """Return tensors padded with `pad_index` along `dim` to the largest size any rank holds.

    A tensor without a dim `dim` is returned as it is (on every rank: the ranks agree on shapes first).
    """
    state = _state()
    if not state.use_distributed:
        return data
    # Always agreed, ACCEL_CHECK_COLLECTIVES or not: the sizes to pad to travel in the same header.
    agreement = _agree(state, describe("pad_across_processes", data, arguments=f"dim={dim}", size_dim=dim))
    longest = iter([max(per_rank) for per_rank in agreement.sizes or []])

    def pad(tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.detach()  # every rank alike, padded or not
        target = next(longest)
        if target == OUT_OF_RANGE:
            return tensor
        axis = dim % tensor.ndim
        if target == tensor.shape[axis]:
            return tensor
        new_shape = list(tensor.shape)
        new_shape[axis] = target
        out = tensor.new_full(new_shape, pad_index)
        index = [slice(None)] * tensor.ndim
        index[axis] = (
            slice(target - tensor.shape[axis], target) if pad_first else slice(0, tensor.shape[axis])
        )
        out[tuple(index)] = tensor
        return out

    return recursively_apply(pad, data, error_on_other_type=True, name="pad_across_processes")


@names_collective("gather_uneven", checks_itself=True)
def gather_uneven(data: Any) -> Any:
    """Like `gather`, but each rank's tensors may differ in size along dim 0 (other dims must match)."""
    state = _state()
    if not state.use_distributed:
        return data
    # Always agreed: the dim-0 sizes travel in the same header, and small inputs with them.
    tensors = [data] if isinstance(data, torch.Tensor) else tensor_leaves(data)
    description = describe("gather_uneven", data, size_dim=0)
    agreement = _agree(state, description, tensor_bytes(tensors, state.device))
    if agreement.all_inline():
        inline = iter(_uneven_from_payloads(agreement, tensors))
        return recursively_apply(lambda _: next(inline), data, error_on_other_type=True, name="gather_uneven")
    per_tensor = iter(agreement.sizes or [])

    def gather_one(tensor: torch.Tensor) -> torch.Tensor:
        # A 0-d tensor (no dim 0, OUT_OF_RANGE) is gathered as one row.
        sizes = [1 if size == OUT_OF_RANGE else size for size in next(per_tensor)]
        tensor = tensor.detach()
        if tensor.ndim == 0:
            tensor = tensor.unsqueeze(0)
        longest = max(sizes)
        padded = tensor
        if tensor.shape[0] < longest:
            filler = tensor.new_zeros((longest - tensor.shape[0],) + tuple(tensor.shape[1:]))
            padded = torch.cat([tensor, filler])
        chunks = _gather_one(padded).split(longest)
        return torch.cat([chunk[:size] for chunk, size in zip(chunks, sizes, strict=True)])

    return recursively_apply(gather_one, data, error_on_other_type=True, name="gather_uneven")


def _uneven_from_payloads(agreement: Agreement, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Return each tensor's rows of every rank, in rank order, read from the header exchange's
    payloads: each rank laid its pieces out as `tensor_bytes` and `payload_layout` do, with the
    dim-0 sizes every rank now knows, so each rank's offsets can be worked out here."""
    payloads, sizes = agreement.payloads, agreement.sizes or []
    likes = [tensor if tensor.ndim else tensor.unsqueeze(0) for tensor in tensors]
    rows = [[1 if size == OUT_OF_RANGE else size for size in per_rank] for per_rank in sizes]
    row_bytes = [math.prod(like.shape[1:]) * like.element_size() for like in likes]
    spans: list[list[tuple[int, int]]] = [[] for _ in tensors]
    for rank in range(len(rows[0]) if rows else 0):
        lengths = [tensor_rows[rank] * size for tensor_rows, size in zip(rows, row_bytes, strict=True)]
        offsets = payload_layout(lengths)
        assert offsets is not None  # at least one tensor
        for index, (start, length) in enumerate(zip(offsets[0], lengths, strict=True)):
            spans[index].append((start, length))
    return [
        unpack_spans(payloads, tensor_spans, like, sum(tensor_rows))
        for tensor_spans, like, tensor_rows in zip(spans, likes, rows, strict=True)
    ]
