"""Context parallel: each rank of the mesh's `cp` dimension holds one slice of every sequence.

torch's `context_parallel` splits the given buffers (inputs, labels, position ids) along their
sequence dimension for the duration of a region and swaps scaled_dot_product_attention for a ring
attention over the `cp` ranks; it exists for CUDA's attention kernels only, so a CPU job never gets
here (`ParallelismConfig.check_world` refuses `cp_size > 1` on the CPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from accel_state.parallelism.config import ParallelismConfig, ParallelismConfigError


def _checked_buffers(
    buffers: Sequence[torch.Tensor] | None, buffer_seq_dims: Sequence[int] | None
) -> tuple[list[torch.Tensor], list[int]]:
    """Return the buffers and their sequence dimensions, or raise one line naming the mismatch."""
    tensors, dims = list(buffers or []), list(buffer_seq_dims or [])
    if len(tensors) != len(dims):
        raise ParallelismConfigError(
            f"maybe_context_parallel: {len(tensors)} buffers but {len(dims)} buffer_seq_dims; "
            "give one sequence dimension per buffer"
        )
    for i, (tensor, dim) in enumerate(zip(tensors, dims, strict=True)):
        if not -tensor.dim() <= dim < tensor.dim():
            raise ParallelismConfigError(
                f"maybe_context_parallel: buffer {i} has shape {tuple(tensor.shape)}, no dimension {dim}"
            )
    return tensors, dims


@contextlib.contextmanager
def context_parallel_region(
    config: ParallelismConfig | None,
    mesh: Any,
    buffers: Sequence[torch.Tensor] | None = None,
    buffer_seq_dims: Sequence[int] | None = None,
    no_restore_buffers: set[torch.Tensor] | None = None,
) -> Iterator[None]:
    """Split `buffers` over the `cp` ranks inside the region when the mesh has cp > 1; a plain
    region otherwise, so one training loop runs with and without context parallel."""
    tensors, dims = _checked_buffers(buffers, buffer_seq_dims)
    if config is None or not config.cp_enabled:
        yield
        return
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import set_rotate_method

    handler = config.cp_handler
    set_rotate_method(handler.cp_comm_strategy if handler is not None else "allgather")
    with context_parallel(
        mesh["cp"], buffers=tensors, buffer_seq_dims=dims, no_restore_buffers=no_restore_buffers or set()
    ):
        yield
