"""Each library tracker against its real library, offline: `Accelerator(log_with=NAME)` logs a few
steps, then the library's own reader (or its files) must hold exactly what was logged.

The libraries are installed by `nox -s trackers` only; elsewhere each test skips, naming that session.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from accel import Accelerator

SESSION = "the tracking libraries run in the nox session trackers"
CONFIG = {"lr": 0.01, "layers": 2, "optimizer": "adamw"}
STEPS = (0, 10, 20)  # not 0, 1, 2: the step must be the one given, not a count of the calls


def _metrics(k: int) -> dict[str, float]:
    return {"loss": 1.0 / (k + 1), "acc": 0.25 * k}


def _log_steps(accelerator: Accelerator) -> None:
    for k, step in enumerate(STEPS):
        accelerator.log(_metrics(k), step=step)


def _expected(name: str) -> list[tuple[int, float]]:
    return [(step, _metrics(k)[name]) for k, step in enumerate(STEPS)]


def _image() -> Any:
    numpy = pytest.importorskip("numpy")
    image = numpy.zeros((8, 8, 3), dtype=numpy.uint8)
    image[:, :4] = 255
    return image


# --- Weights & Biases --------------------------------------------------------------------------


def _wandb_records(path: Path) -> list[Any]:
    """Return the protobuf records of a W&B run file (`run-ID.wandb`): a 7-byte header, then
    LevelDB-log framing (32 KiB blocks; records of crc32, length, type, data), each record one
    `wandb_internal_pb2.Record`. wandb 0.31 reads it in its Go core only, so it is read here."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    records, position, block, parts = [], 7, 32768, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:  # a block's tail too short for a record header is padding
            position += left
            continue
        length, kind = struct.unpack("<HB", data[position + 4 : position + 7])
        if position + 7 + length > len(data):  # a record still being written
            break
        parts += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # FULL, or the LAST piece of one
            records.append(wandb_internal_pb2.Record.FromString(parts))
            parts = b""
    return records


def _wandb_finished_records(path: Path, timeout: float = 60.0) -> list[Any]:
    """Return the run file's records once it holds the run's `exit` record: wandb-core writes the
    file from its own process and may still be writing it when `run.finish()` has returned."""
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout
    while True:
        try:
            records = _wandb_records(path)
        except DecodeError:  # a record still being written
            records = []
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.1)


def _wandb_key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def test_wandb_offline_run_holds_the_config_metrics_images_and_table(tmp_path):
    pytest.importorskip("wandb", reason=SESSION)
    accelerator = Accelerator(log_with="wandb", project_dir=str(tmp_path))
    accelerator.init_trackers(
        "accel-wandb", config=CONFIG, init_kwargs={"wandb": {"dir": str(tmp_path), "name": "run1"}}
    )
    _log_steps(accelerator)
    tracker = accelerator.get_tracker("wandb")
    tracker.log_images({"samples": [_image()]}, step=30)
    tracker.log_table("predictions", columns=["text", "label"], data=[["good", 1], ["bad", 0]], step=40)
    accelerator.end_training()

    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    records = _wandb_finished_records(run_file)
    assert any(r.WhichOneof("record_type") == "exit" for r in records), f"{run_file}: no exit record"
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert (run.project, run.display_name) == ("accel-wandb", "run1")
    config = {
        _wandb_key(item): json.loads(item.value_json)
        for r in records
        if r.WhichOneof("record_type") == "config"
        for item in r.config.update
    }
    assert {key: config[key] for key in CONFIG} == CONFIG
    history = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {_wandb_key(item): json.loads(item.value_json) for item in r.history.item}
            history[row["_step"]] = row
    assert sorted(history) == [*STEPS, 30, 40]
    for name in ("loss", "acc"):
        assert [(step, history[step][name]) for step in STEPS] == _expected(name)
    # Media are stored beside the run, the history row naming their files.
    files = run_file.parent / "files"
    assert history[30]["samples/_type"] == "images/separated" and history[30]["samples/count"] == 1
    (image_file,) = history[30]["samples/filenames"]
    assert (files / image_file).stat().st_size > 0
    assert history[40]["predictions/_type"] == "table-file"
    table = json.loads((files / history[40]["predictions/path"]).read_text())
    assert table["columns"] == ["text", "label"] and table["data"] == [["good", 1], ["bad", 0]]


