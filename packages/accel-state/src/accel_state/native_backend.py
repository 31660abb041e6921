"""The native torch backend: one process, or many joined by DistributedDataParallel."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from accel_state.backend import Preparation, register_backend
from accel_state.distributed_type import DistributedType
from accel_state.partial_state import PartialState


class NativeBackend:
    """CPU, one GPU, or DDP over gloo/nccl across processes and machines."""

    def __init__(self, state: PartialState, ddp_kwargs: dict[str, Any] | None = None) -> None:
        self.state = state
        self.ddp_kwargs = dict(ddp_kwargs or {})

    def prepare(self, objects: Preparation, *, device_placement: bool) -> Preparation:
        """Move models to the device and wrap them in DDP when there are several processes."""
        objects.models = [self._prepare_model(m, device_placement) for m in objects.models]
        return objects

    def _prepare_model(self, model: torch.nn.Module, device_placement: bool) -> torch.nn.Module:
        if device_placement:
            model = model.to(self.state.device)
        if not self.state.use_distributed or isinstance(model, DistributedDataParallel):
            return model
        if not any(p.requires_grad for p in model.parameters()):
            return model
        device_ids = [self.state.device.index] if self.state.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, **self.ddp_kwargs)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        loss.backward(**kwargs)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        while True:
            if isinstance(model, DistributedDataParallel):
                model = model.module
            elif hasattr(model, "_orig_mod"):  # torch.compile's wrapper
                model = model._orig_mod
            else:
                return model

    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        return self.unwrap_model(model).state_dict()

    def load_state_dict(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        self.unwrap_model(model).load_state_dict(state_dict)


for _type in (DistributedType.NO, DistributedType.MULTI_CPU, DistributedType.MULTI_GPU):
    register_backend(_type, NativeBackend)
