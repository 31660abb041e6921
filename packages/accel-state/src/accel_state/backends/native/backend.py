"""The native torch backend: one process, or many joined by DistributedDataParallel."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch.nn.parallel import DistributedDataParallel

from accel_state.backends.native.ddp_comm_hooks import register_comm_hook
from accel_state.backends.native.ddp_options import DdpOptions
from accel_state.backends.precision_steps import PrecisionSteps
from accel_state.environment.device import choose_device, choose_process_group_backend
from accel_state.environment.distributed_type import DistributedType
from accel_state.environment.launch_env import LaunchEnvironment, export_for_torch
from accel_state.process_group.exit_release import release_ddp_at_exit
from accel_state.process_group.group import init_process_group, init_single_process_group
from accel_state.seam.backend import (
    BackendDefaults,
    BackendOptions,
    ProcessFacts,
    ProcessGroupOptions,
    ProcessSetup,
)
from accel_state.seam.communication import TorchCommunicator
from accel_state.seam.prepared_objects import PreparedObjects
from accel_state.shared_state.gradient_state import GradientState


class NativeBackend(PrecisionSteps, BackendDefaults):
    """CPU, one GPU, or DDP over gloo/nccl across processes and machines."""

    per_thread_state = False
    replicates_model = True  # every process holds and steps the whole model (LocalSGD can average it)
    supports_join = True  # torch's Join shadows DDP's collectives on ranks that ran out of batches

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def setup_process(
        cls,
        launch: LaunchEnvironment,
        *,
        cpu: bool,
        timeout: datetime.timedelta,
        process_group: ProcessGroupOptions | None = None,
    ) -> ProcessSetup:
        """Pick this rank's GPU (or the CPU) and join the job's gloo/nccl process group."""
        device, group_backend = join_job(launch, cpu=cpu, timeout=timeout, process_group=process_group)
        if not launch.is_distributed:
            return ProcessSetup(DistributedType.NO, device, None, TorchCommunicator())
        kind = DistributedType.MULTI_GPU if device.type == "cuda" else DistributedType.MULTI_CPU
        return ProcessSetup(kind, device, group_backend, TorchCommunicator())

    def __init__(self, state: ProcessFacts, options: BackendOptions | None = None) -> None:
        options = options or BackendOptions()
        self.state = state
        self.precision = options.precision
        ddp = options.engine_option(DdpOptions) or DdpOptions()
        self.ddp_kwargs = dict(ddp.kwargs)
        self.comm_hook = ddp.comm_hook
        self.gradient_state = GradientState()

    # Preparing ---------------------------------------------------------------------------------
    def prepare(self, objects: PreparedObjects) -> PreparedObjects:
        """Run models in the policy's precision, move them to the device, wrap them in DDP when
        there are several processes; everything else is ready as it is."""
        objects.models = [self._prepare_model(m, objects.places(m)) for m in objects.models]
        return objects

    def _prepare_model(self, model: torch.nn.Module, device_placement: bool) -> torch.nn.Module:
        self.precision.wrap_forward(model)
        if device_placement:
            model = model.to(self.state.device)
        if isinstance(model, DistributedDataParallel):
            release_ddp_at_exit(model)
        if not self.state.use_distributed or isinstance(model, DistributedDataParallel):
            return model
        if not any(p.requires_grad for p in model.parameters()):
            return model
        device_ids = [self.state.device.index] if self.state.device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=device_ids, **self.ddp_kwargs)
        register_comm_hook(wrapped, self.comm_hook)
        release_ddp_at_exit(wrapped)
        return wrapped

    # The step ----------------------------------------------------------------------------------
    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    def trigger_sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        if isinstance(model, DistributedDataParallel):
            return _ddp_sync_forced(model)
        return contextlib.nullcontext()

    def join(self, joinables: list[Any]) -> contextlib.AbstractContextManager:
        if not self.state.use_distributed:
            return contextlib.nullcontext()
        from torch.distributed.algorithms.join import Join

        return Join(joinables)

    def clip_grad_norm_(
        self,
        parameters: Iterable[torch.Tensor],
        max_norm: float,
        norm_type: float = 2.0,
        optimizers: Iterable[torch.optim.Optimizer] = (),
    ) -> torch.Tensor:
        for optimizer in optimizers:
            self.unscale_gradients(optimizer)
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    # Models and checkpoints --------------------------------------------------------------------
    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        return unwrap(model, DistributedDataParallel)

    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return self.unwrap_model(model).state_dict()

    def load_state_dict(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        self.unwrap_model(model).load_state_dict(state_dict)

    def save_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        return prepared  # every object is plain torch: the generic files hold it all

    def load_checkpoint(self, prepared: PreparedObjects, folder: Path) -> PreparedObjects:
        return prepared


def join_job(
    launch: LaunchEnvironment,
    *,
    cpu: bool,
    timeout: datetime.timedelta,
    process_group: ProcessGroupOptions | None = None,
    group_of_one: bool = False,
) -> tuple[torch.device, str | None]:
    """Pick this rank's device and join the job's process group; return both (backend None: no group).

    A lone process joins no group, unless `group_of_one` (an engine that needs a group to exist).
    """
    process_group = process_group or ProcessGroupOptions()
    device = choose_device(cpu, launch.local_rank)
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


@contextlib.contextmanager
def _ddp_sync_forced(model: DistributedDataParallel) -> Iterator[None]:
    """Make DDP all-reduce in the next backward, whatever `no_sync` said, then restore its flags."""
    saved = (model.require_backward_grad_sync, model.require_forward_param_sync)
    model.require_backward_grad_sync = True
    model.require_forward_param_sync = True
    # The forward ran under no_sync, so the reducer was not told a backward is coming; tell it now.
    model.reducer.prepare_for_backward([])
    try:
        yield
    finally:
        model.require_backward_grad_sync, model.require_forward_param_sync = saved
