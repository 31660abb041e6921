"""How many bytes each module of a model takes, from shapes and dtypes only (works on meta models)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import torch
from torch import nn

from accel_big_modeling.memory.sizes import as_dtype, dtype_byte_size


def named_module_tensors(
    module: nn.Module,
    include_buffers: bool = True,
    recurse: bool = False,
    remove_non_persistent: bool = False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) for the parameters (and buffers) of `module`, each shared tensor once."""
    yield from module.named_parameters(recurse=recurse)
    if not include_buffers:
        return
    skipped = non_persistent_buffers(module, recurse=recurse) if remove_non_persistent else set()
    for name, buffer in module.named_buffers(recurse=recurse):
        if name not in skipped:
            yield name, buffer


def non_persistent_buffers(module: nn.Module, recurse: bool = False) -> set[str]:
    """Return the names of the buffers of `module` that its state dict leaves out."""
    found = {name for name in module._non_persistent_buffers_set}
    if recurse:
        for prefix, child in module.named_modules():
            if prefix:
                found |= {f"{prefix}.{name}" for name in child._non_persistent_buffers_set}
    return found


def _element_size(
    name: str, tensor: torch.Tensor, dtype: torch.dtype | None, special: dict[str, torch.dtype]
) -> float:
    if name in special:
        return dtype_byte_size(special[name])
    own = dtype_byte_size(tensor.dtype)
    # Integer and bool tensors are never cast when loading, so a target dtype only shrinks floats.
    if dtype is None or not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
        return own
    return min(own, dtype_byte_size(dtype))


def compute_module_sizes(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
    buffers_only: bool = False,
) -> dict[str, int]:
    """Return bytes per module name ("" is the whole model), as loaded with `dtype` and `special_dtypes`."""
    target = as_dtype(dtype) if dtype is not None else None
    special = {key: as_dtype(value) for key, value in (special_dtypes or {}).items()}
    tensors = model.named_buffers() if buffers_only else named_module_tensors(model, recurse=True)
    sizes: dict[str, int] = defaultdict(int)
    for name, tensor in tensors:
        size = int(tensor.numel() * _element_size(name, tensor, target, special))
        parts = name.split(".")
        for depth in range(len(parts) + 1):
            sizes[".".join(parts[:depth])] += size
    sizes.setdefault("", 0)
    return sizes


def compute_module_total_buffer_size(
    model: nn.Module,
    dtype: str | torch.dtype | None = None,
    special_dtypes: dict[str, str | torch.dtype] | None = None,
) -> int:
    """Return the bytes of all buffers of `model` (they stay on the execution device unless offloaded)."""
    return compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes, buffers_only=True).get(
        "", 0
    )


def get_max_layer_size(
    modules: list[tuple[str, nn.Module]], module_sizes: dict[str, int], no_split_module_classes: list[str]
) -> tuple[int, list[str]]:
    """Return the size of the largest unsplittable layer (leaf or no-split class) and its names."""
    max_size = 0
    names: list[str] = []
    pending = list(modules)
    while pending:
        name, module = pending.pop(0)
        children = list(module.named_children()) if isinstance(module, nn.Module) else []
        if not children or type(module).__name__ in no_split_module_classes:
            size = module_sizes.get(name, 0)
            if size > max_size:
                max_size, names = size, [name]
            elif size == max_size:
                names.append(name)
        else:
            pending = [(f"{name}.{child}", sub) for child, sub in children] + pending
    return max_size, names
