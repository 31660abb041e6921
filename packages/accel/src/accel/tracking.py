"""Experiment trackers: the built-in TensorBoard and JSON-lines trackers, the third-party adapters,
and how `Accelerator(log_with=...)` names them (Accelerate's `accelerate.tracking`).

A tracker whose library is missing is refused when it is asked for, naming the package to install;
"all" means every tracker whose library is installed.
"""

from __future__ import annotations

import enum
import importlib.util
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from accel.tracker_adapters import (
    AimTracker,
    ClearMLTracker,
    CometMLTracker,
    DVCLiveTracker,
    MLflowTracker,
    WandBTracker,
)
from accel.tracker_base import (
    GeneralTracker,
    TrackerError,
    TrackerNotInstalledError,
    on_main_process,
)
from accel_launch.run_logs import JSONL_FILE_NAME

JSONL_CONFIG_FILE_NAME = "config.json"


class LoggerType(str, enum.Enum):
    """The tracker names `log_with` accepts (Accelerate's `accelerate.utils.LoggerType`, plus JSONL)."""

    ALL = "all"
    AIM = "aim"
    TENSORBOARD = "tensorboard"
    WANDB = "wandb"
    COMETML = "comet_ml"
    MLFLOW = "mlflow"
    CLEARML = "clearml"
    DVCLIVE = "dvclive"
    JSONL = "jsonl"

    def __str__(self) -> str:
        return self.value


class TensorBoardTracker(GeneralTracker):
    """Writes TensorBoard event files under `logging_dir/run_name` (torch's SummaryWriter)."""

    name = "tensorboard"
    requires_logging_directory = True

    @on_main_process
    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = os.path.join(logging_dir, run_name)
        self.writer_kwargs = kwargs
        self.writer: Any = None

    @on_main_process
    def start(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(self.logging_dir, **self.writer_kwargs)

    @property
    def tracker(self) -> Any:
        return self.writer

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        # add_hparams takes numbers, strings, booleans and tensors; anything else is shown as text.
        simple = (int, float, str, bool)
        hparams = {k: v if isinstance(v, simple) else str(v) for k, v in values.items()}
        self.writer.add_hparams(hparams, metric_dict={})
        self.writer.flush()

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
                value = value.item()
            if isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                self.writer.add_scalars(key, value, global_step=step, **kwargs)
        self.writer.flush()

    @on_main_process
    def finish(self) -> None:
        self.writer.close()


def _jsonable(value: Any) -> Any:
    # Tensors and numpy values become numbers or lists; anything else is written as its text.
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class JSONLinesTracker(GeneralTracker):
    """Appends one JSON object per `log` call, `{"step": ..., "values": {...}}`, to
    `logging_dir/run_name/metrics.jsonl`; the configuration goes to `config.json` beside it.
    Needs nothing installed."""

    name = "jsonl"
    requires_logging_directory = True

    @on_main_process
    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = Path(logging_dir) / run_name
        self.file: IO[str] | None = None

    @property
    def path(self) -> Path:
        return self.logging_dir / JSONL_FILE_NAME

    @on_main_process
    def start(self) -> None:
        self.logging_dir.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed by finish)

    @property
    def tracker(self) -> Any:
        return self.file

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        text = json.dumps(values, default=_jsonable, indent=2)
        (self.logging_dir / JSONL_CONFIG_FILE_NAME).write_text(text + "\n", encoding="utf-8")

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if self.file is None:
            raise TrackerError(f"jsonl tracker: log() after finish() (file {self.path})")
        self.file.write(json.dumps({"step": step, "values": values}, default=_jsonable) + "\n")
        self.file.flush()

    @on_main_process
    def finish(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


@dataclass(frozen=True)
class _Known:
    tracker_class: type[GeneralTracker]
    module: str | None  # what must be importable; None: nothing
    package: str  # what to pip install


_KNOWN: dict[str, _Known] = {
    "tensorboard": _Known(TensorBoardTracker, "tensorboard", "tensorboard"),
    "jsonl": _Known(JSONLinesTracker, None, ""),
    "wandb": _Known(WandBTracker, "wandb", "wandb"),
    "comet_ml": _Known(CometMLTracker, "comet_ml", "comet-ml"),
    "aim": _Known(AimTracker, "aim", "aim"),
    "mlflow": _Known(MLflowTracker, "mlflow", "mlflow"),
    "clearml": _Known(ClearMLTracker, "clearml", "clearml"),
    "dvclive": _Known(DVCLiveTracker, "dvclive", "dvclive"),
}


def _installed(known: _Known) -> bool:
    return known.module is None or importlib.util.find_spec(known.module) is not None


def get_available_trackers() -> list[str]:
    """Return the names of the trackers whose libraries are installed."""
    return [name for name, known in _KNOWN.items() if _installed(known)]


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
    if not _installed(known):
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


__all__ = [
    "AimTracker",
    "ClearMLTracker",
    "CometMLTracker",
    "DVCLiveTracker",
    "GeneralTracker",
    "JSONLinesTracker",
    "LoggerType",
    "MLflowTracker",
    "TensorBoardTracker",
    "TrackerError",
    "TrackerNotInstalledError",
    "WandBTracker",
    "build_trackers",
    "get_available_trackers",
    "on_main_process",
    "resolve_trackers",
]
