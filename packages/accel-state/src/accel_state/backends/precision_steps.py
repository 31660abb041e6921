"""The backward and optimizer step of a backend whose optimizers are plain torch ones.

The native, FSDP and XLA backends all divide the loss over the accumulation window, run backward
through the precision policy, and leave accumulating gradients scaled until the window's last
step; only the engine backends (DeepSpeed) hand these to someone else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import torch

from accel_state.backends.common import unscale_then_clip_norm, unscale_then_clip_value
from accel_state.seam.precision_protocol import Precision
from accel_state.shared_state.gradient_state import GradientState


class PrecisionSteps:
    """Backward, optimizer step, unscaling, clipping and autocast through `self.precision`
    (mixed into a backend)."""

    gradient_state: GradientState
    precision: Precision

    @property
    def plain_steps(self) -> bool:
        """True without a loss scaler, unless a backend changes backward or optimizer_step (XLA
        reduces gradients in its step): the calls below are then the loss's and the optimizer's own."""
        backend = type(self)
        return (
            self.precision.scaler is None
            and backend.backward is PrecisionSteps.backward
            and backend.optimizer_step is PrecisionSteps.optimizer_step
        )

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        steps = self.gradient_state.num_steps
        if steps > 1:
            loss = loss / steps
        # Without a scaler the policy's loss is the loss: two calls fewer on every step.
        (loss if self.precision.scaler is None else self.precision.scale_loss(loss)).backward(**kwargs)

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]:
        if self.precision.scaler is None:  # the policy's step is the optimizer's own
            return (optimizer.step(closure) if closure is not None else optimizer.step()), False
        return self.precision.optimizer_step(optimizer, closure)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        # Accumulating gradients are still to be added to: unscaling them now would mix scales.
        if self.gradient_state.sync_gradients:
            self.precision.unscale_gradients(optimizer)

    def clip_grad_norm_(
        self,
        parameters: Iterable[torch.Tensor],
        max_norm: float,
        norm_type: float = 2.0,
        optimizers: Iterable[torch.optim.Optimizer] = (),
    ) -> torch.Tensor:
        """Unscale `optimizers`, clip to a total norm; return that norm (global over shards)."""
        return unscale_then_clip_norm(self, parameters, max_norm, norm_type, optimizers, self.before_clipping)

    def clip_grad_value_(
        self,
        parameters: Iterable[torch.Tensor],
        clip_value: float,
        optimizers: Iterable[torch.optim.Optimizer] = (),
    ) -> None:
        unscale_then_clip_value(self, parameters, clip_value, optimizers, self.before_clipping)

    def before_clipping(
        self, parameters: list[torch.Tensor], optimizers: list[torch.optim.Optimizer]
    ) -> None:
        """Nothing: the unscaled gradients are the step's own (XLA's are averaged first)."""

    def autocast(self, enabled: bool = True, **autocast_kwargs: Any) -> contextlib.AbstractContextManager:
        return self.precision.autocast(enabled, **autocast_kwargs)
