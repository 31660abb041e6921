"""accel-launch: the `accel` command line, `notebook_launcher` and the shared multi-process test helpers."""

from typing import TYPE_CHECKING, Any

from accel_launch.__about__ import __version__
from accel_state.lazy_exports import lazy_attribute

if TYPE_CHECKING:
    from accel_launch.config.schema import ConfigError
    from accel_launch.launch.options import LaunchOptions, LaunchOptionsError
    from accel_launch.notebook.launcher import NotebookLaunchError, notebook_launcher

# The names are imported on first use (PEP 562): the notebook's module imports torch, which the
# command line (`accel --help`) must not, and the config schema reads the launch hooks, which
# `accel.tracking` (importing `run_logs.JSONL_FILE_NAME`) has no use for.
_HOMES = {
    "ConfigError": ".config.schema",
    "LaunchOptions": ".launch.options",
    "LaunchOptionsError": ".launch.options",
    "NotebookLaunchError": ".notebook.launcher",
    "notebook_launcher": ".notebook.launcher",
}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _HOMES, name)


__all__ = [
    "ConfigError",
    "LaunchOptions",
    "LaunchOptionsError",
    "NotebookLaunchError",
    "__version__",
    "notebook_launcher",
]
