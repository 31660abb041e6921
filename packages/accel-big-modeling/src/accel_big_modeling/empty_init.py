"""Build models without allocating their weights: parameters created on the meta (or another) device."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

_CONSTRUCTORS = ("empty", "zeros", "ones", "full")


@contextlib.contextmanager
def init_empty_weights(include_buffers: bool = False) -> Iterator[None]:
    """Create every parameter (and buffer if `include_buffers`) on meta: a model of any size, no memory.

    Load real weights afterwards with `load_checkpoint_in_model` or `load_checkpoint_and_dispatch`.
    """
    with init_on_device(torch.device("meta"), include_buffers=include_buffers):
        yield


@contextlib.contextmanager
def init_on_device(device: torch.device | str, include_buffers: bool = False) -> Iterator[None]:
    """Create every parameter (and buffer if `include_buffers`) registered inside the block on `device`."""
    device = torch.device(device)
    original_register_parameter = nn.Module.register_parameter
    original_register_buffer = nn.Module.register_buffer

    def register_parameter(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original_register_parameter(module, name, param)
        if param is None:
            return
        current = module._parameters[name]
        if current is None or current.device == device:
            return  # already there: keeping the same object keeps ties made in __init__
        # Rebuild with the same class and attributes (subclasses such as quantised params keep theirs).
        extra = dict(current.__dict__)
        extra["requires_grad"] = current.requires_grad
        module._parameters[name] = type(current)(current.to(device), **extra)

    def register_buffer(
        module: nn.Module, name: str, tensor: torch.Tensor | None, persistent: bool = True
    ) -> None:
        original_register_buffer(module, name, tensor, persistent=persistent)
        if tensor is not None:
            module._buffers[name] = tensor.to(device)

    def on_device(function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> torch.Tensor:
            kwargs["device"] = device
            return function(*args, **kwargs)

        return wrapper

    originals = {name: getattr(torch, name) for name in _CONSTRUCTORS}
    try:
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign,assignment]
        if include_buffers:
            nn.Module.register_buffer = register_buffer  # type: ignore[method-assign,assignment]
            for name, function in originals.items():
                setattr(torch, name, on_device(function))
        yield
    finally:
        nn.Module.register_parameter = original_register_parameter  # type: ignore[method-assign]
        nn.Module.register_buffer = original_register_buffer  # type: ignore[method-assign]
        for name, function in originals.items():
            setattr(torch, name, function)
