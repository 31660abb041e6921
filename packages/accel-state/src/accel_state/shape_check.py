"""Compares tensor shapes across ranks before a collective that needs them equal.

A collective over mismatched shapes hangs or fails with an error that says nothing of the cause;
comparing first turns that into an error naming every rank's shape.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from accel_state.nested import tensor_leaves


class CollectiveShapeError(RuntimeError):
    """Ranks called a collective with tensors of shapes it cannot combine."""


def _format_rank_shapes(per_rank: list[list[tuple[int, ...]]]) -> str:
    parts = []
    for rank, shapes in enumerate(per_rank):
        text = "; ".join(str(tuple(s)) for s in shapes) if shapes else "no tensors"
        parts.append(f"rank {rank}: {text}")
    return ", ".join(parts)


def verify_shapes_match(operation: str, data: Any, *, ignore_dim: int | None = None) -> None:
    """Raise CollectiveShapeError unless every rank holds tensors of the same shapes.

    With `ignore_dim`, that dimension may differ (padding will even it out) but the rank may not.
    """
    shapes = [tuple(t.shape) for t in tensor_leaves(data)]
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, shapes)
    reference = per_rank[0]

    def comparable(rank_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        if ignore_dim is None:
            return rank_shapes
        return [tuple(d for i, d in enumerate(s) if i != ignore_dim % max(len(s), 1)) for s in rank_shapes]

    if any(comparable(s) != comparable(reference) for s in per_rank):
        raise CollectiveShapeError(
            f"{operation}: tensors differ in shape across ranks: {_format_rank_shapes(per_rank)}"
        )
