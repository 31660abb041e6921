"""Resolves how gradients accumulate: `gradient_accumulation_steps` or a `GradientAccumulationPlugin`."""

from __future__ import annotations

import dataclasses

from accel_state import GradientAccumulationPlugin
from accel_state.environment import env_vars


def resolve_accumulation_steps(requested: int | None) -> int:
    """Return the accumulation steps: the argument, else ACCEL_GRADIENT_ACCUMULATION_STEPS, else 1."""
    if requested is None:
        return env_vars.read_int(env_vars.GRADIENT_ACCUMULATION_STEPS, 1, minimum=1) or 1
    steps = requested
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"gradient_accumulation_steps must be a positive integer, got {steps!r}")
    return steps


def resolve_accumulation_plugin(
    steps: int | None, plugin: GradientAccumulationPlugin | None
) -> GradientAccumulationPlugin:
    """Return the plugin of the run, its `num_steps` filled in.

    Raises ValueError when both `steps` (other than 1, as Accelerate allows) and `plugin` are given.
    """
    if plugin is None:
        return GradientAccumulationPlugin(num_steps=resolve_accumulation_steps(steps))
    if steps is not None and steps != 1:
        raise ValueError(
            "You can only pass one of `gradient_accumulation_steps` and `gradient_accumulation_plugin`; "
            "set num_steps on the GradientAccumulationPlugin instead"
        )
    if not isinstance(plugin, GradientAccumulationPlugin):
        raise TypeError(f"gradient_accumulation_plugin must be a GradientAccumulationPlugin, got {plugin!r}")
    return dataclasses.replace(plugin, num_steps=plugin.num_steps or resolve_accumulation_steps(None))
