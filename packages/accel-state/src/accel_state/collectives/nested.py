"""Applies a function to every tensor inside nested lists, tuples, namedtuples, dicts and dataclasses."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch


def _is_namedtuple(data: Any) -> bool:
    return isinstance(data, tuple) and hasattr(data, "_fields")


def rebuild_like(data: Any, items: Any) -> Any:
    """Return a container of `data`'s type holding `items` (namedtuples take positional args)."""
    if _is_namedtuple(data):
        return type(data)(*items)
    if isinstance(data, (list, tuple)):
        return type(data)(items)
    return items


def recursively_apply(
    function: Callable[[torch.Tensor], Any],
    data: Any,
    *,
    error_on_other_type: bool = False,
    name: str = "operation",
) -> Any:
    """Return `data` with `function` applied to each tensor; other leaves pass through unchanged."""
    if isinstance(data, torch.Tensor):
        return function(data)
    if isinstance(data, (list, tuple)):
        items = [
            recursively_apply(function, d, error_on_other_type=error_on_other_type, name=name) for d in data
        ]
        return rebuild_like(data, items)
    if isinstance(data, Mapping):
        return type(data)(  # type: ignore[call-arg]  # a concrete mapping type, built from a dict
            {
                k: recursively_apply(function, v, error_on_other_type=error_on_other_type, name=name)
                for k, v in data.items()
            }
        )
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        changes = {
            f.name: recursively_apply(
                function, getattr(data, f.name), error_on_other_type=error_on_other_type, name=name
            )
            for f in dataclasses.fields(data)
            if f.init
        }
        return dataclasses.replace(data, **changes)
    if error_on_other_type:
        raise TypeError(
            f"{name} works on tensors and nested lists/tuples/dicts/dataclasses of tensors, "
            f"got {type(data).__name__}"
        )
    return data


def tensor_leaves(data: Any) -> list[torch.Tensor]:
    """Return the tensors inside `data` in a fixed traversal order."""
    found: list[torch.Tensor] = []
    recursively_apply(found.append, data)
    return found


def leaves(data: Any) -> list[Any]:
    """Return every leaf inside `data`, tensors or not, in `recursively_apply`'s traversal order."""
    if isinstance(data, (list, tuple)):
        return [leaf for item in data for leaf in leaves(item)]
    if isinstance(data, Mapping):
        return [leaf for item in data.values() for leaf in leaves(item)]
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        return [leaf for f in dataclasses.fields(data) if f.init for leaf in leaves(getattr(data, f.name))]
    return [data]


def send_to_device(data: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Return `data` with every tensor moved to `device`; strings and other leaves stay on the host."""
    device = torch.device(device)

    def move(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device == device:
            return tensor
        return tensor.to(device, non_blocking=non_blocking)

    if isinstance(data, torch.Tensor):
        return move(data)
    if (
        hasattr(data, "to")
        and callable(data.to)
        and not isinstance(data, (list, tuple, Mapping))
        and not dataclasses.is_dataclass(data)
    ):
        # Objects like a tokenizer's BatchEncoding know how to move themselves.
        try:
            return data.to(device, non_blocking=non_blocking)
        except TypeError:
            return data.to(device)
    return recursively_apply(move, data)
