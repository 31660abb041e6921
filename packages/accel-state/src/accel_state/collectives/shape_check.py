"""Makes the ranks agree on a collective's inputs before it runs, or all raise together.

A collective over mismatched inputs returns garbage or aborts a rank inside the transport. Each
rank encodes what it brings into a fixed-size header (`collective_header`); one small all_gather
shows every rank every header, so a mismatch is seen by all of them at once. Only then do they
exchange full descriptions (pickled, the error path alone pays for it) to name each rank's shape,
dtype or structure. In debug mode the full descriptions are compared on every call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy
import torch

from accel_state.collectives.capacity import capacity_of
from accel_state.collectives.header import (
    BESIDE,
    HEADER_BYTES,
    PAYLOAD_FIELD,
    TENSOR,
    Description,
    Payloads,
    Piece,
    call_kind,
    carried_sizes,
    describe_object,
    exact_call,
    exchange_tensor,
    fill_host_exchange,
    headers_agree,
    needs,
    payload_lengths,
    plan_exchange,
    read_table,
    split_exchanges,
)
from accel_state.collectives.host_buffers import host_exchange
from accel_state.process_group import collective_log, timeouts
from accel_state.process_group.timeouts import CollectiveError
from accel_state.shared_state.partial_state import PartialState

_SHOWN_TENSORS = 8  # more differing tensors than this are counted, not listed
_SHOWN_CHARS = 400


class DistributedOperationException(Exception):
    """Accelerate's name for a collective called with inputs that do not match across ranks."""


class CollectiveShapeError(CollectiveError, DistributedOperationException):
    """Ranks called a collective with inputs it cannot combine: shapes, dtypes, structure or arguments.

    Also a DistributedOperationException, so that `except` clauses written for Accelerate catch it.
    """


@dataclasses.dataclass
class Agreement:
    """What the ranks learned from each other's headers, once they agree."""

    payload_lengths: list[int]  # per rank, NO_PAYLOAD for a rank whose pieces did not travel inline
    offsets: list[int]  # where this rank's pieces lie in its payload (empty when they did not travel)
    payloads: Payloads | None = None  # (world size, capacity) uint8: every rank's payload
    sizes: list[list[int]] | None = None  # per tensor, every rank's size along the description's size_dim
    # Every rank's one piece, gathered beside the header exchange (a new uint8 tensor of world size
    # times its bytes), when every rank's travelled there.
    beside: torch.Tensor | None = None

    def all_inline(self) -> bool:
        return self.payloads is not None and all(length >= 0 for length in self.payload_lengths)


def agree_across_ranks(
    state: Any,
    description: Description,
    *,
    full: bool = False,
    pieces: list[Piece] | None = None,
    beside_ok: bool = False,
) -> Agreement:
    """Exchange headers, with `pieces` (uint8 on the state's device) when they fit, in one all_gather.

    Raises CollectiveShapeError on every rank unless all ranks bring matching inputs to the same
    call. `state` is the process's shared state (its communicator, device and world size); with
    `full` the full descriptions are compared too, not only their digests. With `beside_ok` (a
    gather of one tensor), that tensor may travel in an all_gather beside the header exchange, when
    the history of calls foresaw its size (`capacity`): the result is then `Agreement.beside`.
    """
    world_size = state.num_processes
    if full:
        description = _with_site(description)
    communicator = state.communicator
    capacity = capacity_of(communicator)
    beside = capacity.beside  # foreseen alike on every rank
    header, offsets = plan_exchange(description, pieces, capacity.bytes, beside_ok=beside_ok, beside=beside)
    if state.device.type == "cpu":
        buffers = host_exchange(communicator, HEADER_BYTES + capacity.bytes, world_size)
        fill_host_exchange(buffers.send, header, pieces, offsets)
        table, sent = buffers.table_tensor, buffers.send_tensor
    else:
        planned = (header, offsets)
        sent, _ = exchange_tensor(description, state.device, pieces, capacity.bytes, planned=planned)
        table = torch.empty(sent.numel() * world_size, dtype=torch.uint8, device=state.device)
    received = None
    if beside and pieces and header.view(numpy.int64)[PAYLOAD_FIELD] == BESIDE:
        # This rank's call is a gather of the foreseen size: its tensor travels beside, as is.
        received = torch.empty(beside * world_size, dtype=torch.uint8, device=state.device)
        communicator.all_gather_two_into(table, sent, received, _as_tensor(pieces[0]))
    else:
        communicator.all_gather_into(table, sent)
    if state.device.type == "cpu":
        headers, payloads = read_table(buffers.table)
    else:
        headers, payloads = split_exchanges(table, world_size)
    lengths = payload_lengths(headers)
    if beside and received is None and BESIDE in lengths:
        # Another rank sent its tensor beside; this rank's call differs (refused just below): it
        # joins that exchange with zeros, so that every rank runs the same collectives.
        communicator.all_gather_into(
            torch.empty(beside * world_size, dtype=torch.uint8, device=state.device),
            _zero_bytes(beside, state.device),
        )
    agreed = headers_agree(headers)
    # Before anything can raise: every rank holds the same headers, so all stay in step.
    if agreed:
        capacity.follow(call_kind(headers), needs(headers), exact_call(headers))
    else:
        capacity.follow(None, [])
    if full or not agreed:
        # Every rank holds every header, so every rank takes this branch, or none does.
        per_rank: list[Description] = state.communicator.all_gather_object(description, world_size)
        if not agreed or any(d.comparable() != per_rank[0].comparable() for d in per_rank):
            raise CollectiveShapeError(mismatch_message(per_rank))
    agreement = Agreement(lengths, offsets)
    if any(length >= 0 for length in lengths):
        agreement.payloads = payloads
    if received is not None and all(length == BESIDE for length in lengths):
        agreement.beside = received
    if description.size_dim is not None:
        sizes = carried_sizes(headers)
        agreement.sizes = _exchange_sizes(state, description.sizes()) if sizes is None else sizes
    return agreement


