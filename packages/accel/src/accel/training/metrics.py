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


class GatherForMetricsError(ValueError):
    """The input cannot be trimmed to one row per real sample."""


def gather_for_metrics(data: Any, use_gather_object: bool, num_processes: int) -> Any:
    """Return `data` gathered from every rank, less the samples repeated to pad the last batch."""
    gradient_state = GradientState()
    loader = gradient_state.active_dataloader
    remainder = gradient_state.remainder
    tensors_only = all(isinstance(leaf, torch.Tensor) for leaf in leaves(data))
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
    if num_processes == 1:
        return cut_last_batch(gathered, loader) if gradient_state.end_of_dataloader else gathered
    if remainder < 0 or not gradient_state.end_of_dataloader:
        return gathered
    if (use_gather_object or not tensors_only) and not isinstance(data, (list, tuple)):
        raise GatherForMetricsError(
            "gather_for_metrics(use_gather_object=True) needs a list with one entry per sample to drop "
            f"the padded samples of the last batch, got {type(data).__name__}"
        )
    return trim_padding(gathered, remainder, getattr(loader, "total_batch_size", None))


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
