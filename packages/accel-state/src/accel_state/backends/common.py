"""What every backend shares, so that none copies another (native, FSDP, DeepSpeed, XLA).

Joining the job's torch process group, unwrapping models, unscaling before clipping, the no-op
sync contexts and join of a backend that reduces elsewhere, the split of a checkpoint between a
backend and the generic code, and the refusal of a precision a backend cannot run. `BackendBase`
gives a backend these as defaults; it overrides what its engine does differently.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import torch

from accel_state.environment.device import choose_device, choose_process_group_backend
from accel_state.environment.launch_env import export_for_torch
from accel_state.process_group.group import init_process_group, init_single_process_group
from accel_state.seam.backend import BackendDefaults, ProcessRequest
from accel_state.seam.prepared_objects import PreparedObjects


class UnsupportedPrecisionError(ValueError):
    """A backend was asked for a mixed precision it cannot run."""


class _Unscales(Protocol):
    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None: ...


class BackendBase(BackendDefaults):
    """The defaults of a backend whose models are torch modules, at most inside wrappers of its own
    that hold them as `.module`: no sync contexts (gradients are reduced elsewhere than in backward),
    no join, plain state dicts, and no checkpoint files of its own."""

    name = "this"  # in messages: "under the FSDP backend"
    wrappers: tuple[type, ...] = ()  # what `prepare` wraps models in

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def join(self, joinables: list[Any]) -> contextlib.AbstractContextManager:
        """Warn that ranks cannot run different numbers of steps here; return a context that does nothing."""
        warn_join_unsupported(self.name)
        return contextlib.nullcontext()

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return unwrap(model, *self.wrappers)

    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return self.unwrap_model(model).state_dict()

    def load_state_dict(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        self.unwrap_model(model).load_state_dict(state_dict)

    def save_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        return prepared  # every object is plain torch: the generic files hold it all

    def load_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        return prepared


def join_job(request: ProcessRequest, *, group_of_one: bool = False) -> tuple[torch.device, str | None]:
    """Pick this rank's device and join the job's process group; return both (backend None: no group).

    A lone process joins no group, unless `group_of_one` (an engine that needs a group to exist).
    """
    launch, timeout, process_group = request.launch, request.timeout, request.process_group
    device = choose_device(request.cpu, launch.local_rank)
    if not (launch.is_distributed or group_of_one):
        return device, None
    group_backend = choose_process_group_backend(device, process_group.backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if launch.is_distributed:
        init_process_group(launch, group_backend, timeout, process_group.init_method)
    else:
        export_for_torch(launch)  # engines read RANK/LOCAL_RANK/WORLD_SIZE even for one process
        init_single_process_group(group_backend, timeout)
    return device, group_backend


def unwrap(model: torch.nn.Module, *wrappers: type) -> torch.nn.Module:
    """Return the module inside `wrappers` (each holding it as `.module`) and torch.compile's."""
    while True:
        if isinstance(model, wrappers):
            model = cast(torch.nn.Module, model.module)
        elif isinstance(inner := getattr(model, "_orig_mod", None), torch.nn.Module):
            model = inner
        else:
            return model


def warn_join_unsupported(backend: str) -> None:
    """Warn (at the caller's caller) that `join_uneven_inputs` does nothing under `backend`."""
    warnings.warn(
        f"join_uneven_inputs has no effect under the {backend} backend (as in Accelerate): give every "
        "rank the same number of batches (even_batches=True, the default)",
        stacklevel=4,
    )


def unscale_all(
    backend: _Unscales, optimizers: Iterable[torch.optim.Optimizer]
) -> list[torch.optim.Optimizer]:
    """Make each of `optimizers`' gradients true gradients (through `backend`); return them as a list."""
    optimizers = list(optimizers)
    for optimizer in optimizers:
        backend.unscale_gradients(optimizer)
    return optimizers


# What a backend does to unscaled gradients before they are clipped (XLA averages them over replicas).
BeforeClipping = Callable[[list[torch.Tensor], list[torch.optim.Optimizer]], None]


def unscale_then_clip_norm(
    backend: _Unscales,
    parameters: Iterable[torch.Tensor],
    max_norm: float,
    norm_type: float,
    optimizers: Iterable[torch.optim.Optimizer],
    before_clipping: BeforeClipping | None = None,
) -> torch.Tensor:
    """Unscale `optimizers`, then clip `parameters`' gradients to a total norm; return the norm
    before clipping, whole: over DTensor gradients (sharded, tensor parallel, any mesh) it is the
    norm of the full gradients, the same on every rank (`accel_state.parallelism.grad_norm`)."""
    parameters = _unscaled(backend, parameters, optimizers, before_clipping)
    gradients = [p.grad for p in parameters if p.grad is not None]
    dtensor = sys.modules.get("torch.distributed.tensor")  # imported wherever a DTensor exists
    if dtensor is not None and any(isinstance(g, dtensor.DTensor) for g in gradients):
        from accel_state.parallelism.grad_norm import clip_by_mesh_norm

        return clip_by_mesh_norm(gradients, max_norm, norm_type)
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)


def unscale_then_clip_value(
    backend: _Unscales,
    parameters: Iterable[torch.Tensor],
    clip_value: float,
    optimizers: Iterable[torch.optim.Optimizer],
    before_clipping: BeforeClipping | None = None,
) -> None:
    """Unscale `optimizers`, then clamp each gradient element of `parameters` into ±clip_value."""
    parameters = _unscaled(backend, parameters, optimizers, before_clipping)
    torch.nn.utils.clip_grad_value_(parameters, clip_value)


def _unscaled(
    backend: _Unscales,
    parameters: Iterable[torch.Tensor],
    optimizers: Iterable[torch.optim.Optimizer],
    before_clipping: BeforeClipping | None,
) -> list[torch.Tensor]:
    parameters = list(parameters)
    unscaled = unscale_all(backend, optimizers)
    if before_clipping is not None:
        before_clipping(parameters, unscaled)
    return parameters


def left_to_generic_code(prepared: PreparedObjects, saved: Callable[[Any], bool]) -> PreparedObjects:
    """Return the objects of `prepared` the generic checkpoint code still saves: those a backend did
    not (`saved` is False for the object, and for the optimizer or scheduler a facade wrapper holds)."""

    def left(objects: list[Any], inside: str | None = None) -> list[Any]:
        return [o for o in objects if not (saved(o) or (inside and saved(getattr(o, inside, o))))]

    rest = PreparedObjects(
        models=left(prepared.models),
        optimizers=left(prepared.optimizers, "optimizer"),
        schedulers=left(prepared.schedulers, "scheduler"),
        data_loaders=left(prepared.data_loaders),
    )
    rest.device_placement = dict(prepared.device_placement)
    return rest


def check_precision_supported(
    backend: str,
    mode: str,
    supported: Sequence[str],
    *,
    error: type[Exception] = UnsupportedPrecisionError,
) -> None:
    """Raise `error` naming `backend`, the asked precision `mode` and the `supported` ones, unless
    `mode` is among them (when the Accelerator is built, before anything runs)."""
    if mode not in supported:
        names = ", ".join(repr(m) for m in supported)
        raise error(f"mixed precision {mode!r} is not supported by the {backend} backend; use one of {names}")
