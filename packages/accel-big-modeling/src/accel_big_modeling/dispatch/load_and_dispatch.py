"""Load a checkpoint and dispatch the model in one call, the usual way to run a big model."""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
from torch import nn

from accel_big_modeling.checkpoints.loading import load_checkpoint_in_model
from accel_big_modeling.device_map.balanced import get_balanced_memory
from accel_big_modeling.device_map.check import MapDevice
from accel_big_modeling.device_map.infer import infer_auto_device_map
from accel_big_modeling.dispatch.dispatch import dispatch_model
from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.memory.max_memory import Device

AUTO_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def load_checkpoint_and_dispatch(
    model: nn.Module,
    checkpoint: str | os.PathLike[str],
    device_map: str | Mapping[str, MapDevice] | None = None,
    max_memory: Mapping[Device, int | str] | None = None,
    no_split_module_classes: list[str] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    offload_buffers: bool = False,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool | None = None,
    skip_keys: list[str] | str | None = None,
    preload_module_classes: list[str] | None = None,
    force_hooks: bool = False,
    strict: bool = False,
) -> nn.Module:
    """Return `model` (usually built under `init_empty_weights`) loaded from `checkpoint` and dispatched.

    `device_map` is a dict or "auto"/"balanced" (even over GPUs), "balanced_low_0" (GPU 0 kept light
    for generation) or "sequential" (fill devices in order), computed within `max_memory`.
    """
    if isinstance(device_map, str):
        if device_map not in AUTO_MAPS:
            raise BigModelingError(
                f"device_map {device_map!r} is not one of {', '.join(AUTO_MAPS)} or a dict"
            )
        if device_map != "sequential":
            max_memory = get_balanced_memory(
                model,
                max_memory=max_memory,
                no_split_module_classes=no_split_module_classes,
                dtype=dtype,
                low_zero=device_map == "balanced_low_0",
            )
        device_map = infer_auto_device_map(
            model,
            max_memory=max_memory,
            no_split_module_classes=no_split_module_classes,
            dtype=dtype,
            offload_buffers=offload_buffers,
        )
    load_checkpoint_in_model(
        model,
        checkpoint,
        device_map=device_map,
        offload_folder=offload_folder,
        dtype=dtype,
        offload_state_dict=bool(offload_state_dict),
        offload_buffers=offload_buffers,
        strict=strict,
    )
    if device_map is None:
        return model
    return dispatch_model(
        model,
        device_map=device_map,
        offload_dir=offload_folder,
        offload_buffers=offload_buffers,
        skip_keys=skip_keys,
        preload_module_classes=preload_module_classes,
        force_hooks=force_hooks,
    )
