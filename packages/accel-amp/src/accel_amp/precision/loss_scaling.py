"""`LossScaler`: fp16's dynamic loss scaling around one GradScaler (or none), per optimizer step.

It remembers which optimizers' gradients were unscaled in the current step, so that each is
unscaled once, and it forgets that when a new backward adds fresh scaled gradients: otherwise a
clip after a step would leave the scaler believing the next step's (maybe overflowing)
gradients were already unscaled and finite, and the step would apply inf to the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class LossScaler:
    """Scales losses, unscales gradients once per step and steps through `scaler` when there is one."""

    def __init__(self, scaler: torch.amp.GradScaler | None = None) -> None:
        self.scaler = scaler
        self._unscaled: set[int] = set()  # id() of optimizers unscaled since their last step

    @property
    def plain_steps(self) -> bool:
        """True without a scaler: `optimizer_step` is then the optimizer's own step."""
        return self.scaler is None

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """Return the loss to call backward on; voids earlier unscales (new gradients arrive scaled)."""
        if self.scaler is None:
            return loss
        if self._unscaled:
            self._forget_unscales()
        return self.scaler.scale(loss)

    def _forget_unscales(self) -> None:
        # GradScaler records an unscale (and its inf verdict) per optimizer until update();
        # dropping the record makes its next step unscale and check the new gradients.
        records = getattr(self.scaler, "_per_optimizer_states", None)
        for key in self._unscaled:
            if records is not None:
                records.pop(key, None)
        self._unscaled.clear()

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide `optimizer`'s gradients by the loss scale, once per step."""
        if self.scaler is not None and id(optimizer) not in self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]:
        """Step `optimizer` (through the scaler); return its result and whether an overflow skipped it."""
        if self.scaler is None:
            return (optimizer.step(closure) if closure is not None else optimizer.step()), False
        scale_before = self.scaler.get_scale()
        result = self.scaler.step(optimizer, closure) if closure is not None else self.scaler.step(optimizer)
        self.scaler.update()  # forgets every optimizer's unscale record: so do we
        self._unscaled.clear()
        # The scaler lowers its scale exactly when it found inf/NaN gradients and skipped the step.
        return result, self.scaler.get_scale() < scale_before
