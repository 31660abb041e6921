"""The hook that brings a module's weights and inputs to its execution device, and offloads them after."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.hooks.base import ModelHook
from accel_big_modeling.hooks.moving import find_device, send_to_device
from accel_big_modeling.memory.module_sizes import named_module_tensors, non_persistent_buffers
from accel_big_modeling.placement import set_module_tensor_to_device

DeviceLike = int | str | torch.device


class AlignDevicesHook(ModelHook):
    """Run a module on `execution_device`: inputs moved there, and with `offload` its weights too.

    With `offload`, the weights live in `weights_map` (a state dict or an `OffloadedWeightsLoader`) and
    the module holds meta tensors: each forward materialises them, runs, and drops them again, so one
    module at a time takes memory. Weights read from a memory-mapped offload folder are used in place
    when the execution device is the CPU. `io_same_device` returns outputs on the inputs' device.
    """

    def __init__(
        self,
        execution_device: DeviceLike | None = None,
        offload: bool = False,
        io_same_device: bool = False,
        weights_map: Mapping[str, torch.Tensor] | None = None,
        offload_buffers: bool = False,
        place_submodules: bool = False,
        skip_keys: list[str] | str | None = None,
        tied_params_map: dict[int, dict[torch.device, torch.Tensor]] | None = None,
    ) -> None:
        self.execution_device = execution_device
        self.offload = offload
        self.io_same_device = io_same_device
        self.weights_map = weights_map
        self.offload_buffers = offload_buffers
        self.place_submodules = place_submodules
        self.skip_keys = skip_keys
        # Accepted for Accelerate's signature; tied tensors are read by name from the weights map instead.
        self.tied_params_map = tied_params_map
        self.input_device: torch.device | None = None
        self.original_devices: dict[str, torch.device] = {}

    def __repr__(self) -> str:
        return (
            f"AlignDevicesHook(execution_device={self.execution_device}, offload={self.offload}, "
            f"io_same_device={self.io_same_device}, offload_buffers={self.offload_buffers}, "
            f"place_submodules={self.place_submodules}, skip_keys={self.skip_keys!r})"
        )

    def _offloaded(self, module: nn.Module) -> list[str]:
        tensors = named_module_tensors(
            module,
            include_buffers=self.offload_buffers,
            recurse=self.place_submodules,
            remove_non_persistent=True,
        )
        return [name for name, _ in tensors]

    def init_hook(self, module: nn.Module) -> nn.Module:
        if self.execution_device is None:
            return module
        self.original_devices = {
            name: tensor.device
            for name, tensor in named_module_tensors(module, recurse=self.place_submodules)
        }
        if not self.offload:
            for name, _ in named_module_tensors(module, recurse=self.place_submodules):
                set_module_tensor_to_device(module, name, self.execution_device)
            return module
        names = self._offloaded(module)
        if self.weights_map is None:
            state = dict(
                named_module_tensors(
                    module, include_buffers=self.offload_buffers, recurse=self.place_submodules
                )
            )
            self.weights_map = {name: state[name].to("cpu") for name in names}
        absent = [name for name in names if name not in self.weights_map]
        if absent:
            raise BigModelingError(
                f"offloaded weight {absent[0]!r} of {type(module).__name__} is not in the weights map "
                "(state dict or offload folder)"
            )
        for name in names:
            set_module_tensor_to_device(module, name, "meta")
        kept = non_persistent_buffers(module, recurse=self.place_submodules)
        for name, _ in module.named_buffers(recurse=self.place_submodules):
            if not self.offload_buffers or name in kept:
                set_module_tensor_to_device(module, name, self.execution_device)
        return module

    def pre_forward(
        self, module: nn.Module, *args: Any, **kwargs: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if self.io_same_device:
            self.input_device = find_device([args, kwargs])
        if self.execution_device is None:
            return args, kwargs
        if self.offload and self.weights_map is not None:
            for name in self._offloaded(module):
                set_module_tensor_to_device(module, name, self.execution_device, value=self.weights_map[name])
        return (
            send_to_device(args, self.execution_device),
            send_to_device(kwargs, self.execution_device, skip_keys=self.skip_keys),
        )

    def post_forward(self, module: nn.Module, output: Any) -> Any:
        if self.offload and self.execution_device is not None:
            for name in self._offloaded(module):
                set_module_tensor_to_device(module, name, "meta")
        if self.io_same_device and self.input_device is not None:
            output = send_to_device(output, self.input_device, skip_keys=self.skip_keys)
        return output

    def detach_hook(self, module: nn.Module) -> nn.Module:
        if self.offload and self.weights_map is not None:
            for name, device in self.original_devices.items():
                if device.type != "meta" and name in self.weights_map:
                    set_module_tensor_to_device(module, name, device, value=self.weights_map[name], copy=True)
        return module
