"""What a backend asks of a precision policy, and the policy of plain fp32 training.

The policies themselves (bf16, fp16 with loss scaling) live in accel_amp; a backend receives one
as an object and calls these methods, so accel_state never imports accel_amp to decide anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import torch


class Precision(Protocol):
    """How a step computes and scales: the methods a backend calls on its precision policy."""

    mode: str
    # None promises that scale_loss returns the loss and optimizer_step is the optimizer's own:
    # the backends then call neither on the hot path.
    scaler: torch.amp.GradScaler | None
    autocast_dtype: torch.dtype | None  # what the model computes in; None: its own dtype (fp32)

    def wrap_forward(self, model: torch.nn.Module) -> torch.nn.Module:
        """Make `model` compute in this precision (idempotent)."""

    def unwrap_forward(self, model: torch.nn.Module) -> torch.nn.Module:
        """Undo `wrap_forward`."""

    def autocast(self, enabled: bool = True, **autocast_kwargs: Any) -> contextlib.AbstractContextManager:
        """Return the context that runs code outside the model in this precision."""

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """Return the loss to call backward on; a new backward voids any earlier unscale."""

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide `optimizer`'s gradients by the loss scale, once per step."""

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]:
        """Step `optimizer`; return what its step returned and whether the step was skipped."""


class FullPrecision:
    """fp32: no autocast, no loss scaling; the step is the optimizer's own."""

    mode = "no"
    autocast_dtype: torch.dtype | None = None

    def __init__(self) -> None:
        self.scaler: torch.amp.GradScaler | None = None

    def wrap_forward(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def unwrap_forward(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def autocast(self, enabled: bool = True, **autocast_kwargs: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        return None

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]:
        return (optimizer.step(closure) if closure is not None else optimizer.step()), False
