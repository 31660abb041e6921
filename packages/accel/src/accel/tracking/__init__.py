"""Experiment trackers (Accelerate's `accelerate.tracking`): `GeneralTracker`, the built-in and
third-party trackers, and how `Accelerator(log_with=...)` names them.

Names load on first use (PEP 562): the facade imports `tracking.methods` when it is built, and the
trackers' code loads only for a run that asks for one.
"""

from typing import TYPE_CHECKING, Any

from accel_state.lazy_exports import lazy_attribute, lazy_dir

if TYPE_CHECKING:
    from accel.tracking.adapters import (
        AimTracker,
        ClearMLTracker,
        CometMLTracker,
        DVCLiveTracker,
        MLflowTracker,
        SwanLabTracker,
        TrackioTracker,
        WandBTracker,
    )
    from accel.tracking.base import GeneralTracker, TrackerError, TrackerNotInstalledError, on_main_process
    from accel.tracking.builtin import (
        JSONL_CONFIG_FILE_NAME,
        JSONL_FILE_NAME,
        JSONLinesTracker,
        TensorBoardTracker,
    )
    from accel.tracking.registry import LoggerType, build_trackers, get_available_trackers, resolve_trackers

# Public name -> the module that defines it.
_LAZY = {
    "AimTracker": "accel.tracking.adapters",
    "ClearMLTracker": "accel.tracking.adapters",
    "CometMLTracker": "accel.tracking.adapters",
    "DVCLiveTracker": "accel.tracking.adapters",
    "GeneralTracker": "accel.tracking.base",
    "JSONLinesTracker": "accel.tracking.builtin",
    "JSONL_CONFIG_FILE_NAME": "accel.tracking.builtin",
    "JSONL_FILE_NAME": "accel.tracking.builtin",
    "LoggerType": "accel.tracking.registry",
    "MLflowTracker": "accel.tracking.adapters",
    "SwanLabTracker": "accel.tracking.adapters",
    "TensorBoardTracker": "accel.tracking.builtin",
    "TrackerError": "accel.tracking.base",
    "TrackerNotInstalledError": "accel.tracking.base",
    "TrackioTracker": "accel.tracking.adapters",
    "WandBTracker": "accel.tracking.adapters",
    "build_trackers": "accel.tracking.registry",
    "get_available_trackers": "accel.tracking.registry",
    "on_main_process": "accel.tracking.base",
    "resolve_trackers": "accel.tracking.registry",
}

__all__ = [
    "AimTracker",
    "ClearMLTracker",
    "CometMLTracker",
    "DVCLiveTracker",
    "GeneralTracker",
    "JSONL_CONFIG_FILE_NAME",
    "JSONL_FILE_NAME",
    "JSONLinesTracker",
    "LoggerType",
    "MLflowTracker",
    "SwanLabTracker",
    "TensorBoardTracker",
    "TrackerError",
    "TrackerNotInstalledError",
    "TrackioTracker",
    "WandBTracker",
    "build_trackers",
    "get_available_trackers",
    "on_main_process",
    "resolve_trackers",
]


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, name)


def __dir__() -> list[str]:
    return lazy_dir(__name__, _LAZY)
