"""`AcceleratedOptimizer`: the user's optimizer, stepping only on sync steps and through the backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from accel_amp.precision.loss_scaling import LossScaler
from accel_state import GradientState, send_to_device
from accel_state.process_group import collective_log


class Stepper(Protocol):
    """Who applies a step and unscales gradients: the backend (or, alone, a `LossScaler`)."""

    @property
    def plain_steps(self) -> bool:
        """True when its optimizer_step is the optimizer's own step, never skipped: the wrapper
        then calls that step itself."""

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any] | None = None
    ) -> tuple[Any, bool]: ...

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None: ...


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer; `step` applies only on sync steps, through the backend's step hook.

    `zero_grad` never throws away gradients that an accumulation window still needs: a plain
    PyTorch loop calls it first, so on a window's last micro-step it would wipe what the window
    accumulated just before the last backward. With accumulation it clears only gradients that a
    step has applied, or when none are pending.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        device_placement: bool = True,
        scaler: torch.amp.GradScaler | None = None,
        device: torch.device | None = None,
        stepper: Stepper | None = None,
    ) -> None:
        # The wrapped optimizer owns all optimizer state; Optimizer.__init__ is deliberately not run.
        self.optimizer = optimizer
        self.scaler = scaler
        self.stepper: Stepper = stepper if stepper is not None else LossScaler(scaler)
        self._plain_step = self.stepper.plain_steps
        self.gradient_state = GradientState()
        self._step_was_skipped = False
        self._stepped_since_clear = False
        self._backward_calls_at_clear = self.gradient_state.backward_calls
        if device_placement and device is not None and optimizer.state:
            state_dict = send_to_device(optimizer.state_dict(), device)
            optimizer.load_state_dict(state_dict)

    # Delegated attributes ---------------------------------------------------------------
    @property
    def state(self) -> Any:
        """The wrapped optimizer's per-parameter state."""
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The wrapped optimizer's parameter groups."""
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> dict[str, Any]:
        """The wrapped optimizer's default hyperparameters."""
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a parameter group to the wrapped optimizer."""
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        """Return the wrapped optimizer's state dict."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load `state_dict` into the wrapped optimizer."""
        self.optimizer.load_state_dict(state_dict)

    def train(self) -> None:
        """Forward to optimizers with train/eval modes (schedule-free ones)."""
        if hasattr(self.optimizer, "train"):
            self.optimizer.train()

    def eval(self) -> None:
        """Switch an optimizer that has train/eval modes (schedule-free ones) to eval; others ignore it."""
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
        if self.gradient_state.sync_gradients:
            self.stepper.unscale_gradients(self.optimizer)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear gradients, except those no step has applied yet inside an accumulation window."""
        gradient_state = self.gradient_state
        if gradient_state.num_steps > 1:
            # Inside an accumulation window: keep gradients no step has applied yet (pending ones,
            # counted in line: no call of ours on every micro-step).
            if (
                not self._stepped_since_clear
                and gradient_state.backward_calls != self._backward_calls_at_clear
            ):
                return
        elif not gradient_state.sync_gradients:
            return
        self.optimizer.zero_grad(set_to_none=set_to_none)
        self._stepped_since_clear = False
        self._backward_calls_at_clear = gradient_state.backward_calls

    def step(self, closure: Callable[[], float] | None = None) -> Any:
        """Step on real steps only (not accumulation steps); fp16 may skip one on overflow."""
        if not self.gradient_state.sync_gradients:
            return None
        if self._plain_step:  # what the stepper would call, less its frame
            result = self.optimizer.step(closure) if closure is not None else self.optimizer.step()
            self._step_was_skipped = False
        else:
            result, self._step_was_skipped = self.stepper.optimizer_step(self.optimizer, closure)
        collective_log.progress += 1  # the hang watchdog's heartbeat (in place: no call a step)
        self._stepped_since_clear = True  # a skipped (overflowed) step consumed its gradients too
        return result
