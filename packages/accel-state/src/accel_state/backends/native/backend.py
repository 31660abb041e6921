"""The native torch backend: one process, or many joined by DistributedDataParallel."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from accel_state.backends.common import BackendBase, join_job
from accel_state.backends.native.ddp_comm_hooks import register_comm_hook
from accel_state.backends.native.ddp_options import DdpOptions
from accel_state.backends.precision_steps import PrecisionSteps
from accel_state.backends.teardown import release_at_exit
from accel_state.environment.distributed_type import DistributedType
from accel_state.seam.backend import BackendOptions, ProcessFacts, ProcessRequest, ProcessSetup
from accel_state.seam.communication import TorchCommunicator
from accel_state.seam.prepared_objects import PreparedObjects
from accel_state.shared_state.gradient_state import GradientState


class NativeBackend(PrecisionSteps, BackendBase):
    """CPU, one GPU, or DDP over gloo/nccl across processes and machines."""

    name = "native"
    wrappers = (DistributedDataParallel,)
    per_thread_state = False
    replicates_model = True  # every process holds and steps the whole model (LocalSGD can average it)
    supports_join = True  # torch's Join shadows DDP's collectives on ranks that ran out of batches

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def setup_process(cls, request: ProcessRequest) -> ProcessSetup:
        """Pick this rank's GPU (or the CPU) and join the job's gloo/nccl process group."""
        device, group_backend = join_job(request)
        if not request.launch.is_distributed:
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
            release_at_exit(self, model, _release_ddp)
        if not self.state.use_distributed or isinstance(model, DistributedDataParallel):
            return model
        if not any(p.requires_grad for p in model.parameters()):
            return model
        device_ids = [self.state.device.index] if self.state.device.type == "cuda" else None
        wrapped = DistributedDataParallel(model, device_ids=device_ids, **self.ddp_kwargs)
        register_comm_hook(wrapped, self.comm_hook)
        release_at_exit(self, wrapped, _release_ddp)
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


# What a DDP model holds that keeps its process group (and gloo's threads) alive.
_DDP_GROUP_HOLDERS = ("reducer", "logger", "process_group")


def _release_ddp(model: DistributedDataParallel) -> None:
    """Drop `model`'s references to its process group (at exit, before the group goes)."""
    for name in _DDP_GROUP_HOLDERS:
        model.__dict__.pop(name, None)


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
