"""`gather_for_metrics`: gather evaluation outputs and keep exactly one row per real sample.

On one process nothing is padded, but, as in Accelerate, the outputs of the loader's last batch
are cut to that batch's real samples (`cut_last_batch`).

With `even_batches` the last global batch is padded with samples from the start of the epoch;
the active loader reports how many real samples it holds (`remainder`), and the padding always
follows them in rank order, so keeping the first `remainder` rows is exact. Anything that does
not have one row per sample of that batch cannot be trimmed, and is refused with a clear error
rather than returned with duplicates in it.
"""

from __future__ import annotations

from typing import Any

import torch

from accel_state import (
    CollectiveShapeError,
    GradientState,
    gather,
    gather_object,
    gather_uneven,
    recursively_apply,
)
from accel_state.collectives.nested import leaves
from accel_state.seam.backend import DataLayout


class GatherForMetricsError(ValueError):
    """The input cannot be trimmed to one row per real sample."""


def gather_for_metrics(
    data: Any, use_gather_object: bool, num_processes: int, layout: DataLayout | None = None
) -> Any:
    """Return `data` gathered from every rank, less the samples repeated to pad the last batch.

    Under a `layout` whose shards are read by several ranks (tensor parallel), each shard's rows are
    kept once: those of the first rank of its group.
    """
    loader = GradientState().active_dataloader
    # The loader's facts read once, as GradientState's properties read them (None has neither).
    remainder: int = getattr(loader, "remainder", -1)
    end_of_dataloader = bool(getattr(loader, "end_of_dataloader", False))
    tensors_only = isinstance(data, torch.Tensor) or all(
        isinstance(leaf, torch.Tensor) for leaf in leaves(data)
    )
    try:
        # Ranks that pick different branches here meet in different collectives: the check of
        # inputs in each (a header exchange) makes that an error on every rank, not a hang.
        if use_gather_object or not tensors_only:
            gathered = gather_object(data)
        elif remainder >= 0 or num_processes == 1:
            gathered = gather(data)
        else:
            # Without padding, ranks' last batches may differ in size.
            gathered = gather_uneven(data)
    except CollectiveShapeError as error:
        raise CollectiveShapeError(f"gather_for_metrics: {error}") from error
    if layout is not None and layout.ranks_per_shard > 1:
        gathered = _one_copy_per_shard(
            data, gathered, layout.ranks_per_shard, as_objects=use_gather_object or not tensors_only
        )
        num_processes = layout.num_shards
    if num_processes == 1:
        return cut_last_batch(gathered, loader) if end_of_dataloader else gathered
    if remainder < 0 or not end_of_dataloader:
        return gathered
    if (use_gather_object or not tensors_only) and not isinstance(data, (list, tuple)):
        raise GatherForMetricsError(
            "gather_for_metrics(use_gather_object=True) needs a list with one entry per sample to drop "
            f"the padded samples of the last batch, got {type(data).__name__}"
        )
    return trim_padding(gathered, remainder, getattr(loader, "total_batch_size", None))


def _one_copy_per_shard(data: Any, gathered: Any, ranks_per_shard: int, as_objects: bool) -> Any:
    """Keep, of what was gathered in rank order, the part of each group's first rank (collective)."""
    if as_objects:  # a list per rank, concatenated
        per_rank = gather_object([len(data) if isinstance(data, (list, tuple)) else 1])
        return [
            item
            for start, count in _kept(per_rank, ranks_per_shard)
            for item in gathered[start : start + count]
        ]
    rows = [int(t.shape[0]) if t.dim() else 1 for t in leaves(data)]
    per_leaf = list(zip(*gather_object([rows]), strict=True))  # each leaf's rows on each rank
    index = iter(range(len(rows)))

    def select(tensor: torch.Tensor) -> torch.Tensor:
        kept = _kept(list(per_leaf[next(index)]), ranks_per_shard)
        return torch.cat([tensor[start : start + count] for start, count in kept])

    return recursively_apply(select, gathered)


def _kept(per_rank: list[int], ranks_per_shard: int) -> list[tuple[int, int]]:
    """Return (start, count) of each group's first rank among rows laid out rank after rank."""
    starts = [sum(per_rank[:rank]) for rank in range(len(per_rank))]
    return [(starts[rank], per_rank[rank]) for rank in range(0, len(per_rank), ranks_per_shard)]


def last_batch_size(loader: Any) -> int | None:
    """Return the samples of a sized loader's short last batch (None: none, or not known).

    What Accelerate calls the remainder on one process: the dataset's length modulo the batch
    size, when the last batch is not dropped.
    """
    total = getattr(loader, "total_dataset_length", None)
    size = getattr(loader, "total_batch_size", None)
    drop_last = getattr(
        getattr(loader, "batch_sampler", None), "drop_last", getattr(loader, "drop_last", False)
    )
    if not total or not size or drop_last:
        return None
    return total % size or None


def cut_last_batch(gathered: Any, loader: Any) -> Any:
    """Return one process's `gathered` cut to the real samples of the loader's short last batch.

    As Accelerate does on one process: every tensor (or list) is cut to that many rows, so an
    output made per batch rather than per sample (`loss.repeat(batch_size)`) counts each sample
    once; what holds fewer rows, or has no rows (a 0-d tensor, a dict), is left as it is.
    """
    rows = last_batch_size(loader)
    if rows is None:
        return gathered
    if isinstance(gathered, (list, tuple)) and not any(isinstance(item, torch.Tensor) for item in gathered):
        return gathered[:rows]

    def cut(tensor: torch.Tensor) -> torch.Tensor:
        return tensor[:rows] if tensor.dim() > 0 else tensor

    return recursively_apply(cut, gathered)


def trim_padding(gathered: Any, remainder: int, expected_rows: int | None) -> Any:
    """Return the first `remainder` rows of every tensor (or of a gathered list).

    Each must have `expected_rows` rows (one per sample of the global batch), else nothing is cut
    and GatherForMetricsError names what was found.
    """
    if isinstance(gathered, list) and not any(isinstance(item, torch.Tensor) for item in gathered):
        _check_rows("a list", len(gathered), expected_rows, remainder)
        return gathered[:remainder]

    def trim(tensor: torch.Tensor) -> torch.Tensor:
        _check_rows(f"a tensor of shape {tuple(tensor.shape)}", tensor.shape[0], expected_rows, remainder)
        return tensor[:remainder]

    return recursively_apply(trim, gathered)


def _check_rows(what: str, rows: int, expected: int | None, remainder: int) -> None:
    if expected is not None and rows != expected:
        raise GatherForMetricsError(
            f"gather_for_metrics: the last batch holds {remainder} real samples of {expected}, but the "
            f"gathered input is {what} with {rows} rows; pass one row per sample to drop the padding"
        )
