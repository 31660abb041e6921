"""The send and receive buffers of a communicator's header exchanges on the host, made once per size.

Every checked collective exchanges a header and its payload; allocating both buffers, and turning
each between torch and numpy, cost more than filling them. The buffers are reused: whatever a
collective reads from its exchange is copied out before it returns (or, for a broadcast, into the
caller's tensor), and the ranks of one communicator call collectives one at a time, in order.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

import numpy
import torch

_SIZES = 8  # exchange sizes kept per communicator (the capacity takes powers of two: few sizes)


@dataclasses.dataclass(frozen=True)
class HostExchange:
    """One exchange size's buffers: what this rank sends, and every rank's row as received."""

    send: numpy.ndarray  # (row bytes,) uint8
    send_tensor: torch.Tensor  # the same memory, for the communicator
    table: numpy.ndarray  # (world size, row bytes) uint8
    table_tensor: torch.Tensor  # the same memory, flat


_by_communicator: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], HostExchange]] = (
    weakref.WeakKeyDictionary()
)


def host_exchange(communicator: Any, row_bytes: int, world_size: int) -> HostExchange:
    """Return `communicator`'s buffers for exchanges of `row_bytes` per rank among `world_size` ranks."""
    kept = _by_communicator.get(communicator)
    if kept is None:
        kept = _by_communicator[communicator] = {}
    buffers = kept.get((row_bytes, world_size))
    if buffers is None:
        if len(kept) >= _SIZES:
            kept.clear()
        send = numpy.zeros(row_bytes, dtype=numpy.uint8)
        table = numpy.zeros((world_size, row_bytes), dtype=numpy.uint8)
        buffers = HostExchange(send, torch.from_numpy(send), table, torch.from_numpy(table.reshape(-1)))
        kept[(row_bytes, world_size)] = buffers
    return buffers
