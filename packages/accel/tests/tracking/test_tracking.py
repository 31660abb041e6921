"""Experiment tracking as Accelerate's docs use it: log_with, init_trackers, log, get_tracker."""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json

import pytest
import torch

from accel import (
    Accelerator,
    GeneralTracker,
    LoggerType,
    PartialState,
    ProjectConfiguration,
    TrackerError,
    tracking,
)
from accel.tracking import JSONLinesTracker, TensorBoardTracker, TrackerNotInstalledError, on_main_process

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


def _read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_jsonl_tracker_writes_one_line_per_log_and_the_config(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=str(tmp_path))
    hps = {"num_iterations": 5, "learning_rate": 1e-2}
    accelerator.init_trackers("my_project", config=hps)
    accelerator.log({"train_loss": 1.12, "valid_loss": 0.8}, step=1)
    accelerator.log({"train_loss": torch.tensor(0.5), "note": "halfway"}, step=2)
    accelerator.log({"epoch_time": 3})
    accelerator.end_training()
    run_dir = tmp_path / "my_project"
    assert _read_jsonl(run_dir / tracking.JSONL_FILE_NAME) == [
        {"step": 1, "values": {"train_loss": 1.12, "valid_loss": 0.8}},
        {"step": 2, "values": {"train_loss": 0.5, "note": "halfway"}},
        {"step": None, "values": {"epoch_time": 3}},
    ]
    assert json.loads((run_dir / tracking.JSONL_CONFIG_FILE_NAME).read_text()) == hps


def test_logging_dir_of_the_project_configuration_is_used(tmp_path):
    config = ProjectConfiguration(project_dir=str(tmp_path / "proj"), logging_dir=str(tmp_path / "logs"))
    accelerator = Accelerator(log_with=[LoggerType.JSONL], project_config=config)
    accelerator.init_trackers("run")
    accelerator.log({"a": 1}, step=0)
    accelerator.end_training()
    assert (tmp_path / "logs" / "run" / tracking.JSONL_FILE_NAME).exists()


def test_get_tracker_returns_the_tracker_or_its_object(tmp_path):
    accelerator = Accelerator(log_with="jsonl", project_dir=str(tmp_path))
    accelerator.init_trackers("run")
    tracker = accelerator.get_tracker("jsonl")
    assert isinstance(tracker, JSONLinesTracker) and accelerator.trackers == [tracker]
    assert accelerator.get_tracker("jsonl", unwrap=True) is tracker.file
    with pytest.raises(ValueError, match="'wandb' is not a tracker"):
        accelerator.get_tracker("wandb")
    accelerator.end_training()


def test_no_log_with_means_no_trackers():
    accelerator = Accelerator()
    accelerator.init_trackers("run", config={"lr": 1})
    accelerator.log({"loss": 1.0}, step=1)
    assert accelerator.trackers == []
    accelerator.end_training()


class MyCustomTracker(GeneralTracker):
    """A custom tracker as Accelerate's guide writes one."""

    name = "custom"
    requires_logging_directory = False

    @on_main_process
    def __init__(self, run_name: str):
        super().__init__()
        self.run_name = run_name
        self.config = None
        self.logged = []
        self.log_kwargs = []

    @property
    def tracker(self):
        return self.logged

    @on_main_process
    def store_init_configuration(self, values: dict):
        self.config = values

    @on_main_process
    def log(self, values: dict, step=None, **kwargs):
        self.logged.append((step, values))
        self.log_kwargs.append(kwargs)


def test_a_custom_tracker_instance_is_used_with_the_built_in_ones(tmp_path):
    custom = MyCustomTracker("run")
    accelerator = Accelerator(log_with=[custom, "jsonl"], project_dir=str(tmp_path))
    accelerator.init_trackers("run", config={"lr": 0.1})
    accelerator.log({"loss": 2.0}, step=3, log_kwargs={"custom": {"commit": False}})
    assert [t.name for t in accelerator.trackers] == ["custom", "jsonl"]
    assert custom.config == {"lr": 0.1} and custom.logged == [(3, {"loss": 2.0})]
    assert custom.log_kwargs == [{"commit": False}]
    assert accelerator.get_tracker("custom", unwrap=True) is custom.logged
    accelerator.end_training()


