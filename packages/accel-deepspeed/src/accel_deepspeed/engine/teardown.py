"""How DeepSpeed's engines and groups let the process group go at exit (see
accel_state.backends.teardown, which runs these just before the group is torn down).

accel tears the process group down at exit, after a garbage collection, because gloo groups still
alive when the interpreter finalizes can abort the process after all of its work. DeepSpeed keeps
groups where that collection cannot reach them: in its module globals (the clone of the world
group every ZeRO optimizer reduces over) and in engines a script still references. So each engine
is destroyed (hooks, buffers), then DeepSpeed's references to groups are dropped, so that the
collection that follows frees them. Among those: default arguments (`group=GroupMember.WORLD` of
its torch comm backend's barriers) bound when deepspeed.comm.torch is imported, after the group exists.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from typing import Any

import torch
from torch.distributed import ProcessGroup


def destroy_engine(engine: Any) -> None:
    """Destroy `engine` (its hooks and buffers), which may hold process groups."""
    engine.destroy()


def drop_deepspeed_groups() -> None:
    """Drop the references to process groups DeepSpeed keeps in its modules and objects."""
    groups = sys.modules.get("deepspeed.utils.groups")
    if groups is not None:
        for name, value in list(vars(groups).items()):
            if name.startswith("_") and name.endswith("_GROUP"):
                setattr(groups, name, {} if isinstance(value, dict) else None)
        if getattr(groups, "mesh_device", None) is not None:
            setattr(groups, "mesh_device", None)  # noqa: B010 - a module attribute mypy cannot see
    comm = sys.modules.get("deepspeed.comm.torch")
    backend_class = getattr(comm, "TorchBackend", None)
    if backend_class is not None:
        _drop_default_groups(backend_class)
    # A script's globals may still hold the engine, and DeepSpeed objects the collection cannot free
    # hold groups too (its optimizers, ZeRO-3's zero.Init context and parameter offload, parameters).
    for holder in gc.get_objects():
        with contextlib.suppress(Exception):  # an odd object must not stop the others' release
            # type(), not isinstance(): Parameter's isinstance reads attributes of every object,
            # and some warn when read (torch.distributed.reduce_op's deprecation).
            kind = type(holder)
            if str(kind.__module__).startswith("deepspeed.") or issubclass(kind, torch.nn.Parameter):
                _drop_group_attributes(holder)


def _drop_group_attributes(holder: Any) -> None:
    """Set every attribute of `holder` that is a process group, or a list of them, to None."""
    try:
        attributes = object.__getattribute__(holder, "__dict__")
    except Exception:  # noqa: BLE001 - objects without a plain __dict__ hold no group attribute
        return
    if not isinstance(attributes, dict):
        return
    for name, value in list(attributes.items()):
        if isinstance(value, ProcessGroup):
            attributes[name] = None
        elif isinstance(value, list) and any(isinstance(item, ProcessGroup) for item in value):
            attributes[name] = [None if isinstance(item, ProcessGroup) else item for item in value]


def _drop_default_groups(cls: type) -> None:
    """Replace process groups bound as default arguments of `cls`'s methods by None (the default
    group, looked up at call time)."""
    for method in vars(cls).values():
        defaults = getattr(method, "__defaults__", None)
        if defaults and any(isinstance(value, ProcessGroup) for value in defaults):
            method.__defaults__ = tuple(None if isinstance(v, ProcessGroup) else v for v in defaults)
