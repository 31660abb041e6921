"""The Backend seam: one small protocol behind which every way of running (native torch,
DeepSpeed, XLA) plugs in, chosen once when the Accelerator is built.

Adapters register a factory for their `DistributedType`, either by calling `register_backend`
or through the `accel.backends` entry-point group (name: the DistributedType value, object: the
factory), which is read only when a type nobody registered is asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol, runtime_checkable

import torch

from accel_state.distributed_type import DistributedType
from accel_state.partial_state import PartialState

ENTRY_POINT_GROUP = "accel.backends"


@dataclass
class Preparation:
    """The objects handed to `prepare`, sorted by kind; a backend returns them wrapped."""

    models: list[torch.nn.Module] = field(default_factory=list)
    optimizers: list[Any] = field(default_factory=list)
    schedulers: list[Any] = field(default_factory=list)
    data_loaders: list[Any] = field(default_factory=list)


@runtime_checkable
class Backend(Protocol):
    """What a way of running must provide; the facade calls nothing else."""

    def prepare(self, objects: Preparation, *, device_placement: bool) -> Preparation:
        """Return the objects wrapped for this backend (DDP, engines, device loaders)."""

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Run the backward pass of an already scaled loss."""

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager:
        """Return a context in which gradients accumulate locally without being all-reduced."""

    def clip_grad_norm_(
        self, parameters: Iterable[torch.Tensor], max_norm: float, norm_type: float = 2.0
    ) -> torch.Tensor:
        """Clip gradients to a total norm and return the norm before clipping."""

    def clip_grad_value_(self, parameters: Iterable[torch.Tensor], clip_value: float) -> None:
        """Clamp every gradient element to [-clip_value, clip_value]."""

    def unwrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Return the user's module from inside whatever `prepare` wrapped it in."""

    def get_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Return the full (consolidated) state dict of a prepared model."""

    def load_state_dict(self, model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
        """Load a full state dict, as `get_state_dict` returns it, into a prepared model."""


BackendFactory = Callable[[PartialState], Backend]
_registry: dict[DistributedType, BackendFactory] = {}


class BackendNotAvailableError(RuntimeError):
    """No backend is registered or installed for the requested distributed type."""


def register_backend(distributed_type: DistributedType, factory: BackendFactory) -> None:
    """Make `factory(state)` the way to build the backend for `distributed_type`."""
    _registry[DistributedType(distributed_type)] = factory


def _load_entry_point(distributed_type: DistributedType) -> BackendFactory | None:
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == distributed_type.value:
            return entry.load()
    return None


def create_backend(distributed_type: DistributedType, state: PartialState) -> Backend:
    """Return the backend object for `distributed_type`, loading its adapter if needed."""
    import accel_state.native_backend  # noqa: F401 - registers the built-in backends on import

    distributed_type = DistributedType(distributed_type)
    factory = _registry.get(distributed_type) or _load_entry_point(distributed_type)
    if factory is None:
        raise BackendNotAvailableError(
            f"no backend is installed for distributed type {distributed_type.value}; "
            f"install its adapter package (e.g. accel[{distributed_type.value.lower()}])"
        )
    _registry[distributed_type] = factory
    return factory(state)