def test_a_tracker_class_missing_its_attributes_is_refused():
    class Incomplete(GeneralTracker):
        name = "incomplete"

    with pytest.raises(NotImplementedError, match="does not define requires_logging_directory"):
        Incomplete()


def test_an_unknown_tracker_name_is_a_one_line_error():
    with pytest.raises(TrackerError, match="unknown tracker 'nope'; choose from all, tensorboard") as info:
        Accelerator(log_with="nope")
    assert "\n" not in str(info.value)


def test_a_file_writing_tracker_needs_a_logging_directory():
    with pytest.raises(TrackerError, match="'jsonl' tracker writes files and needs a logging directory"):
        Accelerator(log_with="jsonl")


@pytest.mark.parametrize(
    ("name", "package"),
    [
        ("wandb", "wandb"),
        ("comet_ml", "comet-ml"),
        ("aim", "aim"),
        ("mlflow", "mlflow"),
        ("clearml", "clearml"),
        ("dvclive", "dvclive"),
        ("swanlab", "swanlab"),
        ("trackio", "trackio"),
    ],
)
def test_a_tracker_whose_package_is_missing_names_the_package(name, package, tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda mod, *a: None if mod == name else real_find_spec(mod, *a)
    )
    with pytest.raises(TrackerNotInstalledError, match=f"needs the {package} package") as info:
        Accelerator(log_with=[name], project_dir=str(tmp_path))
    assert isinstance(info.value, ImportError) and "\n" not in str(info.value)
    assert f"pip install {package}" in str(info.value)
    # "all" leaves a missing package out instead of failing.
    assert name not in Accelerator(log_with="all", project_dir=str(tmp_path)).log_with


def test_all_is_every_installed_tracker(tmp_path):
    accelerator = Accelerator(log_with="all", project_dir=str(tmp_path))
    assert accelerator.log_with == tracking.get_available_trackers()
    assert "jsonl" in accelerator.log_with
    assert ("tensorboard" in accelerator.log_with) == HAS_TENSORBOARD
    # Without a logging directory, "all" holds only the trackers that need none.
    assert "jsonl" not in Accelerator(log_with="all").log_with


def test_only_main_process_only_trackers_are_skipped_on_other_ranks(tmp_path):
    built = tracking.build_trackers(["jsonl"], "run", tmp_path, {}, is_main_process=False)
    assert built == [] and not (tmp_path / "run").exists()


def test_a_missing_tracker_on_another_rank_is_a_blank_tracker(tmp_path, monkeypatch):
    accelerator = Accelerator(log_with="jsonl", project_dir=str(tmp_path))
    monkeypatch.setattr(PartialState, "is_main_process", property(lambda self: False))
    accelerator.init_trackers("run")
    assert accelerator.trackers == []
    blank = accelerator.get_tracker("jsonl")
    assert type(blank) is GeneralTracker and blank.tracker is None
    blank.log({"loss": 1.0}, step=1)  # does nothing, as on Accelerate's non-main ranks
    accelerator.log({"loss": 1.0}, step=1)
    accelerator.end_training()
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="tensorboard is not installed")
def test_tensorboard_tracker_writes_event_files_that_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accelerator = Accelerator(log_with="tensorboard", project_dir=str(tmp_path))
    accelerator.init_trackers("tb_run", config={"lr": 0.01, "layers": [1, 2], "name": "x"})
    tracker = accelerator.get_tracker("tensorboard")
    assert isinstance(tracker, TensorBoardTracker)
    assert accelerator.get_tracker("tensorboard", unwrap=True) is tracker.writer
    for step in range(3):
        accelerator.log({"loss": 1.0 / (step + 1), "acc": torch.tensor(0.25 * step)}, step=step)
    accelerator.log({"note": "done"}, step=3)
    images = torch.zeros(2, 8, 6, 3)  # two 8x6 RGB images, channels last
    images[1, :, :3] = 1.0
    tracker.log_images({"samples": images}, step=4, dataformats="NHWC")
    accelerator.end_training()
    events = EventAccumulator(str(tmp_path / "tb_run"), size_guidance={"images": 0})
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"loss", "acc"}
    (image_event,) = [e for e in events.Images("samples")]
    # add_images tiles the batch side by side into one PNG: 8 high, 2 x 6 wide.
    assert (image_event.step, image_event.height, image_event.width) == (4, 8, 12)
    losses = [(e.step, round(e.value, 5)) for e in events.Scalars("loss")]
    assert losses == [(0, 1.0), (1, 0.5), (2, 0.33333)]
    assert [e.value for e in events.Scalars("acc")] == [0.0, 0.25, 0.5]


