"""Sorts the objects passed to `Accelerator.prepare` by kind, remembering their order."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

# Named after the fields of accel_state.PreparedObjects that hold each kind.
MODEL, OPTIMIZER, SCHEDULER, DATA_LOADER = "models", "optimizers", "schedulers", "data_loaders"
OTHER = "other"


def kind_of(obj: Any) -> str:
    """Return which kind of training object `obj` is.

    An adapter's stand-in object (DeepSpeed's DummyOptim) declares its kind with a class attribute
    `prepare_kind` naming one of the kinds above.
    """
    declared = getattr(type(obj), "prepare_kind", None)
    if declared in (MODEL, OPTIMIZER, SCHEDULER, DATA_LOADER):
        return str(declared)
    if isinstance(obj, torch.nn.Module):
        return MODEL
    if isinstance(obj, torch.optim.Optimizer):
        return OPTIMIZER
    if isinstance(obj, DataLoader):
        return DATA_LOADER
    if isinstance(obj, torch.optim.lr_scheduler.LRScheduler) or (
        hasattr(obj, "step") and isinstance(getattr(obj, "optimizer", None), torch.optim.Optimizer)
    ):
        return SCHEDULER
    return OTHER


def optimizers_of(scheduler: Any, prepared: dict[int, Any]) -> list[Any]:
    """Return the prepared optimizer(s) that `scheduler` was built on (by identity of the raw one)."""
    raw = getattr(scheduler, "optimizer", None)
    found = [p for p in prepared.values() if getattr(p, "optimizer", None) is raw]
    return found or list(prepared.values())
