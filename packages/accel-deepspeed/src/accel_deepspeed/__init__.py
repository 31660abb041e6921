"""accel-deepspeed: DeepSpeed (ZeRO 0-3, offload, your own JSON config) behind accel's Backend seam.

Importing this package imports no deepspeed (that happens when a DeepSpeed run is set up) and no
torch: its names are imported on first use (PEP 562), so that the launcher can read its launch
hook (`accel_deepspeed.launch.hook`) for `accel --help`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel_deepspeed.__about__ import __version__
from accel_state.lazy_exports import lazy_attribute, lazy_dir

if TYPE_CHECKING:
    from accel_deepspeed.config.errors import DeepSpeedConfigError
    from accel_deepspeed.config.placeholders import DummyOptim, DummyScheduler
    from accel_deepspeed.config.plugin import DeepSpeedPlugin

_HOMES = {
    "DeepSpeedConfigError": ".config.errors",
    "DummyOptim": ".config.placeholders",
    "DummyScheduler": ".config.placeholders",
    "DeepSpeedPlugin": ".config.plugin",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)


def __dir__() -> list[str]:
    return lazy_dir(__name__, _HOMES)


__all__ = ["DeepSpeedConfigError", "DeepSpeedPlugin", "DummyOptim", "DummyScheduler", "__version__"]
