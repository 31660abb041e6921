"""How XLA replicas talk: accel's collectives on XLA's own all-gather and all-reduce.

Every operation here compiles to the same graph on every replica (no rank-dependent layout or
constant: `pin_layout=False`, the broadcast's mask travels as data), because on XLA's CPU device
replicas whose graphs differ wait for each other forever. Objects travel pickled, as byte
tensors padded to the longest replica's length.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch


def _xm() -> Any:
    import torch_xla.core.xla_model as xm

    return xm


def _ordinal() -> int:
    import torch_xla.runtime as xr

    return int(xr.global_ordinal())


class XlaCommunicator:
    """The `Communicator` of accel_state over `torch_xla.core.xla_model`'s collectives."""

    def all_gather_into(self, out: torch.Tensor, tensor: torch.Tensor) -> None:
        gathered = _xm().all_gather(_computed(tensor.to(out.device)), dim=0, pin_layout=False)
        out.copy_(gathered)
        _computed(out)

    def all_gather_two_into(
        self, out: torch.Tensor, tensor: torch.Tensor, second_out: torch.Tensor, second: torch.Tensor
    ) -> None:
        # One after the other: each replica's graphs must be the same, in the same order.
        self.all_gather_into(out, tensor)
        self.all_gather_into(second_out, second)

    def _all_reduce(self, kind: str, tensor: torch.Tensor) -> None:
        xm = _xm()
        reduced = xm.all_reduce(getattr(xm, kind), _computed(tensor), pin_layout=False)
        tensor.copy_(reduced)
        _computed(tensor)

    def all_reduce_sum(self, tensor: torch.Tensor) -> None:
        self._all_reduce("REDUCE_SUM", tensor)

    def all_reduce_max(self, tensor: torch.Tensor) -> None:
        self._all_reduce("REDUCE_MAX", tensor)

    def all_reduce_min(self, tensor: torch.Tensor) -> None:
        self._all_reduce("REDUCE_MIN", tensor)

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        # The same graph on every replica: the source's mask is 1, the others' 0, sent as data.
        mask = torch.tensor(1 if _ordinal() == src else 0, dtype=tensor.dtype).to(tensor.device)
        masked = tensor * mask
        self._all_reduce("REDUCE_SUM", masked)
        tensor.copy_(masked)

    def all_gather_object(self, obj: Any, world_size: int) -> list[Any]:
        payloads = self._gather_bytes(pickle.dumps(obj), world_size)
        return [pickle.loads(p) for p in payloads]

    def broadcast_object_list(self, objects: list[Any], src: int) -> None:
        world_size = _world_size()
        payload = pickle.dumps(list(objects)) if _ordinal() == src else b""
        objects[:] = pickle.loads(self._gather_bytes(payload, world_size)[src])

    def scatter_object(self, objects: list[Any] | None, src: int) -> Any:
        world_size = _world_size()
        payload = pickle.dumps(list(objects or [])) if _ordinal() == src else b""
        return pickle.loads(self._gather_bytes(payload, world_size)[src])[_ordinal()]

    def barrier(self) -> None:
        # xm.rendezvous compiles rank-dependent graphs (it hangs on the CPU device): a tiny
        # all-reduce, run at once, waits for every replica just the same.
        import torch_xla

        token = torch.zeros(1, device=torch_xla.device())
        self._all_reduce("REDUCE_SUM", token)
        torch_xla.sync(wait=True)

    def _gather_bytes(self, payload: bytes, world_size: int) -> list[bytes]:
        import torch_xla

        device = torch_xla.device()
        length = torch.tensor([len(payload)], dtype=torch.int64).to(device)
        lengths = torch.empty(world_size, dtype=torch.int64, device=device)
        self.all_gather_into(lengths, length)
        sizes = [int(n) for n in lengths.cpu().tolist()]
        longest = max(max(sizes), 1)
        row = torch.zeros(longest, dtype=torch.uint8)
        if payload:
            row[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        rows = torch.empty(world_size * longest, dtype=torch.uint8, device=device)
        self.all_gather_into(rows, row.to(device))
        table = rows.cpu().reshape(world_size, longest).numpy()
        return [table[rank, :size].tobytes() for rank, size in enumerate(sizes)]


def _computed(tensor: torch.Tensor) -> torch.Tensor:
    """Return `tensor` after running what it is pending on.

    Before a collective: its graph then starts from data, so how a replica built its input (the
    source of a broadcast packs a payload, the others zeros) cannot make its graph differ from the
    others'. After it: the result is data, so no later graph (each replica's own reads of it)
    holds, and runs again, the collective."""
    import torch_xla

    torch_xla.sync(wait=True)
    return tensor


def _world_size() -> int:
    import torch_xla.runtime as xr

    return int(xr.world_size())
