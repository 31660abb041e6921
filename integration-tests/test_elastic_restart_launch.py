"""`accel launch --max_restarts 1`: a rank killed mid-epoch, the group restarts, the script resumes
from its newest checkpoint and ends with the weights of a run that was never interrupted."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch

from accel_launch.testing.ranks import launch_script

pytestmark = pytest.mark.slow

TOLERANCE = 0.0  # bit-exact: the resumed run is the run that never stopped

SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accel import Accelerator, ProjectConfiguration, set_seed

    project, out, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    config = ProjectConfiguration(project_dir=project, automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(project_config=config)
    set_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    y = x.sum(1, keepdim=True)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.9)
    loader = DataLoader(TensorDataset(x, y), batch_size=4, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)


    class Progress:
        epoch, step = 0, 0

        def state_dict(self):
            return {"epoch": self.epoch, "step": self.step}

        def load_state_dict(self, state):
            self.epoch, self.step = state["epoch"], state["step"]


    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    checkpoints = Path(project, "checkpoints")
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        accelerator.load_state()
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    resuming = progress.step > 0
    for epoch in range(progress.epoch, 3):
        loader.set_epoch(epoch)
        batches = accelerator.skip_first_batches(loader, progress.step) if resuming else loader
        resuming = False
        for xb, yb in batches:
            optimizer.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(xb), yb))
            optimizer.step()
            scheduler.step()
            progress.step += 1
            if progress.step % 4 == 0:
                accelerator.save_state()
            if attempt == 0 and accelerator.process_index == 1 and epoch * 8 + progress.step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        progress.epoch, progress.step = epoch + 1, 0
    if accelerator.is_main_process:
        state = accelerator.unwrap_model(model).state_dict()
        Path(out).write_text(json.dumps({"attempt": attempt, **{k: v.tolist() for k, v in state.items()}}))
    """
)


def test_killed_rank_restarts_and_resumes_exactly_launch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    runs = {}
    for name, kill_at in (("uninterrupted", -1), ("killed", 14)):
        out = tmp_path / f"{name}.json"
        result = launch_script(
            script, 2, [tmp_path / name, out, kill_at], launch_args=["--max_restarts", "1"], timeout=180
        )
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = json.loads(out.read_text())
    assert runs["uninterrupted"].pop("attempt") == 0
    assert runs["killed"].pop("attempt") == 1, "the worker group should have been restarted once"
    for key, expected in runs["uninterrupted"].items():
        diff = (torch.tensor(runs["killed"][key]) - torch.tensor(expected)).abs().max().item()
        assert diff <= TOLERANCE, (key, diff)
