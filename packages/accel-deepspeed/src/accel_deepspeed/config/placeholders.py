"""`DummyOptim` and `DummyScheduler`: stand-ins for an optimizer and scheduler that the DeepSpeed
JSON defines (its "optimizer" and "scheduler" sections), so a script can prepare them as usual."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


class DummyOptim:
    """Stands for the optimizer of the config's "optimizer" section; its `lr` and `weight_decay`
    fill that section's "auto" values. `params` are the parameters (or groups) it trains."""

    prepare_kind = "optimizers"  # what Accelerator.prepare sorts it as

    def __init__(
        self, params: Iterable[Any], lr: float = 0.001, weight_decay: float = 0, **kwargs: Any
    ) -> None:
        self.params = list(params)
        self.lr = lr
        self.weight_decay = weight_decay
        self.kwargs = kwargs


class DummyScheduler:
    """Stands for the config's "scheduler" section (its "auto" values filled from here), or for
    `lr_scheduler_callable(optimizer)`, called on the engine's optimizer when there is no section."""

    prepare_kind = "schedulers"  # what Accelerator.prepare sorts it as

    def __init__(
        self,
        optimizer: DummyOptim,
        total_num_steps: int | None = None,
        warmup_num_steps: int = 0,
        lr_scheduler_callable: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.optimizer = optimizer
        self.total_num_steps = total_num_steps
        self.warmup_num_steps = warmup_num_steps
        self.lr_scheduler_callable = lr_scheduler_callable
        self.kwargs = kwargs
