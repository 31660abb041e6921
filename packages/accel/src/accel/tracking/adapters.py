"""Thin trackers over third-party tracking libraries; each imports its library when built.

The names and arguments follow Accelerate's trackers, so `init_kwargs={"wandb": {...}}` carries over.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from accel.tracking.base import GeneralTracker, on_main_process


def _library(name: str) -> Any:
    # Imported when the tracker starts, so that `import accel` never imports a tracking library.
    return importlib.import_module(name)


def _numbers(values: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class _LibraryRun(GeneralTracker):
    """A tracker over one run object of a tracking library: `start` sets `self.run`, which
    `tracker` (`get_tracker(..., unwrap=True)`) returns."""

    run: Any = None

    @on_main_process
    def __init__(self, run_name: str | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.init_kwargs = kwargs

    @property
    def tracker(self) -> Any:
        return self.run


class WandBTracker(_LibraryRun):
    """Logs to a Weights & Biases run (project = the `init_trackers` project name)."""

    name = "wandb"
    requires_logging_directory = False

    @on_main_process
    def start(self) -> None:
        wandb = _library("wandb")
        self.run = wandb.init(project=self.run_name, **self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.config.update(values, allow_val_change=True)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.finish()


class CometMLTracker(_LibraryRun):
    """Logs to a Comet experiment (project = the `init_trackers` project name)."""

    name = "comet_ml"
    requires_logging_directory = False

    @on_main_process
    def start(self) -> None:
        comet_ml = _library("comet_ml")
        self.run = comet_ml.start(project_name=self.run_name, **self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.log_parameters(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if step is not None:
            self.run.set_step(step)
        for key, value in values.items():
            if isinstance(value, (int, float)):
                self.run.log_metric(key, value, step=step, **kwargs)
            elif isinstance(value, str):
                self.run.log_other(key, value, **kwargs)
            elif isinstance(value, dict):
                self.run.log_metrics(value, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.end()


class AimTracker(_LibraryRun):
    """Logs to an Aim run stored in the logging directory."""

    name = "aim"
    requires_logging_directory = True

    @on_main_process
    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str] = ".", **kwargs: Any) -> None:
        super().__init__(run_name, **kwargs)
        self.logging_dir = logging_dir

    @on_main_process
    def start(self) -> None:
        self.run = _library("aim").Run(repo=str(self.logging_dir), **self.init_kwargs)
        self.run.name = self.run_name

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run["hparams"] = values

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            self.run.track(value, name=key, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.close()


class MLflowTracker(GeneralTracker):
    """Logs to an MLflow run of the experiment named after the project."""

    name = "mlflow"
    requires_logging_directory = False

    @on_main_process
    def __init__(
        self, experiment_name: str | None = None, logging_dir: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__()
        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        self.logging_dir = logging_dir
        self.run_kwargs = kwargs

    @on_main_process
    def start(self) -> None:
        mlflow = _library("mlflow")
        experiment = mlflow.set_experiment(self.experiment_name)
        self.active_run = mlflow.start_run(experiment_id=experiment.experiment_id, **self.run_kwargs)

    @property
    def tracker(self) -> Any:
        return self.active_run

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        mlflow = _library("mlflow")
        # MLflow refuses parameter values longer than its limit (500 characters in recent versions).
        mlflow.log_params({k: str(v)[:500] for k, v in values.items()})

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        mlflow = _library("mlflow")
        mlflow.log_metrics(_numbers(values), step=step)

    @on_main_process
    def finish(self) -> None:
        mlflow = _library("mlflow")
        mlflow.end_run()


class ClearMLTracker(_LibraryRun):
    """Logs to a ClearML task (the current one if the script already started one)."""

    name = "clearml"
    requires_logging_directory = False

    @on_main_process
    def start(self) -> None:
        Task = _library("clearml").Task
        current = Task.current_task()
        self._owns_task = current is None
        if current is not None:
            self.run = current
            return
        self.init_kwargs.setdefault("project_name", os.environ.get("CLEARML_PROJECT", self.run_name))
        self.init_kwargs.setdefault("task_name", os.environ.get("CLEARML_TASK", self.run_name))
        self.run = Task.init(**self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.connect_configuration(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        logger = self.run.get_logger()
        for key, value in _numbers(values).items():
            if step is None:
                logger.report_single_value(name=key, value=value, **kwargs)
            else:
                title, _, series = key.partition("/")
                logger.report_scalar(
                    title=title, series=series or title, value=value, iteration=step, **kwargs
                )

    @on_main_process
    def finish(self) -> None:
        if self._owns_task:
            self.run.close()


class DVCLiveTracker(_LibraryRun):
    """Logs to a DVCLive `Live` (given as `live=`, or made from the keyword arguments)."""

    name = "dvclive"
    requires_logging_directory = False

    @on_main_process
    def __init__(self, run_name: str | None = None, live: Any = None, **kwargs: Any) -> None:
        super().__init__(run_name, **kwargs)
        self.run = live

    @on_main_process
    def start(self) -> None:
        if self.run is None:
            self.run = _library("dvclive").Live(**self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.log_params(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if step is not None:
            self.run.step = step
        for key, value in _numbers(values).items():
            self.run.log_metric(key, value, **kwargs)
        self.run.next_step()

    @on_main_process
    def finish(self) -> None:
        self.run.end()
