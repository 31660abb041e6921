"""`accel.utils.environment`: Accelerate's environment-variable helpers, where its scripts import them."""

from __future__ import annotations

from accel.environment.variables import patch_environment, str_to_bool

__all__ = ["patch_environment", "str_to_bool"]
