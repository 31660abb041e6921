"""accel-launch: the `accel` command line, `notebook_launcher` and the shared multi-process test helpers."""

from typing import TYPE_CHECKING, Any

from accel_launch.__about__ import __version__
from accel_launch.config_schema import ConfigError
from accel_launch.launch_options import LaunchOptions, LaunchOptionsError

if TYPE_CHECKING:
    from accel_launch.notebook import NotebookLaunchError, notebook_launcher

# The notebook names are imported on first use (PEP 562): their module imports torch, which the
# command line (`accel --help`) must not.
_NOTEBOOK_NAMES = ("NotebookLaunchError", "notebook_launcher")


def __getattr__(name: str) -> Any:
    if name not in _NOTEBOOK_NAMES:
        raise AttributeError(f"module 'accel_launch' has no attribute {name!r}")
    from accel_launch import notebook

    value = getattr(notebook, name)
    globals()[name] = value
    return value


__all__ = [
    "ConfigError",
    "LaunchOptions",
    "LaunchOptionsError",
    "NotebookLaunchError",
    "__version__",
    "notebook_launcher",
]
