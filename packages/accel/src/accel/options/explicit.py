"""Which run options the script or the launcher set explicitly, and where, for the backend.

An engine with a config of its own (DeepSpeed's JSON) checks these against it: a value set in
two places that disagree is an error naming both, while a value left to the default is the
engine config's to set.
"""

from __future__ import annotations

from accel_state import ExplicitOption, GradientAccumulationPlugin
from accel_state.environment import env_vars


def _from_launcher(variable: str, flag: str) -> ExplicitOption | None:
    raw = env_vars.read_str(variable)
    return None if raw is None else ExplicitOption(raw, f"{flag} ({variable}={raw})")


def explicit_options(
    mixed_precision: str | None,
    gradient_accumulation_steps: int | None,
    accumulation_plugin: GradientAccumulationPlugin | None,
) -> dict[str, ExplicitOption]:
    """Return name -> ExplicitOption for "mixed_precision" and "gradient_accumulation_steps"."""
    found: dict[str, ExplicitOption] = {}
    if mixed_precision is not None:
        found["mixed_precision"] = ExplicitOption(
            mixed_precision.lower(), f"Accelerator(mixed_precision={mixed_precision!r})"
        )
    elif (option := _from_launcher(env_vars.MIXED_PRECISION, "--mixed_precision")) is not None:
        found["mixed_precision"] = ExplicitOption(option.value.lower(), option.source)
    if accumulation_plugin is not None and accumulation_plugin.num_steps is not None:
        steps = accumulation_plugin.num_steps
        found["gradient_accumulation_steps"] = ExplicitOption(
            steps, f"GradientAccumulationPlugin(num_steps={steps})"
        )
    elif gradient_accumulation_steps is not None:
        found["gradient_accumulation_steps"] = ExplicitOption(
            gradient_accumulation_steps,
            f"Accelerator(gradient_accumulation_steps={gradient_accumulation_steps})",
        )
    else:
        option = _from_launcher(env_vars.GRADIENT_ACCUMULATION_STEPS, "--gradient_accumulation_steps")
        if option is not None:
            steps = env_vars.read_int(env_vars.GRADIENT_ACCUMULATION_STEPS, minimum=1)
            found["gradient_accumulation_steps"] = ExplicitOption(steps, option.source)
    return found
