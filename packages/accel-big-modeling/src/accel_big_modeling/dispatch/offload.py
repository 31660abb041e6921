"""Whole-model offload: every weight on the CPU or on disk, brought to the device one module at a time."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn

from accel_big_modeling.hooks.align import AlignDevicesHook, DeviceLike
from accel_big_modeling.hooks.attach import attach_align_device_hook
from accel_big_modeling.hooks.base import add_hook_to_module
from accel_big_modeling.hooks.cpu_offload import CpuOffload, UserCpuOffloadHook
from accel_big_modeling.offload.loader import OffloadedWeightsLoader
from accel_big_modeling.offload.storage import offload_state_dict, read_offload_index


def _first_device(model: nn.Module) -> torch.device:
    return next(iter(model.parameters())).device


def cpu_offload(
    model: nn.Module,
    execution_device: DeviceLike | None = None,
    offload_buffers: bool = False,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Return `model` with its weights on the CPU, each module's moved to `execution_device` to run."""
    if execution_device is None:
        execution_device = _first_device(model)
    if state_dict is None:
        state_dict = {name: tensor.to("cpu") for name, tensor in model.state_dict().items()}
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True), append=True)
    attach_align_device_hook(
        model,
        execution_device=execution_device,
        offload=True,
        offload_buffers=offload_buffers,
        weights_map=state_dict,
        preload_module_classes=preload_module_classes,
    )
    return model


def cpu_offload_with_hook(
    model: nn.Module,
    execution_device: DeviceLike | None = None,
    prev_module_hook: UserCpuOffloadHook | None = None,
) -> tuple[nn.Module, UserCpuOffloadHook]:
    """Return `model` moved whole to the device at its forward, and a handle to offload it back later.

    Cheaper than `cpu_offload` for pipelines of models run in turn: pass each handle as the next model's
    `prev_module_hook`.
    """
    hook = CpuOffload(execution_device=execution_device, prev_module_hook=prev_module_hook)
    add_hook_to_module(model, hook, append=True)
    return model, UserCpuOffloadHook(model, hook)


def disk_offload(
    model: nn.Module,
    offload_dir: str | os.PathLike[str],
    execution_device: DeviceLike | None = None,
    offload_buffers: bool = False,
    preload_module_classes: list[str] | None = None,
) -> nn.Module:
    """Return `model` with its weights in `offload_dir` (memory-mapped), each module's read for its forward.

    A folder already holding an offload index is reused as is; otherwise the weights are written there.
    """
    if read_offload_index(offload_dir) is None:
        offload_state_dict(offload_dir, model.state_dict())
    if execution_device is None:
        execution_device = _first_device(model)
    weights_map = OffloadedWeightsLoader(save_folder=offload_dir)
    add_hook_to_module(model, AlignDevicesHook(io_same_device=True), append=True)
    attach_align_device_hook(
        model,
        execution_device=execution_device,
        offload=True,
        offload_buffers=offload_buffers,
        weights_map=weights_map,
        preload_module_classes=preload_module_classes,
    )
    return model
