"""Whole-model CPU offload hooks: a model lives on the CPU and moves to the device only for its forward."""

from __future__ import annotations

from typing import Any

from torch import nn

from accel_big_modeling.hooks.align import DeviceLike
from accel_big_modeling.hooks.base import ModelHook, remove_hook_from_module
from accel_big_modeling.hooks.moving import default_execution_device, send_to_device


class CpuOffload(ModelHook):
    """Keep a model on the CPU and move it to `execution_device` before its forward.

    It stays there afterwards until `prev_module_hook`'s owner, the next model of a pipeline, offloads it:
    pipelines chain models so only one sits on the device at a time.
    """

    def __init__(
        self, execution_device: DeviceLike | None = None, prev_module_hook: UserCpuOffloadHook | None = None
    ) -> None:
        self.prev_module_hook = prev_module_hook
        self.execution_device = (
            execution_device if execution_device is not None else default_execution_device()
        )

    def init_hook(self, module: nn.Module) -> nn.Module:
        return module.to("cpu")

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.prev_module_hook is not None:
            self.prev_module_hook.offload()
        module.to(self.execution_device)
        return send_to_device(args, self.execution_device), send_to_device(kwargs, self.execution_device)


class UserCpuOffloadHook:
    """The handle `cpu_offload_with_hook` returns: `offload()` sends the model back to the CPU."""

    def __init__(self, model: nn.Module, hook: ModelHook) -> None:
        self.model = model
        self.hook = hook

    def offload(self) -> None:
        """Move the model back to the CPU."""
        self.hook.init_hook(self.model)

    def remove(self) -> None:
        """Remove the hook; the model stays where it is."""
        remove_hook_from_module(self.model)
