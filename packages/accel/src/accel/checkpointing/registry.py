"""The custom objects and pre-hooks that every save_state/load_state of one Accelerator includes."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

SaveHook = Callable[[list[torch.nn.Module], list[dict[str, torch.Tensor]], str], None]
LoadHook = Callable[[list[torch.nn.Module], str], None]


class CheckpointRegistry:
    """Custom objects saved with every checkpoint, and the save/load pre-hooks (one per Accelerator)."""

    def __init__(self) -> None:
        self.custom_objects: list[Any] = []
        self.save_hooks: collections.OrderedDict[int, SaveHook] = collections.OrderedDict()
        self.load_hooks: collections.OrderedDict[int, LoadHook] = collections.OrderedDict()

    def register_for_checkpointing(self, *objects: Any) -> None:
        """Add objects with `state_dict`/`load_state_dict` to every save_state/load_state."""
        invalid = [
            f"- item at index {i}, `{type(obj).__name__}`"
            for i, obj in enumerate(objects)
            if not (
                callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))
            )
        ]
        if invalid:
            raise ValueError(
                "register_for_checkpointing: every object needs `state_dict` and `load_state_dict` "
                "methods; these do not:\n" + "\n".join(invalid)
            )
        self.custom_objects.extend(objects)

    def register_save_state_pre_hook(self, hook: SaveHook) -> RemovableHandle:
        """Call `hook(models, weights, output_dir)` before save_state writes the models.

        The hook may write files into `output_dir` (they become part of the checkpoint) and pop
        entries from `weights` to keep save_state from writing those models itself.
        """
        handle = RemovableHandle(self.save_hooks)
        self.save_hooks[handle.id] = hook
        return handle

    def register_load_state_pre_hook(self, hook: LoadHook) -> RemovableHandle:
        """Call `hook(models, input_dir)` before load_state loads the models; it may pop models it loaded."""
        handle = RemovableHandle(self.load_hooks)
        self.load_hooks[handle.id] = hook
        return handle


def registry_of(accelerator: Any) -> CheckpointRegistry:
    """Return the accelerator's registry, creating it on first use."""
    registry = getattr(accelerator, "_checkpoint_registry", None)
    if registry is None:
        registry = accelerator._checkpoint_registry = CheckpointRegistry()
    return registry
