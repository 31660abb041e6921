"""Attaching device hooks over a whole model: per module with weights, or per block of a device map."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from accel_big_modeling.hooks.align import AlignDevicesHook, DeviceLike
from accel_big_modeling.hooks.base import add_hook_to_module
from accel_big_modeling.memory.module_sizes import named_module_tensors
from accel_big_modeling.offload.loader import PrefixedDataset

TiedMap = dict[int, dict[torch.device, torch.Tensor]]


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def attach_execution_device_hook(
    module: nn.Module,
    execution_device: DeviceLike | None,
    skip_keys: list[str] | str | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedMap | None = None,
) -> None:
    """Give every submodule holding tensors (and no hook yet) a hook moving inputs to `execution_device`."""
    if not hasattr(module, "_hf_hook") and len(module.state_dict()) > 0:
        hook = AlignDevicesHook(execution_device, skip_keys=skip_keys, tied_params_map=tied_params_map)
        add_hook_to_module(module, hook)
    if preload_module_classes is not None and type(module).__name__ in preload_module_classes:
        return
    for child in module.children():
        attach_execution_device_hook(
            child, execution_device, skip_keys, preload_module_classes, tied_params_map
        )


def attach_align_device_hook(
    module: nn.Module,
    execution_device: DeviceLike | None = None,
    offload: bool = False,
    weights_map: Mapping[str, torch.Tensor] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: list[str] | str | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedMap | None = None,
) -> None:
    """Hook every submodule that owns tensors, so each is materialised alone around its own forward.

    Modules of `preload_module_classes` are hooked as a whole (all their weights loaded before their forward).
    """
    direct = list(named_module_tensors(module))
    whole = offload and preload_module_classes is not None and type(module).__name__ in preload_module_classes
    if direct or whole:
        prefixed = (
            PrefixedDataset(weights_map, f"{module_name}." if module_name else "")
            if weights_map is not None
            else None
        )
        hook = AlignDevicesHook(
            execution_device=execution_device,
            offload=offload,
            weights_map=prefixed,
            offload_buffers=offload_buffers,
            place_submodules=whole,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
        add_hook_to_module(module, hook, append=True)
    if whole:
        return
    for child_name, child in module.named_children():
        attach_align_device_hook(
            child,
            execution_device=execution_device,
            offload=offload,
            weights_map=weights_map,
            offload_buffers=offload_buffers,
            module_name=_join(module_name, child_name),
            skip_keys=skip_keys,
            preload_module_classes=preload_module_classes,
            tied_params_map=tied_params_map,
        )


def attach_align_device_hook_on_blocks(
    module: nn.Module,
    execution_device: DeviceLike | Mapping[str, DeviceLike | None] | None = None,
    offload: bool | Mapping[str, bool] = False,
    weights_map: Mapping[str, torch.Tensor] | None = None,
    offload_buffers: bool = False,
    module_name: str = "",
    skip_keys: list[str] | str | None = None,
    preload_module_classes: list[str] | None = None,
    tied_params_map: TiedMap | None = None,
) -> None:
    """Hook the blocks named in `execution_device` / `offload` (dicts keyed like a device map).

    A block kept on its device gets one hook placing it whole; an offloaded block gets per-module
    offload hooks; the root (`""`) returns outputs on the inputs' device.
    """
    if not isinstance(execution_device, Mapping) and not isinstance(offload, Mapping):
        if not offload:
            hook = AlignDevicesHook(
                execution_device,
                io_same_device=True,
                skip_keys=skip_keys,
                place_submodules=True,
                tied_params_map=tied_params_map,
            )
            add_hook_to_module(module, hook)
        else:
            attach_align_device_hook(
                module,
                execution_device,
                offload=True,
                weights_map=weights_map,
                offload_buffers=offload_buffers,
                module_name=module_name,
                skip_keys=skip_keys,
                tied_params_map=tied_params_map,
            )
        return
    devices: Mapping[str, DeviceLike | None] = (
        execution_device
        if isinstance(execution_device, Mapping)
        else {key: execution_device for key in offload}  # type: ignore[union-attr]
    )
    offloads: Mapping[str, bool] = (
        offload if isinstance(offload, Mapping) else {key: offload for key in devices}
    )
    if module_name in devices and module_name in offloads and not offloads[module_name]:
        hook = AlignDevicesHook(
            execution_device=devices[module_name],
            offload_buffers=offload_buffers,
            io_same_device=(module_name == ""),
            place_submodules=True,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
        add_hook_to_module(module, hook)
        attach_execution_device_hook(module, devices[module_name], skip_keys, tied_params_map=tied_params_map)
    elif module_name in devices and module_name in offloads:
        attach_align_device_hook(
            module,
            execution_device=devices[module_name],
            offload=True,
            weights_map=weights_map,
            offload_buffers=offload_buffers,
            module_name=module_name,
            skip_keys=skip_keys,
            preload_module_classes=preload_module_classes,
            tied_params_map=tied_params_map,
        )
        if not hasattr(module, "_hf_hook"):
            hook = AlignDevicesHook(
                execution_device=devices[module_name],
                io_same_device=(module_name == ""),
                skip_keys=skip_keys,
                tied_params_map=tied_params_map,
            )
            add_hook_to_module(module, hook)
        attach_execution_device_hook(
            module,
            devices[module_name],
            skip_keys,
            preload_module_classes,
            tied_params_map,
        )
    elif module_name == "":
        hook = AlignDevicesHook(
            execution_device=devices.get(""),
            io_same_device=True,
            skip_keys=skip_keys,
            tied_params_map=tied_params_map,
        )
        add_hook_to_module(module, hook)
    for child_name, child in module.named_children():
        attach_align_device_hook_on_blocks(
            child,
            execution_device=devices,
            offload=offloads,
            weights_map=weights_map,
            offload_buffers=offload_buffers,
            module_name=_join(module_name, child_name),
            skip_keys=skip_keys,
            preload_module_classes=preload_module_classes,
            tied_params_map=tied_params_map,
        )
