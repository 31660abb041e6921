"""How `Accelerator(log_with=...)` names trackers: `LoggerType`, which trackers are installed, and
building the trackers asked for.

A tracker whose library is missing is refused when it is asked for, naming the package to install;
"all" means every tracker whose library is installed. Installed means what `accel.utils`'s
`is_*_available` probes say (`accel.environment.availability`): one answer for both.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from accel.environment import availability
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
from accel.tracking.base import GeneralTracker, TrackerError, TrackerNotInstalledError
from accel.tracking.builtin import JSONLinesTracker, TensorBoardTracker


class LoggerType(str, enum.Enum):
    """The tracker names `log_with` accepts (Accelerate's `accelerate.utils.LoggerType`, plus JSONL)."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    TRACKIO = "trackio"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    SWANLAB = "swanlab"
    JSONL = "jsonl"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class _Known:
    tracker_class: type[GeneralTracker]
    installed: Callable[[], bool]  # the probe of its library
    package: str  # what to pip install


def _nothing_to_install() -> bool:
    return True


_KNOWN: dict[str, _Known] = {
    "tensorboard": _Known(TensorBoardTracker, availability.is_tensorboard_available, "tensorboard"),
    "jsonl": _Known(JSONLinesTracker, _nothing_to_install, ""),
    "wandb": _Known(WandBTracker, availability.is_wandb_available, "wandb"),
    "comet_ml": _Known(CometMLTracker, availability.is_comet_ml_available, "comet-ml"),
    "aim": _Known(AimTracker, availability.is_aim_available, "aim"),
    "mlflow": _Known(MLflowTracker, availability.is_mlflow_available, "mlflow"),
    "clearml": _Known(ClearMLTracker, availability.is_clearml_available, "clearml"),
    "dvclive": _Known(DVCLiveTracker, availability.is_dvclive_available, "dvclive"),
    "swanlab": _Known(SwanLabTracker, availability.is_swanlab_available, "swanlab"),
    "trackio": _Known(TrackioTracker, availability.is_trackio_available, "trackio"),
}


def get_available_trackers() -> list[str]:
    """Return the names of the trackers whose libraries are installed."""
    return [name for name, known in _KNOWN.items() if known.installed()]


def _name_of(item: Any) -> str:
    if isinstance(item, enum.Enum):
        return str(item.value).lower()
    if not isinstance(item, str):
        raise TrackerError(f"log_with: {item!r} is neither a tracker name nor a GeneralTracker instance")
    return item.lower()


def resolve_trackers(log_with: Any, logging_dir: str | os.PathLike[str] | None) -> list[str | GeneralTracker]:
    """Return the trackers `log_with` asks for (names, and GeneralTracker instances as given).

    `log_with` is a name, a GeneralTracker, or a list of them; "all" stands for every installed
    tracker (those that write files only when there is a logging directory). Raises TrackerError
    for an unknown name or a file-writing tracker without a logging directory, and
    TrackerNotInstalledError naming the package for a tracker whose library is missing.
    """
    if log_with is None:
        return []
    items = list(log_with) if isinstance(log_with, (list, tuple)) else [log_with]
    resolved: list[str | GeneralTracker] = []
    for item in items:
        if isinstance(item, GeneralTracker):
            resolved.append(item)
            continue
        name = _name_of(item)
        if name == LoggerType.ALL.value:
            names = [
                n
                for n in get_available_trackers()
                if logging_dir is not None or not _KNOWN[n].tracker_class.requires_logging_directory
            ]
        elif name in _KNOWN:
            names = [name]
        else:
            choices = ", ".join(["all", *_KNOWN])
            raise TrackerError(
                f"log_with: unknown tracker {item!r}; choose from {choices}, or pass a GeneralTracker"
            )
        for tracker_name in names:
            _check_usable(tracker_name, logging_dir)
            if tracker_name not in resolved:
                resolved.append(tracker_name)
    return resolved


def _check_usable(name: str, logging_dir: str | os.PathLike[str] | None) -> None:
    known = _KNOWN[name]
    if not known.installed():
        raise TrackerNotInstalledError(
            f"log_with: the {name!r} tracker needs the {known.package} package; "
            f"install it with `pip install {known.package}`"
        )
    if known.tracker_class.requires_logging_directory and logging_dir is None:
        raise TrackerError(
            f"log_with: the {name!r} tracker writes files and needs a logging directory: "
            "pass Accelerator(project_dir=...) or ProjectConfiguration(logging_dir=...)"
        )


def build_trackers(
    requested: Iterable[str | GeneralTracker],
    project_name: str,
    logging_dir: str | os.PathLike[str] | None,
    init_kwargs: Mapping[str, Mapping[str, Any]],
    is_main_process: bool,
) -> list[GeneralTracker]:
    """Return the trackers this process keeps, started: those with `main_process_only` only on the
    main process. `init_kwargs` maps a tracker name to the keyword arguments of its constructor."""
    trackers: list[GeneralTracker] = []
    for item in requested:
        if isinstance(item, GeneralTracker):
            if is_main_process or not item.main_process_only:
                trackers.append(item)
            continue
        tracker_class = _KNOWN[item].tracker_class
        if tracker_class.main_process_only and not is_main_process:
            continue
        kwargs = dict(init_kwargs.get(item, {}))
        make: Callable[..., GeneralTracker] = tracker_class
        if tracker_class.requires_logging_directory:
            trackers.append(make(project_name, logging_dir, **kwargs))
        else:
            trackers.append(make(project_name, **kwargs))
    for tracker in trackers:
        tracker.start()
    return trackers