class _Recorder:
    """Stands for a tracking library's run object: records every call."""

    def __init__(self, *args, **kwargs):
        self.calls = [("__init__", args, kwargs)]
        self.config = self

    def __getattr__(self, name):
        def record(*args, **kwargs):
            self.calls.append((name, args, kwargs))

        return record


def _fake_library(monkeypatch, name, **attributes):
    import sys
    import types

    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    monkeypatch.setitem(sys.modules, name, module)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda mod, *a: module.__spec__ if mod == name else real_find_spec(mod, *a),
    )
    # The probes also ask for the installed distribution (a stray folder of that name is no package).
    real_distribution = importlib.metadata.distribution
    monkeypatch.setattr(
        importlib.metadata,
        "distribution",
        lambda dist: types.SimpleNamespace(name=dist) if dist == name else real_distribution(dist),
    )


def test_library_trackers_start_log_and_finish_through_the_librarys_run(monkeypatch, tmp_path):
    runs = []

    def wandb_init(**kwargs):
        runs.append(_Recorder(**kwargs))
        return runs[-1]

    _fake_library(monkeypatch, "wandb", init=wandb_init)
    _fake_library(monkeypatch, "dvclive", Live=lambda **kwargs: runs.append(_Recorder(**kwargs)) or runs[-1])
    accelerator = Accelerator(log_with=["wandb", "dvclive"], project_dir=str(tmp_path))
    accelerator.init_trackers("proj", config={"lr": 0.1})
    accelerator.log({"loss": 1.5}, step=3)
    wandb_run, live = runs
    assert accelerator.get_tracker("wandb", unwrap=True) is wandb_run
    assert accelerator.get_tracker("dvclive", unwrap=True) is live
    accelerator.end_training()
    assert wandb_run.calls[0] == ("__init__", (), {"project": "proj"})
    assert ("update", ({"lr": 0.1},), {"allow_val_change": True}) in wandb_run.calls
    assert ("log", ({"loss": 1.5},), {"step": 3}) in wandb_run.calls and wandb_run.calls[-1][0] == "finish"
    assert ("log_params", ({"lr": 0.1},), {}) in live.calls
    assert ("log_metric", ("loss", 1.5), {}) in live.calls and live.step == 3


def test_which_trackers_are_installed_is_what_the_utils_probes_say(tmp_path, monkeypatch):
    import accel.utils

    try:
        importlib.metadata.distribution("wandb")
        pytest.skip("wandb is installed")
    except importlib.metadata.PackageNotFoundError:
        pass
    # A folder named like a tracking library, on the path but not installed: no tracker, no probe.
    (tmp_path / "wandb").mkdir()
    (tmp_path / "wandb" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert importlib.util.find_spec("wandb").origin == str(tmp_path / "wandb" / "__init__.py")
    assert accel.utils.is_wandb_available() is False
    with pytest.raises(TrackerNotInstalledError, match="needs the wandb package"):
        Accelerator(log_with="wandb")
    probes = {
        "tensorboard": accel.utils.is_tensorboard_available,
        "wandb": accel.utils.is_wandb_available,
        "comet_ml": accel.utils.is_comet_ml_available,
        "aim": accel.utils.is_aim_available,
        "mlflow": accel.utils.is_mlflow_available,
        "clearml": accel.utils.is_clearml_available,
        "dvclive": accel.utils.is_dvclive_available,
        "swanlab": accel.utils.is_swanlab_available,
        "trackio": accel.utils.is_trackio_available,
    }
    expected = ["jsonl", *(name for name, probe in probes.items() if probe())]
    assert sorted(tracking.get_available_trackers()) == sorted(expected)
