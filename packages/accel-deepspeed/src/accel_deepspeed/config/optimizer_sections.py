"""Fills the config's "optimizer"/"scheduler" sections from what `prepare()` was given."""

from __future__ import annotations

from typing import Any

from accel_deepspeed.config.errors import DeepSpeedConfigError
from accel_deepspeed.config.placeholders import DummyOptim, DummyScheduler
from accel_deepspeed.config.resolution import AUTO, ResolvedConfig


def _fill(section: dict[str, Any], key: str, value: Any) -> None:
    params = section.setdefault("params", {})
    if params.get(key, AUTO) == AUTO and value is not None:
        params[key] = value


def check_optimizer(resolved: ResolvedConfig, optimizer: Any) -> None:
    """Fill the "optimizer" section from a DummyOptim; refuse a mismatch of section and object."""
    section = resolved.config.get("optimizer")
    if isinstance(optimizer, DummyOptim):
        if section is None:
            raise DeepSpeedConfigError(
                f'DummyOptim was prepared but {resolved.source} has no "optimizer" section; '
                "prepare a torch optimizer instead, or define the optimizer in the config"
            )
        _fill(section, "lr", optimizer.lr)
        _fill(section, "weight_decay", optimizer.weight_decay)
    elif optimizer is not None and section is not None:
        raise DeepSpeedConfigError(
            f'{resolved.source} defines an "optimizer" section, so prepare accel.utils.DummyOptim '
            f"in place of {type(optimizer).__name__} (or remove the section)"
        )


def check_scheduler(resolved: ResolvedConfig, scheduler: Any, optimizer: Any) -> None:
    """Fill the "scheduler" section from a DummyScheduler; refuse a mismatch of section and object."""
    section = resolved.config.get("scheduler")
    if isinstance(scheduler, DummyScheduler):
        if section is None:
            if scheduler.lr_scheduler_callable is None:
                raise DeepSpeedConfigError(
                    f'DummyScheduler was prepared but {resolved.source} has no "scheduler" section '
                    "and the DummyScheduler has no lr_scheduler_callable"
                )
            return
        _fill(section, "total_num_steps", scheduler.total_num_steps)
        _fill(section, "warmup_num_steps", scheduler.warmup_num_steps)
        _fill(section, "warmup_min_lr", 0)
        if isinstance(optimizer, DummyOptim):
            _fill(section, "warmup_max_lr", optimizer.lr)
    elif scheduler is not None and section is not None:
        raise DeepSpeedConfigError(
            f'{resolved.source} defines a "scheduler" section, so prepare accel.utils.DummyScheduler '
            f"in place of {type(scheduler).__name__} (or remove the section)"
        )