# --- MLflow ------------------------------------------------------------------------------------


def test_mlflow_sqlite_store_holds_params_metrics_and_artifacts(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason=SESSION)
    from mlflow import MlflowClient
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    # More parameters than MLflow takes in one call, and one value longer than it takes at all.
    config = {**CONFIG, **{f"extra_{i}": i for i in range(MAX_PARAMS_TAGS_PER_BATCH + 20)}}
    config["too_long"] = "x" * (MAX_PARAM_VAL_LENGTH + 1)
    accelerator = Accelerator(log_with="mlflow", project_dir=str(tmp_path))
    with pytest.warns(UserWarning, match="'too_long' not logged"):
        accelerator.init_trackers(
            "accel-mlflow",
            config=config,
            init_kwargs={
                "mlflow": {"logging_dir": str(tmp_path / "artifacts"), "run_name": "run1", "tags": {"a": "b"}}
            },
        )
    _log_steps(accelerator)
    with pytest.warns(UserWarning, match="'note' not logged: it takes numbers only"):
        accelerator.log({"note": "text"}, step=30)
    (tmp_path / "notes.txt").write_text("hello\n")
    accelerator.get_tracker("mlflow").log_artifact(str(tmp_path / "notes.txt"), artifact_path="extra")
    run_id = accelerator.get_tracker("mlflow", unwrap=True).info.run_id
    accelerator.end_training()

    client = MlflowClient(uri)
    run = client.get_run(run_id)
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.name == "accel-mlflow"
    assert experiment.artifact_location.endswith(str(tmp_path / "artifacts"))
    assert (run.info.run_name, run.info.status, run.data.tags["a"]) == ("run1", "FINISHED", "b")
    expected_params = {key: str(value) for key, value in config.items() if key != "too_long"}
    assert run.data.params == expected_params
    for name in ("loss", "acc"):
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, name))
        assert history == _expected(name)
    assert "note" not in run.data.metrics
    assert [a.path for a in client.list_artifacts(run_id, "extra")] == ["extra/notes.txt"]


# --- Aim ---------------------------------------------------------------------------------------


def test_aim_repo_holds_hparams_metrics_and_images(tmp_path):
    aim = pytest.importorskip("aim", reason=SESSION)
    accelerator = Accelerator(log_with="aim", project_dir=str(tmp_path))
    accelerator.init_trackers(
        "accel-aim", config=CONFIG, init_kwargs={"aim": {"system_tracking_interval": None}}
    )
    _log_steps(accelerator)
    accelerator.get_tracker("aim").log_images({"sample": (_image(), "half white")}, step=30)
    accelerator.end_training()

    # Aim indexes runs in the background of its UI; its own command indexes them here.
    aim_command = str(Path(sys.executable).parent / "aim")
    subprocess.run(
        [aim_command, "storage", "--repo", str(tmp_path), "reindex", "--yes"], check=True, timeout=120
    )
    (run,) = list(aim.Repo(str(tmp_path)).iter_runs())
    assert run.name == "accel-aim" and run["hparams"] == CONFIG
    metrics = {metric.name: metric for metric in run.metrics()}
    assert set(metrics) == {"loss", "acc"}
    for name in ("loss", "acc"):
        steps, (values, *_) = metrics[name].data.numpy()
        assert list(zip(steps.tolist(), values.tolist(), strict=True)) == _expected(name)
    (images,) = list(aim.Repo(str(tmp_path)).query_images("images.name == 'sample'").iter())
    steps, objects = images.values.sparse_list()
    assert steps == [30] and objects[0].caption == "half white"


# --- Comet -------------------------------------------------------------------------------------


