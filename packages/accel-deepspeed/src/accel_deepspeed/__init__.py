"""accel-deepspeed: DeepSpeed (ZeRO 0-3, offload, your own JSON config) behind accel's Backend seam.

Importing this package imports no deepspeed: that happens when a DeepSpeed run is set up.
"""

from __future__ import annotations

from accel_deepspeed.__about__ import __version__
from accel_deepspeed.config_errors import DeepSpeedConfigError
from accel_deepspeed.placeholders import DummyOptim, DummyScheduler
from accel_deepspeed.plugin import DeepSpeedPlugin

__all__ = ["DeepSpeedConfigError", "DeepSpeedPlugin", "DummyOptim", "DummyScheduler", "__version__"]
