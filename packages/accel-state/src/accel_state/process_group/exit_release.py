"""Lets the process group go at exit although DDP models or device meshes still hold it.

A script that keeps its prepared model in a module global (as most do) still holds it when the
exit teardown runs (accel_state.process_group.group): the DDP model's reducer, logger and own reference
keep the group alive past its destroy; an FSDP model's mesh infos hold it too, and so does its
device mesh, which torch's DTensor caches keep alive after the model is gone. gloo's threads then
run on into the interpreter's final teardown, where they can abort the process after all of its
work. Run just before that teardown, this drops those references; nothing can use them after the
group is gone.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.distributed import ProcessGroup
from torch.nn.parallel import DistributedDataParallel

from accel_state.process_group.group import before_teardown

_models: weakref.WeakSet[DistributedDataParallel] = weakref.WeakSet()
_meshes: weakref.WeakSet[Any] = weakref.WeakSet()
_fsdp_models: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
_registered = False
# What a DDP model holds that keeps its process group (and gloo's threads) alive.
_DDP_GROUP_HOLDERS = ("reducer", "logger", "process_group")
# The FSDP2 parameter group's mesh infos and the groups each caches.
_FSDP_MESH_INFOS = ("mesh_info", "post_forward_mesh_info")
_FSDP_MESH_INFO_GROUPS = ("shard_process_group", "replicate_process_group")


def release_ddp_at_exit(model: DistributedDataParallel) -> None:
    """Drop `model`'s references to its process group at exit, before the group is destroyed."""
    _models.add(model)
    _register()


def release_mesh_at_exit(mesh: Any) -> None:
    """Drop the process groups a torch DeviceMesh keeps (`_pg_registry`) at exit."""
    _meshes.add(mesh)
    _register()


def release_fsdp_at_exit(model: torch.nn.Module) -> None:
    """Drop the process groups `model`'s FSDP2 parameter groups cache, at exit."""
    _fsdp_models.add(model)
    _register()


def _register() -> None:
    global _registered
    if not _registered:
        before_teardown(_release)
        _registered = True


def _release() -> None:
    for model in list(_models):
        for name in _DDP_GROUP_HOLDERS:
            model.__dict__.pop(name, None)
    for root in list(_fsdp_models):
        for module in root.modules():
            get_state = getattr(module, "_get_fsdp_state", None)
            param_group = getattr(get_state(), "_fsdp_param_group", None) if get_state else None
            for info_name in _FSDP_MESH_INFOS:
                info = getattr(param_group, info_name, None)
                for name in _FSDP_MESH_INFO_GROUPS:
                    if isinstance(getattr(info, "__dict__", {}).get(name), ProcessGroup):
                        info.__dict__[name] = None
    for mesh in list(_meshes):
        registry = getattr(mesh, "_pg_registry", None)
        if isinstance(registry, dict):
            registry.clear()
