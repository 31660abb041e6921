"""Device maps: which module goes on which GPU, on the CPU or on disk, within the memory budgets."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch
from torch import nn

from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.memory.max_memory import Device, get_max_memory
from accel_big_modeling.memory.module_sizes import (
    compute_module_sizes,
    compute_module_total_buffer_size,
    get_max_layer_size,
)
from accel_big_modeling.memory.sizes import format_size
from accel_big_modeling.tied import find_tied_parameters

logger = logging.getLogger(__name__)

Entry = tuple[str, nn.Module | torch.Tensor]


def _inside(module_name: str, tensor_name: str) -> bool:
    return module_name == "" or tensor_name == module_name or tensor_name.startswith(module_name + ".")


def _top_level(model: nn.Module) -> list[Entry]:
    return [
        *model.named_parameters(recurse=False),
        *model.named_children(),
        *model.named_buffers(recurse=False),
    ]


def _children(name: str, module: nn.Module | torch.Tensor) -> list[Entry]:
    if not isinstance(module, nn.Module):
        return []
    children: list[Entry] = [*module.named_parameters(recurse=False), *module.named_children()]
    return [(f"{name}.{child}", sub) for child, sub in children]


def _no_split(module: nn.Module | torch.Tensor, classes: list[str]) -> bool:
    return (
        not isinstance(module, nn.Module) or not list(module.children()) or type(module).__name__ in classes
    )


def _modules_only(entries: list[Entry]) -> list[tuple[str, nn.Module]]:
    return [(name, module) for name, module in entries if isinstance(module, nn.Module)]


def _no_split_classes(no_split_module_classes: list[str] | str | None) -> list[str]:
    if no_split_module_classes is None:
        return []
    if isinstance(no_split_module_classes, str):
        return [no_split_module_classes]
    return list(no_split_module_classes)


def check_budget_holds_largest_layer(
    model: nn.Module, budgets: Mapping[Device, int], sizes: dict[str, int], no_split: list[str]
) -> None:
    """Raise if no device's budget holds the largest unsplittable layer (offloaded layers run there)."""
    compute_budgets = {device: budget for device, budget in budgets.items() if device != "disk"}
    if not compute_budgets:
        return
    size, names = get_max_layer_size(_modules_only(_top_level(model)), sizes, no_split)
    best_device, best = max(compute_budgets.items(), key=lambda item: item[1])
    if names and size > best:
        module = model.get_submodule(names[0])
        raise BigModelingError(
            f"max_memory[{best_device!r}] = {format_size(best)} cannot hold even one unsplittable block: "
            f"{names[0]!r} ({type(module).__name__}) needs {format_size(size)}"
        )


