"""`AcceleratedOptimizer`: the user's optimizer, stepping only on sync steps and through the scaler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from accel_state import GradientState, send_to_device


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer; `step`/`zero_grad` skip accumulation steps, fp16 steps go through the scaler."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        device_placement: bool = True,
        scaler: torch.amp.GradScaler | None = None,
        device: torch.device | None = None,
    ) -> None:
        # The wrapped optimizer owns all optimizer state; Optimizer.__init__ is deliberately not run.
        self.optimizer = optimizer
        self.scaler = scaler
        self.gradient_state = GradientState()
        self._step_was_skipped = False
        self._unscaled = False
        if device_placement and device is not None and optimizer.state:
            state_dict = send_to_device(optimizer.state_dict(), device)
            optimizer.load_state_dict(state_dict)

    # Delegated attributes ---------------------------------------------------------------
    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def train(self) -> None:
        """Forward to optimizers with train/eval modes (schedule-free ones)."""
        if hasattr(self.optimizer, "train"):
            self.optimizer.train()

    def eval(self) -> None:
        if hasattr(self.optimizer, "eval"):
            self.optimizer.eval()

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"

    # Stepping ---------------------------------------------------------------------------
    @property
    def step_was_skipped(self) -> bool:
        """True when the last `step` was skipped because fp16 gradients overflowed."""
        return self._step_was_skipped

    def unscale_gradients(self) -> None:
        """Divide the gradients by the loss scale, once per step (before clipping)."""
        if self.scaler is not None and not self._unscaled and self.gradient_state.sync_gradients:
            self.scaler.unscale_(self.optimizer)
            self._unscaled = True

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.gradient_state.sync_gradients:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], float] | None = None) -> Any:
        if not self.gradient_state.sync_gradients:
            return None
        if self.scaler is None:
            self._step_was_skipped = False
            return self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        scale_before = self.scaler.get_scale()
        result = (
            self.scaler.step(self.optimizer, closure)
            if closure is not None
            else self.scaler.step(self.optimizer)
        )
        self.scaler.update()
        # The scaler lowers its scale exactly when it found inf/NaN gradients and skipped the step.
        self._step_was_skipped = self.scaler.get_scale() < scale_before
        self._unscaled = False
        return result
