"""`AcceleratedScheduler`: a learning-rate scheduler that follows the optimizer's real steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accel_state import GradientState, PartialState


class AcceleratedScheduler:
    """Steps the wrapped scheduler only when the optimizers stepped (not on skipped or accumulation steps).

    Without `split_batches`, each step of N processes consumes N batches of the size the schedule
    was written for, so the scheduler advances N times, as Accelerate documents.
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: Sequence[Any],
        step_with_optimizer: bool = True,
        split_batches: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = list(optimizers)
        self.step_with_optimizer = step_with_optimizer
        self.split_batches = split_batches
        self.gradient_state = GradientState()

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step when the optimizer really stepped (not on accumulation or skipped steps)."""
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self.gradient_state.sync_gradients:
            if self.gradient_state.adjust_scheduler and hasattr(self.scheduler, "_step_count"):
                # Counts the call, as Accelerate does, so torch does not warn that the scheduler
                # stepped before the optimizer on accumulation steps.
                self.scheduler._step_count += 1
            return
        if any(getattr(opt, "step_was_skipped", False) for opt in self.optimizers):
            return
        repeats = 1 if self.split_batches else PartialState().num_processes
        total = getattr(self.scheduler, "total_steps", None)
        for _ in range(repeats):
            # OneCycleLR raises past its total; stop there instead.
            if total is not None and self.scheduler.last_epoch >= total:
                break
            self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        """Return the wrapped scheduler's last learning rates."""
        return self.scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """Return the wrapped scheduler's state dict."""
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load `state_dict` into the wrapped scheduler."""
        self.scheduler.load_state_dict(state_dict)

    def get_lr(self) -> Any:
        """Return the wrapped scheduler's current learning rates."""
        return self.scheduler.get_lr()

    def __getattr__(self, name: str) -> Any:
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
