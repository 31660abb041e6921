"""Dispatching a model along a device map: hooks that move weights and activations where the map says."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from accel_big_modeling.device_map.check import MapDevice, check_device_map
from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.hooks.attach import attach_align_device_hook_on_blocks
from accel_big_modeling.offload.loader import OffloadedWeightsLoader, TiedWeightsMap
from accel_big_modeling.offload.storage import offload_state_dict, read_offload_index
from accel_big_modeling.tied import find_tied_parameters, retie_parameters


def _submodules_state_dict(model: nn.Module, names: list[str]) -> dict[str, torch.Tensor]:
    state = model.state_dict()
    return {
        key: value
        for key, value in state.items()
        if any(name == "" or key == name or key.startswith(name + ".") for name in names)
    }


def _main_device(device_map: Mapping[str, MapDevice]) -> MapDevice:
    devices = set(device_map.values())
    if devices <= {"cpu", "disk"}:
        return "cpu"
    return next(device for device in device_map.values() if device not in ("cpu", "disk"))


def _refuse_moves(model: nn.Module) -> None:
    """Make `.to(device)` / `.cuda()` raise: moving would undo the offload hooks."""

    def guard(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if method.__name__ == "to" and torch._C._nn._parse_to(*args, **kwargs)[0] is None:
                return method(*args, **kwargs)  # a dtype-only call moves nothing
            raise BigModelingError(
                f"{type(model).__name__} has modules offloaded to cpu or disk: it cannot be moved with "
                f".{method.__name__}(); dispatch it again instead"
            )

        return wrapper

    for name in ("to", "cuda"):
        setattr(model, name, guard(getattr(model, name)))


def dispatch_model(
    model: nn.Module,
    device_map: Mapping[str, MapDevice],
    main_device: MapDevice | None = None,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    offload_dir: str | os.PathLike[str] | None = None,
    offload_index: Mapping[str, dict[str, Any]] | None = None,
    offload_buffers: bool = False,
    skip_keys: list[str] | str | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
) -> nn.Module:
    """Place `model` along `device_map` and return it, with `hf_device_map` set.

    Modules on "cpu" (when a GPU is the main device) or "disk" are offloaded: their weights come to the
    main device for their forward only. Disk weights are read from `offload_dir` (written here from the
    model's weights if the folder holds no offload index yet) or `offload_index`.
    """
    check_device_map(model, device_map)
    device_map = dict(device_map)
    if len(set(device_map.values())) == 1 and not force_hooks:
        device = next(iter(device_map.values()))
        if device == "disk":
            raise BigModelingError(
                "device_map sends the whole model to disk: use disk_offload(model, offload_dir)"
            )
        model.to(device)
        model.hf_device_map = device_map  # type: ignore[assignment]
        return model
    if main_device is None:
        main_device = _main_device(device_map)
    disk_modules = [name for name, device in device_map.items() if device == "disk"]
    if disk_modules and offload_dir is None and offload_index is None:
        raise BigModelingError(f"device_map sends {disk_modules[:5]} to disk: pass offload_dir")
    if main_device != "cpu":
        cpu_modules = [name for name, device in device_map.items() if device == "cpu"]
        if state_dict is None and cpu_modules:
            state_dict = _submodules_state_dict(model, cpu_modules)
    if (
        disk_modules
        and offload_index is None
        and offload_dir is not None
        and read_offload_index(offload_dir) is None
    ):
        offload_state_dict(offload_dir, _submodules_state_dict(model, disk_modules))
    execution_device: dict[str, MapDevice] = {
        name: main_device if device in ("cpu", "disk") else device for name, device in device_map.items()
    }
    execution_device[""] = main_device
    offloaded = ("disk",) if main_device in ("cpu", "mps") else ("cpu", "disk")
    offload = {name: device in offloaded for name, device in device_map.items()}
    folder = offload_dir if disk_modules else None
    tied_groups = find_tied_parameters(model)
    weights_map: Mapping[str, torch.Tensor] | None = None
    if state_dict is not None or folder is not None or offload_index is not None:
        loader = OffloadedWeightsLoader(
            state_dict=state_dict,
            save_folder=folder,
            index=offload_index,
            device=main_device if offload_index is not None and main_device != "cpu" else None,
        )
        weights_map = TiedWeightsMap(loader, tied_groups)
    attach_align_device_hook_on_blocks(
        model,
        execution_device=execution_device,
        offload=offload,
        offload_buffers=offload_buffers,
        weights_map=weights_map,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
    )
    retie_parameters(model, tied_groups)
    if any(offload.values()):
        _refuse_moves(model)
    model.hf_device_map = device_map  # type: ignore[assignment]
    return model
