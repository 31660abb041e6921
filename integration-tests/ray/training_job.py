"""The training of the Ray tests: plain accel code that Ray Train's TorchTrainer runs unchanged.

`train` is an ordinary accel loop (an MLP, a shuffled DataLoader, AdamW); it neither imports nor
knows Ray. Under `accel launch` this file is the script:

    accel launch --cpu --num_processes 2 integration-tests/ray/training_job.py OUTPUT_DIR

Under Ray, `train_loop_per_worker` is the TorchTrainer's function: it runs `train` in the process
group Ray made and adds what Ray says about the worker. `train_with_ray_checkpoints` stops at a
given step, saves with `save_state` and reports the folder as Ray's checkpoint; a later run of the
same name resumes from it with `load_state`.

Each rank writes `<tag>_rank<r>.json` into the output folder: what its Accelerator saw and its
final weights.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED = 0
EPOCHS, SAMPLES, BATCH = 2, 64, 4  # 2 ranks: 8 batches per rank and epoch, 16 optimizer steps


class Progress:
    """The optimizer steps taken, saved with the checkpoint (`register_for_checkpointing`)."""

    def __init__(self) -> None:
        self.steps = 0

    def state_dict(self) -> dict[str, int]:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.steps = int(state["steps"])


def build() -> tuple[Any, ...]:
    """Return the Accelerator and the prepared model, optimizer and loader, each seeded alike."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from accel import Accelerator
    from accel.utils import set_seed

    accelerator = Accelerator()
    set_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(SAMPLES, 6, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(SAMPLES, 1, generator=generator)
    model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    return accelerator, *accelerator.prepare(model, optimizer, loader)


def run_steps(
    accelerator: Any,
    model: Any,
    optimizer: Any,
    loader: Any,
    progress: Progress,
    stop: int | None = None,
    at_stop: Callable[[float], None] | None = None,
) -> float:
    """Train from `progress.steps` until step `stop` (None: the end of the last epoch); return the last loss.

    `at_stop(loss)` runs at step `stop`, inside the loop: a pass the loop has left counts as a
    finished epoch, so a checkpoint saved after leaving it would resume at the next epoch.
    """
    import torch

    first_epoch, skip = divmod(progress.steps, len(loader))
    loss = torch.zeros(())
    for epoch in range(first_epoch, EPOCHS):
        loader.set_epoch(epoch)
        batches = accelerator.skip_first_batches(loader, skip) if epoch == first_epoch and skip else loader
        for x, y in batches:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            progress.steps += 1
            if progress.steps == stop:
                if at_stop is not None:
                    at_stop(float(loss.item()))
                return float(loss.item())
    return float(loss.item())


def facts(accelerator: Any, model: Any, loss: float) -> dict[str, Any]:
    """Return what this rank's Accelerator saw of the job, and its final weights."""
    weights = accelerator.unwrap_model(model).state_dict()
    return {
        "rank": accelerator.process_index,
        "world_size": accelerator.num_processes,
        "local_rank": accelerator.local_process_index,
        "device": str(accelerator.device),
        "distributed_type": str(accelerator.distributed_type),
        "loss": loss,
        "weights": {name: tensor.tolist() for name, tensor in weights.items()},
    }


def train() -> dict[str, Any]:
    """The whole run, as any accel script would write it; return this rank's facts."""
    accelerator, model, optimizer, loader = build()
    loss = run_steps(accelerator, model, optimizer, loader, Progress())
    return facts(accelerator, model, loss)


def write_facts(output: str, tag: str, found: dict[str, Any]) -> None:
    path = Path(output) / f"{tag}_rank{found['rank']}.json"
    path.write_text(json.dumps(found))


def ray_view(group_before: Any) -> dict[str, Any]:
    """Return what Ray says of this worker, and whether the group Ray made is still the group."""
    import ray.train
    import torch.distributed as dist

    context = ray.train.get_context()
    return {
        "ray_rank": context.get_world_rank(),
        "ray_world_size": context.get_world_size(),
        "ray_local_rank": context.get_local_rank(),
        "group_made_by_ray": group_before is not None,
        "same_group": dist.group.WORLD is group_before,
        "group_backend": dist.get_backend(),
        "master_addr": os.environ.get("MASTER_ADDR"),
    }


def _group_before_accel() -> Any:
    import torch.distributed as dist

    return dist.group.WORLD if dist.is_initialized() else None


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """TorchTrainer's function: `train` unchanged, then what Ray says of this worker."""
    group_before = _group_before_accel()
    found = train()
    write_facts(config["output"], config["tag"], {**found, **ray_view(group_before)})


def _shared_staging_folder(accelerator: Any) -> str:
    """Return one new folder all ranks name (save_state is collective: every rank passes the same
    folder); rank 0 makes it, the others learn its name from a broadcast."""
    from accel.utils import broadcast_object_list

    name = [tempfile.mkdtemp(prefix="accel-ray-") if accelerator.is_main_process else None]
    broadcast_object_list(name)
    return str(name[0])


def train_with_ray_checkpoints(config: dict[str, Any]) -> None:
    """TorchTrainer's function for a run that checkpoints: resume from Ray's latest checkpoint if
    the run has one (`load_state`); at step `config["stop"]` save with `save_state` and report the
    folder as Ray's checkpoint, then stop; at the end write the facts."""
    import ray.train

    group_before = _group_before_accel()
    accelerator, model, optimizer, loader = build()
    progress = Progress()
    accelerator.register_for_checkpointing(progress)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            accelerator.load_state(folder)
    resumed_at = progress.steps

    def save_and_report(loss: float) -> None:
        staging = _shared_staging_folder(accelerator)
        saved = accelerator.save_state(os.path.join(staging, "state"))
        # Every file of every rank is in the one folder: rank 0 reports it, Ray copies it to storage.
        reported = ray.train.Checkpoint.from_directory(saved) if accelerator.is_main_process else None
        ray.train.report({"steps": progress.steps, "loss": loss}, checkpoint=reported)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            shutil.rmtree(staging)

    stop = config.get("stop")
    loss = run_steps(accelerator, model, optimizer, loader, progress, stop, at_stop=save_and_report)
    if progress.steps == stop:
        return
    found = {**facts(accelerator, model, loss), **ray_view(group_before), "resumed_at": resumed_at}
    write_facts(config["output"], config["tag"], found)


if __name__ == "__main__":
    write_facts(sys.argv[1], "launch", train())