def test_comet_offline_archive_holds_parameters_and_metrics(tmp_path, monkeypatch):
    pytest.importorskip("comet_ml", reason=SESSION)
    monkeypatch.setenv("COMET_OFFLINE_DIRECTORY", str(tmp_path / "comet"))
    accelerator = Accelerator(log_with="comet_ml", project_dir=str(tmp_path))
    accelerator.init_trackers("accel-comet", config=CONFIG, init_kwargs={"comet_ml": {"online": False}})
    _log_steps(accelerator)
    accelerator.log({"note": "text"}, step=30)
    accelerator.end_training()

    (archive,) = (tmp_path / "comet").glob("*.zip")
    with zipfile.ZipFile(archive) as files:
        experiment = json.loads(files.read("experiment.json"))
        messages = [json.loads(line) for line in files.read("messages.json").decode().splitlines()]
    assert experiment["project_name"] == "accel-comet"
    params = {m["payload"]["param"]["paramName"]: m["payload"]["param"]["paramValue"]
              for m in messages if m["type"] == "parameter_msg"}  # fmt: skip
    assert {key: params[key] for key in CONFIG} == CONFIG
    metrics = [m["payload"]["metric"] for m in messages if m["type"] == "metric_msg"]
    for name in ("loss", "acc"):
        assert [(m["step"], m["metricValue"]) for m in metrics if m["metricName"] == name] == _expected(name)
    others = {m["payload"]["key"]: m["payload"]["value"] for m in messages if m["type"] == "log_other"}
    assert others["note"] == "text"


# --- ClearML -----------------------------------------------------------------------------------


def test_clearml_offline_session_holds_configuration_scalars_images_and_table(tmp_path, monkeypatch):
    clearml = pytest.importorskip("clearml", reason=SESSION)
    from clearml.utilities.pyhocon import ConfigFactory

    monkeypatch.setenv("CLEARML_CACHE_DIR", str(tmp_path / "clearml"))
    clearml.Task.set_offline(offline_mode=True)
    accelerator = Accelerator(log_with="clearml", project_dir=str(tmp_path))
    quiet = {
        "auto_connect_frameworks": False,
        "auto_connect_arg_parser": False,
        "auto_connect_streams": False,
        "auto_resource_monitoring": False,
    }
    accelerator.init_trackers("accel-clearml", config=CONFIG, init_kwargs={"clearml": quiet})
    for k, step in enumerate(STEPS):
        accelerator.log({"train_loss": _metrics(k)["loss"], "eval_acc": _metrics(k)["acc"]}, step=step)
    accelerator.log({"final_score": 0.75})  # no step: a single value
    tracker = accelerator.get_tracker("clearml")
    tracker.log_images({"eval_sample": _image()}, step=30)
    tracker.log_table("test_predictions", columns=["text", "label"], data=[["good", 1], ["bad", 0]], step=30)
    folder = Path(accelerator.get_tracker("clearml", unwrap=True).get_offline_mode_folder())
    accelerator.end_training()

    task = json.loads((folder / "task.json").read_text())
    assert (task["project_name"], task["name"]) == ("accel-clearml", "accel-clearml")
    configuration = ConfigFactory.parse_string(task["configuration"]["General"]["value"])
    assert dict(configuration) == CONFIG
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    events = [event for line in lines for event in json.loads(line)]
    scalars = [e for e in events if e["type"] == "training_stats_scalar"]
    # Accelerate's naming: train_loss -> scalar "loss" of series "train", eval_acc -> "acc" of "eval".
    assert [(e["iter"], e["value"]) for e in scalars if (e["metric"], e["variant"]) == ("loss", "train")] == (
        _expected("loss")
    )
    assert [(e["iter"], e["value"]) for e in scalars if (e["metric"], e["variant"]) == ("acc", "eval")] == (
        _expected("acc")
    )
    assert [e["value"] for e in scalars if e["variant"] == "final_score"] == [0.75]
    (image,) = [e for e in events if e["type"] == "training_debug_image"]
    assert (image["metric"], image["variant"], image["iter"]) == ("sample", "eval", 30)
    (table,) = [e for e in events if e["type"] == "plot"]
    assert (table["metric"], table["variant"], table["iter"]) == ("predictions", "test", 30)
    plot = json.loads(table["plot_str"])
    assert plot["data"][0]["cells"]["values"] == [["good", "bad"], [1, 0]]


