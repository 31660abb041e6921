"""How an FSDP2 model and its device mesh let their process groups go at exit (see
accel_state.backends.teardown): the model's parameter groups cache the groups in their mesh
infos, and a DeviceMesh keeps its own in `_pg_registry`."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed import ProcessGroup

# The FSDP2 parameter group's mesh infos and the groups each caches.
_MESH_INFOS = ("mesh_info", "post_forward_mesh_info")
_MESH_INFO_GROUPS = ("shard_process_group", "replicate_process_group")


def release_parameter_groups(root: torch.nn.Module) -> None:
    """Drop the process groups the FSDP2 parameter groups of `root`'s modules cache."""
    for module in root.modules():
        get_state = getattr(module, "_get_fsdp_state", None)
        param_group = getattr(get_state(), "_fsdp_param_group", None) if get_state else None
        for info_name in _MESH_INFOS:
            info = getattr(param_group, info_name, None)
            for name in _MESH_INFO_GROUPS:
                if isinstance(getattr(info, "__dict__", {}).get(name), ProcessGroup):
                    info.__dict__[name] = None


def release_mesh_groups(mesh: Any) -> None:
    """Drop the process groups a torch DeviceMesh keeps (`_pg_registry`)."""
    registry = getattr(mesh, "_pg_registry", None)
    if isinstance(registry, dict):
        registry.clear()
