"""Rows of a collated batch: how many there are, taking some of them, joining two batches.

A batch's rows run along dim 0 of every tensor and array, and along every list or tuple of plain
items (strings, numbers: what `default_collate` makes of a batch of strings). Containers of those
(dicts, namedtuples, lists of tensors) are walked; other leaves (None, a number, a 0-d tensor)
belong to no row and are kept as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from accel_data.sharding.batch_sampler import ShardingError

# Either a contiguous run of rows or a list of row numbers.
RowIndex = slice | Sequence[int]

_CONTAINER_ITEMS = (torch.Tensor, np.ndarray, Mapping, list, tuple)


def _is_namedtuple(data: Any) -> bool:
    return isinstance(data, tuple) and hasattr(data, "_fields")


def _rebuild(container: list | tuple, items: list[Any]) -> Any:
    return type(container)(*items) if _is_namedtuple(container) else type(container)(items)


def _rebuild_mapping(mapping: Mapping[Any, Any], items: dict[Any, Any]) -> Any:
    # Mapping declares no constructor; the classes of batches (dict, OrderedDict, BatchEncoding) take a dict.
    mapping_class: Any = type(mapping)
    return mapping_class(items)


def _is_row_sequence(data: Any) -> bool:
    """A list or tuple of plain items: one item per row."""
    return (
        isinstance(data, (list, tuple))
        and not _is_namedtuple(data)
        and not any(isinstance(item, _CONTAINER_ITEMS) for item in data)
    )


def _has_rows(data: Any) -> bool:
    return isinstance(data, (torch.Tensor, np.ndarray)) and data.ndim > 0


def _row_lengths(data: Any, found: list[int]) -> None:
    if _has_rows(data):
        found.append(int(data.shape[0]))
    elif _is_row_sequence(data):
        found.append(len(data))
    elif isinstance(data, Mapping):
        for value in data.values():
            _row_lengths(value, found)
    elif isinstance(data, (list, tuple)):
        for value in data:
            _row_lengths(value, found)


def count_rows(batch: Any) -> int:
    """Return the number of rows of `batch`, which all its tensors, arrays and item lists share."""
    found: list[int] = []
    _row_lengths(batch, found)
    if not found:
        raise ShardingError(
            f"cannot split a batch of type {type(batch).__name__}: it holds no tensor, array or list of items"
        )
    if len(set(found)) > 1:
        raise ShardingError(
            f"cannot split a batch whose parts have different numbers of rows {sorted(set(found))}; "
            "every tensor, array and item list of a batch must have one row per sample"
        )
    return found[0]


def take_rows(batch: Any, index: RowIndex) -> Any:
    """Return a copy of `batch` holding only the rows `index` picks (a slice or row numbers)."""
    if isinstance(batch, torch.Tensor):
        if batch.ndim == 0:
            return batch
        # A view would pickle its whole storage; a copy holds only the rows taken.
        if isinstance(index, slice):
            return batch[index].clone()
        return batch[torch.as_tensor(list(index), dtype=torch.long, device=batch.device)]
    if isinstance(batch, np.ndarray):
        if batch.ndim == 0:
            return batch
        return batch[index].copy() if isinstance(index, slice) else batch[list(index)]
    if _is_row_sequence(batch):
        rows = batch[index] if isinstance(index, slice) else [batch[i] for i in index]
        return type(batch)(rows)
    if isinstance(batch, Mapping):
        return _rebuild_mapping(batch, {key: take_rows(value, index) for key, value in batch.items()})
    if isinstance(batch, (list, tuple)):
        return _rebuild(batch, [take_rows(value, index) for value in batch])
    return batch


def concat_rows(first: Any, second: Any) -> Any:
    """Return the rows of `first` followed by those of `second` (two batches of the same layout)."""
    if isinstance(first, torch.Tensor) and _has_rows(first):
        if tuple(first.shape[1:]) != tuple(second.shape[1:]):
            raise ShardingError(
                f"cannot join batches whose tensors have shapes {tuple(first.shape)} and "
                f"{tuple(second.shape)}: only the first dimension may differ (use drop_last=True or "
                "even_batches=False, or a collate_fn that pads to a fixed length)"
            )
        return torch.cat([first, second.to(first.device)])
    if isinstance(first, np.ndarray) and _has_rows(first):
        return np.concatenate([first, second])
    if _is_row_sequence(first):
        return type(first)(list(first) + list(second))
    if isinstance(first, Mapping):
        if set(first) != set(second):
            raise ShardingError(f"cannot join batches with keys {sorted(first)} and {sorted(second)}")
        return _rebuild_mapping(first, {key: concat_rows(value, second[key]) for key, value in first.items()})
    if isinstance(first, (list, tuple)):
        if len(first) != len(second):
            raise ShardingError(f"cannot join batches of {len(first)} and {len(second)} parts")
        return _rebuild(first, [concat_rows(a, b) for a, b in zip(first, second, strict=True)])
    return first
