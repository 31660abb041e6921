"""The objects a DeepSpeed run hands the facade in place of its own: precision and scheduler."""

from __future__ import annotations

from typing import Any

from accel_state.seam.precision_protocol import FullPrecision


class EnginePrecision(FullPrecision):
    """The engine computes in `mode` and scales fp16 losses itself: accel adds no autocast, no
    scaler, no forward wrapper (as Accelerate under DeepSpeed)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode


class EngineScheduler:
    """The scheduler the engine built from the config, which the engine steps at each real step.

    `step()` is a no-op for the training loop's call; everything else reaches the scheduler.
    """

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def step(self, *args: Any, **kwargs: Any) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return self.scheduler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def get_last_lr(self) -> list[float]:
        return self.scheduler.get_last_lr()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["scheduler"], name)