# --- DVCLive -----------------------------------------------------------------------------------


def test_dvclive_folder_holds_params_and_metric_history(tmp_path):
    pytest.importorskip("dvclive", reason=SESSION)
    import csv

    from dvclive.serialize import load_yaml

    live_dir = tmp_path / "dvclive"
    accelerator = Accelerator(log_with="dvclive", project_dir=str(tmp_path))
    accelerator.init_trackers(
        "accel-dvclive", config=CONFIG, init_kwargs={"dvclive": {"dir": str(live_dir), "save_dvc_exp": False}}
    )
    _log_steps(accelerator)
    accelerator.end_training()

    assert load_yaml(live_dir / "params.yaml") == CONFIG
    last = {**_metrics(len(STEPS) - 1), "step": STEPS[-1]}
    assert json.loads((live_dir / "metrics.json").read_text()) == last
    for name in ("loss", "acc"):
        with open(live_dir / "plots" / "metrics" / f"{name}.tsv", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        assert [(int(row["step"]), float(row[name])) for row in rows] == _expected(name)


# --- SwanLab -----------------------------------------------------------------------------------


def test_swanlab_offline_run_holds_config_and_scalars(tmp_path):
    pytest.importorskip("swanlab", reason=SESSION)
    import yaml
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    accelerator = Accelerator(log_with="swanlab", project_dir=str(tmp_path))
    init_kwargs = {"swanlab": {"mode": "offline", "log_dir": str(tmp_path / "swanlab"), "name": "run1"}}
    accelerator.init_trackers("accel-swanlab", config=CONFIG, init_kwargs=init_kwargs)
    _log_steps(accelerator)
    accelerator.end_training()

    (run_file,) = (tmp_path / "swanlab").glob("run-*/run-*.swanlab")
    reader = DataStoreReader()
    reader.open(run_file)
    records = [Record.FromString(data) for data in reader]
    reader.close()
    (start,) = [r.start for r in records if r.WhichOneof("record_type") == "start"]
    assert (start.project, start.name) == ("accel-swanlab", "run1")
    scalars = [r.scalar for r in records if r.WhichOneof("record_type") == "scalar"]
    for name in ("loss", "acc"):
        assert [(s.step, s.value.number) for s in scalars if s.key == name] == _expected(name)
    config = yaml.safe_load((run_file.parent / "files" / "config.yaml").read_text())
    assert {key: config[key]["value"] for key in CONFIG} == CONFIG


# --- Trackio -----------------------------------------------------------------------------------


def test_trackio_local_store_holds_config_and_metrics(tmp_path):
    pytest.importorskip("trackio", reason=SESSION)
    from trackio.sqlite_storage import SQLiteStorage

    accelerator = Accelerator(log_with="trackio", project_dir=str(tmp_path))
    init_kwargs = {"trackio": {"name": "run1", "auto_log_cpu": False, "auto_log_gpu": False}}
    accelerator.init_trackers("accel-trackio", config=CONFIG, init_kwargs=init_kwargs)
    _log_steps(accelerator)
    accelerator.end_training()

    logs = SQLiteStorage.get_logs("accel-trackio", "run1")
    for name in ("loss", "acc"):
        assert [(row["step"], row[name]) for row in logs] == _expected(name)
    config = SQLiteStorage.get_run_config("accel-trackio", "run1")
    assert {key: config[key] for key in CONFIG} == CONFIG


def test_no_tracker_reached_the_network(offline):
    """The guard itself: a lookup of a public name is refused here (and so in every test above)."""
    import socket

    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("example.com", 443)
    assert offline == ["example.com"]
    assert os.environ["WANDB_MODE"] == "offline" and os.environ["CLEARML_OFFLINE_MODE"] == "1"
