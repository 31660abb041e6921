"""accel-launch: the `accel` command line, `notebook_launcher` and the shared multi-process test helpers."""

from accel_launch.__about__ import __version__
from accel_launch.config_schema import ConfigError
from accel_launch.launch_options import LaunchOptions, LaunchOptionsError
from accel_launch.notebook import NotebookLaunchError, notebook_launcher

__all__ = [
    "ConfigError",
    "LaunchOptions",
    "LaunchOptionsError",
    "NotebookLaunchError",
    "__version__",
    "notebook_launcher",
]
