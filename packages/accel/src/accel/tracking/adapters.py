"""Thin trackers over third-party tracking libraries; each imports its library when built.

The names and arguments follow Accelerate's trackers, so `init_kwargs={"wandb": {...}}` carries over.
Each is checked against its real library, offline, by `nox -s trackers` (integration-tests/trackers).
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from typing import Any

from accel.tracking.base import GeneralTracker, on_main_process


def _library(name: str) -> Any:
    # Imported when the tracker starts, so that `import accel` never imports a tracking library.
    return importlib.import_module(name)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers(values: dict[str, Any], tracker: str) -> dict[str, float]:
    """Return the numbers of `values`, warning about the rest (the library takes only numbers)."""
    dropped = [key for key, value in values.items() if not _is_number(value)]
    if dropped:
        warnings.warn(
            f"{tracker} tracker: {', '.join(map(repr, dropped))} not logged: it takes numbers only",
            stacklevel=3,
        )
    return {k: v for k, v in values.items() if _is_number(v)}


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


class _InitRun(_LibraryRun):
    """A tracker over a library whose run is `library.init(project=...)`, with `run.config`,
    `run.log(values, step=...)` and `run.finish()` (W&B, and Trackio and SwanLab after it)."""

    library: str = ""

    @on_main_process
    def start(self) -> None:
        self.run = _library(self.library).init(project=self.run_name, **self.init_kwargs)

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.config.update(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        self.run.log(values, step=step, **kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.finish()


class WandBTracker(_InitRun):
    """Logs to a Weights & Biases run (project = the `init_trackers` project name)."""

    name = "wandb"
    library = "wandb"
    requires_logging_directory = False

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.config.update(values, allow_val_change=True)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log each list of images (numpy arrays or PIL images) of `values` under its key at `step`."""
        wandb = _library("wandb")
        for key, images in values.items():
            self.log({key: [wandb.Image(image) for image in images]}, step=step, **kwargs)

    @on_main_process
    def log_table(
        self,
        table_name: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Log a `wandb.Table` made of `columns` and `data`, or of `dataframe`, at `step`."""
        wandb = _library("wandb")
        table = wandb.Table(columns=columns, data=data, dataframe=dataframe)
        self.log({table_name: table}, step=step, **kwargs)


class TrackioTracker(_InitRun):
    """Logs to a Trackio run (project = the `init_trackers` project name), stored locally unless
    `init_kwargs` name a Space. The run's config is a plain dict, stored with every logged row."""

    name = "trackio"
    library = "trackio"
    requires_logging_directory = False


class SwanLabTracker(_InitRun):
    """Logs to a SwanLab run (project = the `init_trackers` project name)."""

    name = "swanlab"
    library = "swanlab"
    requires_logging_directory = False

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Log each list of images (numpy arrays or PIL images) of `values` under its key at `step`."""
        swanlab = _library("swanlab")
        for key, images in values.items():
            self.log({key: [swanlab.Image(image) for image in images]}, step=step, **kwargs)


class CometMLTracker(_LibraryRun):
    """Logs to a Comet experiment (project = the `init_trackers` project name); `init_kwargs` go to
    `comet_ml.start` (`online=False` keeps an offline archive)."""

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
    def log_images(
        self, values: dict[str, Any], step: int | None = None, kwargs: dict[str, dict[str, Any]] | None = None
    ) -> None:
        """Log each image (numpy array or PIL image, or an `(image, caption)` pair) of `values` at
        `step`; `kwargs["aim_image"]` goes to `aim.Image`, `kwargs["track"]` to `Run.track`."""
        aim = _library("aim")
        image_kwargs = (kwargs or {}).get("aim_image", {})
        track_kwargs = (kwargs or {}).get("track", {})
        for key, value in values.items():
            image, caption = value if isinstance(value, tuple) else (value, "")
            aim_image = aim.Image(image, caption=caption, **image_kwargs)
            self.run.track(aim_image, name=key, step=step, **track_kwargs)

    @on_main_process
    def finish(self) -> None:
        self.run.close()


class MLflowTracker(GeneralTracker):
    """Logs to an MLflow run of the experiment named after the project (Accelerate's arguments;
    `MLFLOW_EXPERIMENT_NAME`, `MLFLOW_RUN_ID`, `MLFLOW_TAGS` and `MLFLOW_NESTED_RUN` take precedence).
    A new experiment keeps its artifacts under `logging_dir` when one is given."""

    name = "mlflow"
    requires_logging_directory = False

    @on_main_process
    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | str | None = None,
        nested_run: bool | str | None = False,
        run_name: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__()
        tags = os.environ.get("MLFLOW_TAGS", tags)
        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        self.logging_dir = None if logging_dir is None else str(logging_dir)
        self.run_id = os.environ.get("MLFLOW_RUN_ID", run_id)
        self.tags = json.loads(tags) if isinstance(tags, str) else tags
        nested = os.environ.get("MLFLOW_NESTED_RUN", nested_run)
        self.nested_run = nested.lower() in ("1", "true", "yes") if isinstance(nested, str) else bool(nested)
        self.run_name = run_name
        self.description = description
        self.active_run: Any = None

    @on_main_process
    def start(self) -> None:
        mlflow = _library("mlflow")
        found = mlflow.get_experiment_by_name(self.experiment_name) if self.experiment_name else None
        if found is not None:
            experiment_id = found.experiment_id
        elif self.experiment_name:
            experiment_id = mlflow.create_experiment(
                self.experiment_name, artifact_location=self.logging_dir, tags=self.tags
            )
        else:
            experiment_id = None  # MLflow's default experiment
        self.active_run = mlflow.start_run(
            run_id=self.run_id,
            experiment_id=experiment_id,
            run_name=self.run_name,
            nested=self.nested_run,
            tags=self.tags,
            description=self.description,
        )

    @property
    def tracker(self) -> Any:
        return self.active_run

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        mlflow = _library("mlflow")
        validation = importlib.import_module("mlflow.utils.validation")
        longest, per_batch = validation.MAX_PARAM_VAL_LENGTH, validation.MAX_PARAMS_TAGS_PER_BATCH
        too_long = [key for key, value in values.items() if len(str(value)) > longest]
        if too_long:
            warnings.warn(
                f"mlflow tracker: parameter(s) {', '.join(map(repr, too_long))} not logged: MLflow "
                f"takes values of at most {longest} characters",
                stacklevel=2,
            )
        params = [(key, value) for key, value in values.items() if key not in too_long]
        for start in range(0, len(params), per_batch):  # MLflow takes at most `per_batch` in one call
            mlflow.log_params(dict(params[start : start + per_batch]))

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        mlflow = _library("mlflow")
        mlflow.log_metrics(_numbers(values, self.name), step=step)

    @on_main_process
    def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
        """Save a matplotlib or plotly `figure` as the run's artifact `artifact_file`."""
        _library("mlflow").log_figure(figure=figure, artifact_file=artifact_file, **save_kwargs)

    @on_main_process
    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        """Copy every file of `local_dir` into the run's artifacts (under `artifact_path`)."""
        _library("mlflow").log_artifacts(local_dir=local_dir, artifact_path=artifact_path)

    @on_main_process
    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """Copy the file `local_path` into the run's artifacts (under `artifact_path`)."""
        _library("mlflow").log_artifact(local_path=local_path, artifact_path=artifact_path)

    @on_main_process
    def finish(self) -> None:
        _library("mlflow").end_run()


class ClearMLTracker(_LibraryRun):
    """Logs to a ClearML task (the current one if the script already started one).

    As in Accelerate, a key `train_X`, `eval_X` or `test_X` is reported as scalar X of series
    train, eval or test; any other key as a scalar of series train.
    """

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

    @staticmethod
    def title_and_series(key: str) -> tuple[str, str]:
        """Return ClearML's (title, series) of a logged key: `eval_loss` -> ("loss", "eval")."""
        for prefix in ("eval", "test", "train"):
            if key.startswith(prefix + "_"):
                return key[len(prefix) + 1 :], prefix
        return key, "train"

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.run.connect_configuration(values)

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        logger = self.run.get_logger()
        for key, value in _numbers(values, self.name).items():
            if step is None:
                logger.report_single_value(name=key, value=value, **kwargs)
            else:
                title, series = self.title_and_series(key)
                logger.report_scalar(title=title, series=series, value=value, iteration=step, **kwargs)

    @on_main_process
    def log_images(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Report each image (numpy array or PIL image) of `values` at iteration `step`."""
        logger = self.run.get_logger()
        for key, image in values.items():
            title, series = self.title_and_series(key)
            logger.report_image(title=title, series=series, iteration=step, image=image, **kwargs)

    @on_main_process
    def log_table(
        self,
        table_name: str,
        columns: list[str] | None = None,
        data: list[list[Any]] | None = None,
        dataframe: Any = None,
        step: int | None = None,
        **kwargs: Any,
    ) -> None:
        """Report a table made of `columns` and `data` (or `data` alone, its first row the header),
        or of `dataframe`, at iteration `step`."""
        table = dataframe
        if table is None:
            if data is None:
                raise ValueError("clearml tracker: log_table needs `data` (with `columns`) or `dataframe`")
            table = [columns, *data] if columns else data
        title, series = self.title_and_series(table_name)
        logger = self.run.get_logger()
        logger.report_table(title=title, series=series, table_plot=table, iteration=step, **kwargs)

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
        for key, value in _numbers(values, self.name).items():
            self.run.log_metric(key, value, **kwargs)
        self.run.next_step()

    @on_main_process
    def finish(self) -> None:
        self.run.end()
