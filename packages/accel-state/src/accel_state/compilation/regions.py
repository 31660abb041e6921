"""Regional compilation: compile each repeated block of a model once, in place.

A model of N identical blocks compiles one graph reused N times (dynamo guards on the code, not on
the instance), so compilation takes about one block's time instead of the whole model's. Blocks are
compiled in place (`Module.compile`): the model keeps its structure and its state dict keys.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from accel_state.compilation.errors import CompileConfigError
from accel_state.compilation.in_place import compile_in_place


def _names(kind: type) -> set[str]:
    """Return the class names of `kind` and its bases (FSDP2 makes `FSDPBlock` out of `Block`)."""
    return {base.__name__ for base in kind.__mro__}


def repeated_block_classes(model: torch.nn.Module) -> set[type]:
    """Return the classes of the blocks that a ModuleList or Sequential holds two or more of, alone."""
    found: set[type] = set()
    for module in model.modules():
        if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            kinds = {type(child) for child in module.children()}
            if len(module) >= 2 and len(kinds) == 1:
                found |= kinds
    return found


def block_classes(model: torch.nn.Module, names: Iterable[str] | None = None) -> set[type]:
    """Return the block classes to compile: those named (`names`, else the model's
    `_no_split_modules`), else the repeated ones. A given name that no module has is an error."""
    wanted = list(names) if names is not None else None
    no_split = getattr(model, "_no_split_modules", None)
    if wanted is None and no_split:
        wanted = [str(name) for name in no_split]
        given = False
    else:
        given = wanted is not None
    if not wanted:
        return repeated_block_classes(model)
    kinds = {type(module) for module in model.modules()}
    chosen = {kind for kind in kinds if _names(kind) & set(wanted)}
    missing = [name for name in wanted if not any(name in _names(kind) for kind in chosen)]
    if given and missing:
        raise CompileConfigError(
            f"regional compilation: the model has no module of class {missing[0]!r} (the blocks to compile)"
        )
    return chosen or repeated_block_classes(model)


def compile_regions(
    module: torch.nn.Module, block_class_names: Iterable[str] | None = None, **compile_kwargs: Any
) -> torch.nn.Module:
    """Compile each block of `module` in place (the outermost ones: a block inside a block is part of
    it) and return `module`; a model without repeated blocks is compiled whole, in place."""
    classes = block_classes(module, block_class_names)
    compiled: list[torch.nn.Module] = []
    for _, candidate in module.named_modules():
        if type(candidate) in classes and not any(_inside(candidate, outer) for outer in compiled):
            compile_in_place(candidate, **compile_kwargs)
            compiled.append(candidate)
    if not compiled:
        compile_in_place(module, **compile_kwargs)
    return module


def _inside(module: torch.nn.Module, outer: torch.nn.Module) -> bool:
    return any(module is inner for inner in outer.modules())
