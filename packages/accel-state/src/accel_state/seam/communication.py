"""How the ranks of a job talk: the primitive operations every collective is built from.

A backend hands one `Communicator` to the shared state when it sets the process up; the
collectives of `accel_state.collectives.operations` (shape checks, padding, nesting) are written once on
top of it. Plain torch uses `torch.distributed`; a device runtime may bring its own.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.distributed as dist

# torch 2.13 renamed all_gather_into_tensor (now deprecated); older releases only have the old name.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class Communicator(Protocol):
    """The operations between ranks that collectives need; every rank calls each in the same order."""

    def all_gather_into(self, out: torch.Tensor, tensor: torch.Tensor) -> None:
        """Fill `out` with every rank's `tensor` concatenated along dim 0, in rank order."""

    def all_gather_two_into(
        self, out: torch.Tensor, tensor: torch.Tensor, second_out: torch.Tensor, second: torch.Tensor
    ) -> None:
        """Do `all_gather_into(out, tensor)` and `all_gather_into(second_out, second)`, the second
        in flight with the first where the transport allows (a check's header beside the data)."""

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        """Replace `tensor` in place with its element-wise sum over ranks."""

    def all_reduce_max(self, tensor: torch.Tensor) -> None:
        """Replace `tensor` in place with its element-wise maximum over ranks."""

    def all_reduce_min(self, tensor: torch.Tensor) -> None:
        """Replace `tensor` in place with its element-wise minimum over ranks."""

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """Replace `tensor` in place with rank `src`'s."""

    def all_gather_object(self, obj: Any, world_size: int) -> list[Any]:
        """Return every rank's picklable `obj`, in rank order."""

    def broadcast_object_list(self, objects: list[Any], src: int) -> None:
        """Fill `objects` in place with rank `src`'s items."""

    def scatter_object(self, objects: list[Any] | None, src: int) -> Any:
        """Return this rank's item of rank `src`'s list `objects` (one item per rank)."""

    def barrier(self) -> None:
        """Wait until every rank calls it."""


class TorchCommunicator:
    """`torch.distributed` over the default process group (gloo on CPU, nccl on GPUs)."""

    def all_gather_into(self, out: torch.Tensor, tensor: torch.Tensor) -> None:
        _all_gather_single(out, tensor)

    def all_gather_two_into(
        self, out: torch.Tensor, tensor: torch.Tensor, second_out: torch.Tensor, second: torch.Tensor
    ) -> None:
        first_done = _all_gather_single(out, tensor, async_op=True)
        second_done = _all_gather_single(second_out, second, async_op=True)
        first_done.wait()
        second_done.wait()

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)

    def all_reduce_max(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)

    def all_reduce_min(self, tensor: torch.Tensor) -> None:
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        dist.broadcast(tensor, src=src)

    def all_gather_object(self, obj: Any, world_size: int) -> list[Any]:
        per_rank: list[Any] = [None] * world_size
        dist.all_gather_object(per_rank, obj)
        return per_rank

    def broadcast_object_list(self, objects: list[Any], src: int) -> None:
        dist.broadcast_object_list(objects, src=src)

    def scatter_object(self, objects: list[Any] | None, src: int) -> Any:
        received: list[Any] = [None]
        dist.scatter_object_list(received, objects, src=src)
        return received[0]

    def barrier(self) -> None:
        dist.barrier()