def infer_auto_device_map(
    model: nn.Module,
    max_memory: Mapping[Device, int | str] | None = None,
    no_split_module_classes: list[str] | str | None = None,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    verbose: bool = False,
    clean_result: bool = True,
    offload_buffers: bool = False,
) -> dict[str, Device]:
    """Return a device map filling the GPUs in order, then the CPU, then the disk, as Accelerate does.

    The main device keeps room for the largest layer (offloaded layers come back there to run); modules
    of `no_split_module_classes` are never split; tied parameters land on one device.
    """
    budgets = get_max_memory(max_memory)
    no_split = _no_split_classes(no_split_module_classes)
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    if max_memory is not None:
        check_budget_holds_largest_layer(model, budgets, sizes, no_split)
    devices: list[Device] = list(budgets) + ([] if "disk" in budgets else ["disk"])
    gpus = [device for device in devices if device not in ("cpu", "disk")]
    main_devices: list[Device] = ["mps"] if "mps" in gpus else ([gpus[0], "cpu"] if gpus else ["cpu"])
    tied_groups = find_tied_parameters(model)
    pending = _top_level(model)
    device_map: dict[str, Device] = {}
    used: dict[Device, int] = {device: 0 for device in devices}
    buffer_sizes: dict[Device, int] = {}
    current = 0
    max_layer, max_layer_names = get_max_layer_size(_modules_only(pending), sizes, no_split)

    def say(message: str) -> None:
        if verbose:
            print(message)

    while pending:
        name, module = pending.pop(0)
        say(f"Treating module {name}.")
        max_layer_names = [n for n in max_layer_names if not _inside(name, n)]
        if not max_layer_names:
            max_layer, max_layer_names = get_max_layer_size(_modules_only(pending), sizes, no_split)
        size = sizes[name]
        # Tensors tied to this module's tensors but living outside it: their modules must come along.
        outside = [
            tensor
            for group in tied_groups
            if any(_inside(name, k) for k in group) and not all(_inside(name, k) for k in group)
            for tensor in group
            if not _inside(name, tensor)
        ]
        tied_names: list[str] = []
        for tensor in outside:
            owner = next((n for n, _ in pending if _inside(n, tensor)), None)
            if owner is not None and owner not in tied_names:
                tied_names.append(owner)
        # A shared tensor is counted once, under its first name, so the owners' sizes add up exactly.
        tied_size = size + sum(sizes[owner] for owner in tied_names)
        device = devices[current]
        reserved = max_layer if device in main_devices else 0
        limit = None if device == "disk" else budgets[device] - reserved
        if limit is None or used[device] + tied_size <= limit:
            say(f"Putting {name} {tied_names or ''} (size={tied_size}) on {device}.")
            used[device] += tied_size
            device_map[name] = device
            for owner in tied_names:
                pending = [(n, m) for n, m in pending if n != owner]
                device_map[owner] = device
            if not offload_buffers and isinstance(module, nn.Module):
                buffer_sizes[device] = buffer_sizes.get(device, 0) + compute_module_total_buffer_size(
                    module, dtype=dtype, special_dtypes=special_dtypes
                )
            continue
        if tied_names and used[device] + size <= limit:
            # The module fits alone: split one of the tied modules so the part holding the tie can follow.
            splittable = [(n, m) for n, m in pending if n in tied_names and not _no_split(m, no_split)]
            if splittable:
                owner, owner_module = splittable[0]
                say(f"Splitting tied module {owner}.")
                index = next(i for i, (n, _) in enumerate(pending) if n == owner)
                pending = [
                    (name, module),
                    *pending[:index],
                    *_children(owner, owner_module),
                    *pending[index + 1 :],
                ]
                max_layer, max_layer_names = get_max_layer_size(_modules_only(pending), sizes, no_split)
                continue
        if used[device] + size >= limit and not _no_split(module, no_split):
            say(f"Splitting {name}.")
            pending = [*_children(name, module), *pending]
            max_layer, max_layer_names = get_max_layer_size(_modules_only(pending), sizes, no_split)
            continue
        say(f"Not enough space on {device} for {name}, going to the next device.")
        used[device] += reserved
        current += 1
        pending.insert(0, (name, module))

    off_host = buffer_sizes.get("cpu", 0) + buffer_sizes.get("disk", 0)
    if off_host and gpus and not offload_buffers:
        logger.warning(
            "Offloaded layers keep %d bytes of buffers on the execution device; pass offload_buffers=True "
            "if that runs out of memory.",
            off_host,
        )
    return clean_device_map(device_map) if clean_result else device_map


def clean_device_map(device_map: dict[str, Device], module_name: str = "") -> dict[str, Device]:
    """Merge the entries under one module into one entry when they all name the same device (in place)."""
    under = [key for key in device_map if _inside(module_name, key)]
    values = {device_map[key] for key in under}
    if len(values) == 1 and len(under) > 1:
        value = device_map[under[0]]
        for key in under:
            del device_map[key]
        device_map[module_name] = value
        return device_map
    depth = len(module_name.split(".")) + 1 if module_name else 1
    children = {".".join(key.split(".")[:depth]) for key in under if len(key) > len(module_name)}
    for child in sorted(children):
        if any(_inside(child, key) for key in device_map):
            clean_device_map(device_map, child)
    return device_map
