"""The error of a DeepSpeed configuration that cannot run, and where a value came from."""

from __future__ import annotations

from accel_state.seam.backend import ExplicitOption

# A value set outside the DeepSpeed JSON and where it was set: the seam's own record of that.
Setting = ExplicitOption


class DeepSpeedConfigError(ValueError):
    """A DeepSpeed option that cannot run, or two places that set one option differently."""