def _as_tensor(piece: Piece) -> torch.Tensor:
    """Return a piece's bytes as a tensor (a numpy piece is viewed, not copied)."""
    return torch.from_numpy(piece) if isinstance(piece, numpy.ndarray) else piece


def _zero_bytes(length: int, device: torch.device) -> torch.Tensor:
    # Sent by a rank whose call differs from another's that sent beside: an error path, not kept.
    return torch.zeros(length, dtype=torch.uint8, device=device)


def _with_site(description: Description) -> Description:
    """Return `description` with the sequence number and call site of the collective in flight."""
    entry = collective_log.current()
    if entry is None:
        return description
    return dataclasses.replace(description, sequence=entry.sequence, site=entry.label())


def check_entry(operation: str) -> None:
    """In debug mode, make the ranks agree that they enter the same collective (one that does not
    check its inputs itself, a barrier), or raise CollectiveShapeError on every rank naming each
    rank's call site."""
    state = PartialState.current()
    if state is not None and state.debug and state.use_distributed:
        agree_across_ranks(state, describe_object(operation), full=True)


timeouts.check_entries_with(check_entry)


def _exchange_sizes(state: Any, sizes: list[int]) -> list[list[int]]:
    # Only when more tensors than the header holds; their number is agreed by now.
    local = torch.tensor(sizes, dtype=torch.int64, device=state.device)
    gathered = torch.empty(len(sizes) * state.num_processes, dtype=torch.int64, device=state.device)
    state.communicator.all_gather_into(gathered, local)
    flat = gathered.tolist()
    return [flat[index :: len(sizes)] for index in range(len(sizes))]


def mismatch_message(per_rank: list[Description]) -> str:
    """Return the error text naming what differs between the ranks' descriptions, rank by rank."""
    first = per_rank[0]

    def each(text_of: Callable[[Description], str]) -> str:
        return ", ".join(f"rank {rank}: {_clip(text_of(d))}" for rank, d in enumerate(per_rank))

    if any(d.operation != first.operation or d.sequence != first.sequence for d in per_rank):
        return (
            "ranks called different collectives at the same point (every rank must call the same "
            f"collectives in the same order): {each(lambda d: d.site or d.operation)}"
        )
    operation = first.operation
    problems = [f"rank {rank} {d.problem}" for rank, d in enumerate(per_rank) if d.problem]
    if problems:
        return f"{operation}: {'; '.join(problems)}"
    if any(d.arguments != first.arguments for d in per_rank):
        return f"{operation}: ranks passed different arguments: {each(lambda d: d.arguments)}"
    if any(d.structure != first.structure for d in per_rank):
        return f"{operation}: inputs differ in structure across ranks: {each(_render)}"
    return _tensor_mismatch(operation, per_rank)


def _tensor_mismatch(operation: str, per_rank: list[Description]) -> str:
    first = per_rank[0]
    differs = {
        "dtype": any(_dtypes(d) != _dtypes(first) for d in per_rank),
        "device": any(_devices(d) != _devices(first) for d in per_rank),
        "shape": any(d.compared_shapes() != first.compared_shapes() for d in per_rank),
    }
    what = " and ".join(name for name, found in differs.items() if found) or "content"
    note = ""
    if differs["shape"] and first.size_dim is not None:
        note = f" (only dim {first.size_dim} may differ, and the number of dims may not)"
    count = len(first.tensors)
    shown = list(range(count))
    if count > _SHOWN_TENSORS:
        shown = [i for i in shown if any(_leaf(d, i, differs) != _leaf(first, i, differs) for d in per_rank)]
    more = (
        f" ({len(shown) - _SHOWN_TENSORS} more differing tensors not shown)"
        if len(shown) > _SHOWN_TENSORS
        else ""
    )
    shown = shown[:_SHOWN_TENSORS]

    def texts(d: Description) -> str:
        if count == 0:
            return "no tensors"
        if count > _SHOWN_TENSORS:
            return "; ".join(f"tensor {i}: {_leaf(d, i, differs)}" for i in shown)
        return "; ".join(_leaf(d, i, differs) for i in shown)

    ranks = ", ".join(f"rank {rank}: {_clip(texts(d))}" for rank, d in enumerate(per_rank))
    return f"{operation}: tensors differ in {what} across ranks{note}: {ranks}{more}"


def _dtypes(description: Description) -> tuple[str, ...]:
    return tuple(dtype for dtype, _, _ in description.tensors)


def _devices(description: Description) -> tuple[str, ...]:
    return tuple(device for _, device, _ in description.tensors)


def _leaf(description: Description, index: int, differs: dict[str, bool]) -> str:
    dtype, device, shape = description.tensors[index]
    text = str(shape)
    if differs["dtype"]:
        text += f" {dtype}"
    if differs["device"]:
        text += f" on {device}"
    return text


def _render(description: Description) -> str:
    """Return the structure with each tensor's shape in its place."""
    pieces = description.structure.split(TENSOR)
    leaves = [str(shape) for _, _, shape in description.tensors]
    return "".join(piece + (leaves[i] if i < len(leaves) else "") for i, piece in enumerate(pieces))


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."
