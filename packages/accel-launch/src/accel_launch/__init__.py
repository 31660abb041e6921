"""accel-launch: the `accel` command line and the shared multi-process test helpers."""

from accel_launch.__about__ import __version__
from accel_launch.launch_options import LaunchOptions, LaunchOptionsError

__all__ = ["LaunchOptions", "LaunchOptionsError", "__version__"]
