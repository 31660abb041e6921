"""`gather_for_metrics`: gather evaluation outputs and keep exactly one row per real sample.

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
from accel_state.nested import leaves


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
    if num_processes == 1 or remainder < 0 or not gradient_state.end_of_dataloader:
        return gathered
    if (use_gather_object or not tensors_only) and not isinstance(data, (list, tuple)):
        raise GatherForMetricsError(
            "gather_for_metrics(use_gather_object=True) needs a list with one entry per sample to drop "
            f"the padded samples of the last batch, got {type(data).__name__}"
        )
    return trim_padding(gathered, remainder, getattr(loader, "total_batch_size", None))


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
