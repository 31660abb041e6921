"""`accel plot` on the logs accel's real trackers wrote in a job launched on 2 ranks."""

from __future__ import annotations

import importlib.util
import struct
import subprocess
import sys

import pytest

from accel_launch.runs.logs import Run, load_runs, read_tensorboard
from accel_launch.testing.ranks import run_on_ranks

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("matplotlib") is None or importlib.util.find_spec("tensorboard") is None,
        reason="needs matplotlib and tensorboard (accel-launch[test] and accel[test] install them)",
    ),
]


def train_and_log(project_dir, learning_rate):
    """Fit y = 2x + 3 for 20 steps, logging loss and the bias error to both file-writing trackers."""
    import torch

    from accel import Accelerator, set_seed

    accelerator = Accelerator(log_with=["jsonl", "tensorboard"], project_dir=project_dir)
    accelerator.init_trackers("train", config={"lr": learning_rate})
    set_seed(0)
    x = torch.randn(320, 1)
    data = torch.utils.data.TensorDataset(x, 2 * x + 3)
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for step, (inputs, targets) in enumerate(loader):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        accelerator.backward(loss)
        optimizer.step()
        bias_error = abs(accelerator.unwrap_model(model).bias.item() - 3)
        accelerator.log(
            {"loss": accelerator.reduce(loss.detach(), "mean"), "bias_error": bias_error}, step=step
        )
    accelerator.end_training()
    return step + 1


def test_plot_draws_both_trackers_logs_of_two_launched_runs_launch(tmp_path):
    steps = run_on_ranks(train_and_log, 2, str(tmp_path / "lr_0.1"), 0.1, timeout=180)
    assert steps == [20, 20]
    run_on_ranks(train_and_log, 2, str(tmp_path / "lr_0.01"), 0.01, timeout=180)

    # The JSON-lines file is read where both trackers wrote; TensorBoard's events hold the same values.
    fast, slow = load_runs([str(tmp_path / "lr_0.1"), str(tmp_path / "lr_0.01")])
    assert (fast.name, slow.name) == ("lr_0.1/train", "lr_0.01/train")
    assert fast.metrics["loss"].steps == [float(step) for step in range(20)]
    from_events = Run("events", fast.folder)
    read_tensorboard(fast.folder, from_events)
    assert sorted(from_events.metrics) == ["bias_error", "loss"]
    assert from_events.metrics["loss"].values == pytest.approx(fast.metrics["loss"].values, rel=1e-6)
    # A larger learning rate gets the bias right sooner.
    assert fast.metrics["bias_error"].values[-1] < slow.metrics["bias_error"].values[-1]

    output = tmp_path / "curves.png"
    command = ["plot", str(tmp_path / "lr_0.1"), str(tmp_path / "lr_0.01"), "-o", str(output)]
    result = subprocess.run(
        [sys.executable, "-m", "accel_launch.commands.cli", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "2 metric(s) of 2 run(s)" in result.stdout
    data = output.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1000, 360)

    from matplotlib.image import imread

    assert imread(str(output))[..., :3].std() > 0.05
