"""The trackers that come with accel: TensorBoard event files and JSON lines (which needs nothing)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from accel.tracking.base import GeneralTracker, TrackerError, on_main_process
from accel_launch.runs.logs import JSONL_FILE_NAME  # `accel plot` reads what this tracker writes

JSONL_CONFIG_FILE_NAME = "config.json"


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
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # as in Accelerate: tensorboardX writes the same event files
            from tensorboardX import SummaryWriter  # type: ignore[import-not-found, no-redef]

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
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log batches of images (`{name: NCHW array or tensor}`; `dataformats="NHWC"` for
        channels-last), as Accelerate's tracker does with `SummaryWriter.add_images`."""
        for key, images in values.items():
            self.writer.add_images(key, images, global_step=step, **kwargs)
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
