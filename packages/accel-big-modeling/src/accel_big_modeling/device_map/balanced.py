"""Balanced budgets: split a model evenly over the GPUs instead of filling the first one."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from accel_big_modeling.memory.max_memory import Device, get_max_memory
from accel_big_modeling.memory.module_sizes import compute_module_sizes


def _leaves(sizes: Mapping[str, int]) -> list[str]:
    parents = {name.rsplit(".", 1)[0] for name in sizes if "." in name}
    return [name for name in sizes if name and name not in parents]


def get_balanced_memory(
    model: nn.Module,
    max_memory: Mapping[Device, int | str] | None = None,
    no_split_module_classes: list[str] | str | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    low_zero: bool = False,
) -> dict[Device, int]:
    """Return budgets for `infer_auto_device_map` that spread the model evenly over the GPUs.

    Each GPU but the last gets the model's size divided by the GPU count plus a margin (the largest
    no-split block or the mean layer, times 1.25); `low_zero` leaves GPU 0 as empty as possible for
    generation's own tensors. Without GPUs the budgets are returned unchanged.
    """
    unset = max_memory is None
    budgets = get_max_memory(max_memory)
    gpus = sorted(key for key, value in budgets.items() if isinstance(key, int) and value > 0)
    if not gpus:
        return budgets
    if len(gpus) == 1:
        low_zero = False
        if unset:
            # One GPU and no user budget: keep 10% free for activations.
            budgets[gpus[0]] = int(budgets[gpus[0]] * 0.9)
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    per_gpu = sizes[""] // (len(gpus) - 1 if low_zero else len(gpus))
    classes = (
        [no_split_module_classes] if isinstance(no_split_module_classes, str) else no_split_module_classes
    )
    block = max(
        (
            sizes[name]
            for name, module in model.named_modules()
            if name and type(module).__name__ in (classes or [])
        ),
        default=0,
    )
    # Mean size of the last modules (the parents of the leaf tensors).
    modules = {name: size for name, size in sizes.items() if name not in set(_leaves(sizes))}
    finals = _leaves(modules)
    mean_final = int(sum(modules[name] for name in finals) / max(len(finals), 1))
    per_gpu += int(1.25 * max(block, mean_final))
    for index in gpus[:-1]:
        cap = budgets[index] if low_zero and index == gpus[0] else per_gpu
        budgets[index] = min(cap, budgets[index])
    if low_zero:
        others = sum(budgets[index] for index in gpus[1:])
        budgets[gpus[0]] = min(max(0, sizes[""] - others), budgets[gpus[0]])
    return budgets
