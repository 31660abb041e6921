"""MLflow on 2 real ranks through `accel launch`: only the main process creates the run and writes."""

from __future__ import annotations

import pytest

from accel_launch.testing.ranks import run_on_ranks

pytestmark = pytest.mark.slow


def log_from_every_rank(project_dir: str) -> dict:
    from accel import Accelerator

    accelerator = Accelerator(log_with="mlflow", project_dir=project_dir)
    accelerator.init_trackers("accel-ranks", config={"lr": 0.1, "world": accelerator.num_processes})
    for step in range(3):
        accelerator.log({"rank": accelerator.process_index, "loss": 1.0 / (step + 1)}, step=step)
    names = [tracker.name for tracker in accelerator.trackers]
    # On rank 1 get_tracker returns a blank tracker (Accelerate's), unwrapped or not.
    run = accelerator.get_tracker("mlflow", unwrap=True)
    run_id = run.info.run_id if accelerator.is_main_process else type(run).__name__
    accelerator.end_training()
    return {"trackers": names, "run_id": run_id}


def test_only_rank_0_writes_to_mlflow_launch(tmp_path):
    pytest.importorskip("mlflow", reason="the tracking libraries run in the nox session trackers")
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {"MLFLOW_TRACKING_URI": uri}
    first, second = run_on_ranks(log_from_every_rank, 2, str(tmp_path), env=env, timeout=240)
    assert first["trackers"] == ["mlflow"] and second == {"trackers": [], "run_id": "GeneralTracker"}
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("accel-ranks")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == first["run_id"] and run.data.params == {"lr": "0.1", "world": "2"}
    ranks = client.get_metric_history(run.info.run_id, "rank")
    assert [(m.step, m.value) for m in ranks] == [(0, 0), (1, 0), (2, 0)]  # rank 0's values only
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [0, 1, 2]
