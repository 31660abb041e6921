"""What a load read from a mapped file, moved into memory of the process's own before an object keeps it.

The reader maps torch files (`torch.load(mmap=True)`), so that checking one hashes the page cache in
place instead of first copying every byte into new memory, whose first touch costs a page fault per
4 KiB (on this project's 2-core machines, more than the copy itself). A restored object must not keep
a mapped tensor: writing to it copies the file's pages one by one, and the mapping keeps the file
open. So the optimizer's state is copied into the tensors it already holds in the same places (its
memory is in use already: no new pages), and anything else a torch file held into new memory.
A model's weights need neither: `load_state_dict` copies them into the parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch


def owned(value: Any) -> Any:
    """Return `value` with its tensors in memory of their own (storages shared in it stay shared)."""
    return copy.deepcopy(value)


def into_optimizer_memory(optimizer: Any, saved: Any) -> Any:
    """Return optimizer state dict `saved` with each state tensor copied into the one `optimizer`
    holds in its place (same shape and dtype, plain CPU memory), the others into new memory.

    Places pair up as `Optimizer.load_state_dict` pairs them: the saved groups' parameter ids in
    order with the optimizer's parameters. A state dict of another form is copied whole.
    """
    held_state = getattr(optimizer, "state", None)
    if not isinstance(saved, Mapping) or not isinstance(saved.get("state"), Mapping):
        return owned(saved)
    try:
        saved_ids = [pid for group in saved["param_groups"] for pid in group["params"]]
        params = [p for group in optimizer.param_groups for p in group["params"]]
    except (AttributeError, KeyError, TypeError):
        return owned(saved)
    if not isinstance(held_state, Mapping) or len(saved_ids) != len(params):
        return owned(saved)
    param_of = dict(zip(saved_ids, params, strict=True))
    state: dict[Any, Any] = {}
    for key, entry in saved["state"].items():
        held = held_state.get(param_of[key], {}) if key in param_of else {}
        if not isinstance(entry, Mapping) or not isinstance(held, Mapping):
            state[key] = owned(entry)
            continue
        state[key] = {name: _into(held.get(name), value) for name, value in entry.items()}
    return {**{key: owned(value) for key, value in saved.items() if key != "state"}, "state": state}


def _into(held: Any, value: Any) -> Any:
    """Return loaded `value` copied into `held` where it fits, else in new memory."""
    if type(value) is not torch.Tensor:
        return owned(value)
    if (
        type(held) is torch.Tensor
        and held.device.type == "cpu"
        and held.layout == torch.strided
        and held.shape == value.shape
        and held.dtype == value.dtype
        and held.is_contiguous()
        and not held.requires_grad
    ):
        with torch.no_grad():
            return held.copy_(value)
    return value.clone()
