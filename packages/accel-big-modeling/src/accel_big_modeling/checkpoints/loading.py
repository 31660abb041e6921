"""Loading a checkpoint into a model, one shard at a time, on the devices a device map gives.

Every shard's header is checked against the model (shapes, missing and unexpected keys) and the
offload folder is checked before any tensor of the model is replaced. Weights for "disk" go
straight from the mapped shard into the offload folder, so a shard never sits in memory whole.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from accel_big_modeling.checkpoints.files import ShardReader, checkpoint_files
from accel_big_modeling.device_map.check import MapDevice, check_device_map, device_for
from accel_big_modeling.errors import BigModelingError
from accel_big_modeling.memory.sizes import as_dtype
from accel_big_modeling.offload.storage import OffloadWriter
from accel_big_modeling.placement import set_module_tensor_to_device
from accel_big_modeling.tied import find_tied_parameters, retie_parameters

logger = logging.getLogger(__name__)


def _listing(names: list[str]) -> str:
    return ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _in_module(module: str, name: str) -> bool:
    return f".{module}." in f".{name}."


def _target_dtype(
    name: str, tensor: torch.Tensor, dtype: torch.dtype | None, keep_in_fp32_modules: list[str] | None
) -> torch.dtype | None:
    if dtype is None or not tensor.dtype.is_floating_point:
        return None
    if dtype in (torch.float16, torch.bfloat16) and any(
        _in_module(m, name) for m in keep_in_fp32_modules or []
    ):
        return torch.float32
    return dtype


def check_checkpoint(
    model: nn.Module, files: list[Path], strict: bool
) -> tuple[dict[str, tuple[tuple[int, ...], torch.dtype]], list[str]]:
    """Return the model's tensors (shape, dtype) and the keys it lacks; raise on a bad shard, shape or key."""
    expected = {name: (tuple(t.shape), t.dtype) for name, t in model.state_dict(keep_vars=True).items()}
    found: dict[str, Path] = {}
    for file in files:
        for name, (shape, _) in ShardReader(file).shapes().items():
            if name in expected and shape != expected[name][0]:
                raise BigModelingError(
                    f"checkpoint key {name!r} in {file.name} has shape {shape}, "
                    f"the model expects {expected[name][0]}"
                )
            found[name] = file
    tied = {name: group for group in find_tied_parameters(model) for name in group}
    missing = [n for n in expected if n not in found and not any(t in found for t in tied.get(n, []))]
    unexpected = [n for n in found if n not in expected]
    if strict and (missing or unexpected):
        parts = [f"missing keys {_listing(missing)}"] if missing else []
        parts += [f"unexpected keys {_listing(unexpected)}"] if unexpected else []
        raise BigModelingError(f"checkpoint {files[0].parent} does not match the model: {'; '.join(parts)}")
    if missing:
        logger.warning(
            "checkpoint %s lacks %s: they keep their current values", files[0].parent, _listing(missing)
        )
    if unexpected:
        logger.warning(
            "checkpoint %s holds %s, which the model does not use", files[0].parent, _listing(unexpected)
        )
    return expected, missing


def load_checkpoint_in_model(
    model: nn.Module,
    checkpoint: str | os.PathLike[str],
    device_map: Mapping[str, MapDevice] | None = None,
    offload_folder: str | os.PathLike[str] | None = None,
    dtype: str | torch.dtype | None = None,
    offload_state_dict: bool = False,
    offload_buffers: bool = False,
    keep_in_fp32_modules: list[str] | None = None,
    strict: bool = False,
) -> None:
    """Load `checkpoint` (a file, a folder, or a sharded index) into `model` (meta or not).

    Each weight lands on the device `device_map` gives it; "disk" weights go to `offload_folder`.
    `offload_state_dict` is accepted for Accelerate's signature: shards are memory-mapped and read one
    at a time, so CPU weights never need a temporary trip to disk. `keep_in_fp32_modules` keeps those
    modules in float32 when `dtype` is float16 or bfloat16. With `strict`, a missing or unexpected key
    is an error; otherwise a warning.
    """
    del offload_state_dict  # see the docstring: not needed with memory-mapped shards
    files = checkpoint_files(checkpoint)
    if device_map is not None:
        check_device_map(model, device_map)
    uses_disk = device_map is not None and "disk" in device_map.values()
    if uses_disk and offload_folder is None:
        disk = [name for name, device in (device_map or {}).items() if device == "disk"]
        raise BigModelingError(f"device_map sends {_listing(disk)} to disk: pass offload_folder")
    target = as_dtype(dtype) if dtype is not None else None
    expected, _ = check_checkpoint(model, files, strict)
    buffers = {name for name, _ in model.named_buffers()}
    tied_groups = find_tied_parameters(model)
    writer = OffloadWriter(offload_folder) if uses_disk and offload_folder is not None else None
    current = dict(model.state_dict(keep_vars=True))
    for file in files:
        to_disk: dict[str, torch.Tensor] = {}
        for name, tensor in ShardReader(file).items():
            if name not in expected:
                continue
            new_dtype = _target_dtype(name, tensor, target, keep_in_fp32_modules)
            if device_map is not None:
                device: MapDevice = device_for(device_map, name)
            else:
                own = current[name].device
                device = own if own.type != "meta" else "cpu"
            if device == "disk" and (offload_buffers or name not in buffers):
                to_disk[name] = tensor.to(new_dtype) if new_dtype is not None else tensor
                set_module_tensor_to_device(model, name, "meta", dtype=new_dtype)
                continue
            # A disk module's buffers stay in memory unless offload_buffers: hooks keep them on the device.
            device = "cpu" if device == "disk" else device
            set_module_tensor_to_device(model, name, device, value=tensor, dtype=new_dtype, copy=True)
        if writer is not None:
            writer.write(to_disk)
        del to_disk
    if writer is not None:
        writer.finish()
    retie_parameters(model, tied_groups)
