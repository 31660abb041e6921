"""`GradientAccumulationPlugin`: how many batches one optimizer step gathers, and when to sync."""

from __future__ import annotations

from dataclasses import dataclass

from accel_state.environment.kwargs_handler import KwargsHandler


@dataclass
class GradientAccumulationPlugin(KwargsHandler):
    """Gradient accumulation, as Accelerate's plugin of the same name.

    `num_steps`: batches per optimizer step. `adjust_scheduler`: count the scheduler's steps on
    accumulation steps too (keeps torch's "scheduler before optimizer" check quiet).
    `sync_with_dataloader`: the last batch of a loader always syncs and steps. `sync_each_batch`:
    all-reduce gradients on every batch instead of accumulating them locally (less memory, more
    communication), still stepping every `num_steps`.
    """

    num_steps: int | None = None
    adjust_scheduler: bool = True
    sync_with_dataloader: bool = True
    sync_each_batch: bool = False

    def __post_init__(self) -> None:
        steps = self.num_steps
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ValueError(
                f"GradientAccumulationPlugin: num_steps must be a positive integer, got {steps!r}"
            )
