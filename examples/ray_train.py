"""An accel training function run by Ray Train: TorchTrainer starts the workers and their process group,
and `Accelerator()` adopts it (rank, world size and device as Ray set them).

    python examples/ray_train.py                          # a local Ray cluster, 2 CPU workers
    python examples/ray_train.py --address auto --gpu     # a running cluster, one GPU per worker

The training function is plain accel: an MLP fits y = sum(x) on synthetic data, with a shuffled
DataLoader and AdamW. After each epoch every worker calls `save_state` into one folder, and rank 0
reports that folder to Ray as a checkpoint (`Checkpoint.from_directory`); Ray copies it into
`--storage`. Run it again with the same `--storage` and `--name` (and more `--epochs`) and the
function resumes from Ray's latest checkpoint with `load_state`. The install line and what accel
takes from Ray are in docs/ray.md. The last line printed is a JSON object with the final loss.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from typing import Any

import ray
import ray.train
import torch
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from torch.utils.data import DataLoader, TensorDataset

from accel import Accelerator
from accel.utils import broadcast_object_list, set_seed


def make_dataset(size: int, seed: int) -> TensorDataset:
    """y = sum(x) + noise, drawn from its own generator so that every worker holds the same data."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)


def shared_folder(accelerator: Accelerator) -> str:
    """Return a new folder that every worker names: `save_state` is collective and every rank must
    pass the same folder. On one machine rank 0's temporary folder does; across machines use a
    folder of a shared filesystem instead."""
    name = [tempfile.mkdtemp(prefix="accel-ray-") if accelerator.is_main_process else None]
    broadcast_object_list(name)
    return str(name[0])


def train_function(config: dict[str, Any]) -> None:
    """What each Ray worker runs: an ordinary accel loop, plus Ray's checkpoint and metrics calls."""
    accelerator = Accelerator()
    set_seed(config["seed"])
    loader = DataLoader(
        make_dataset(config["dataset_size"], config["seed"]), batch_size=config["batch_size"], shuffle=True
    )
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"])
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    first_epoch = 0
    checkpoint = ray.train.get_checkpoint()  # the run's latest, when this run name has one
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            accelerator.load_state(folder)
        first_epoch = loader.epoch  # load_state gives the loader its saved epoch back
        accelerator.print(f"resumed from Ray's checkpoint at epoch {first_epoch}")

    for epoch in range(first_epoch, config["epochs"]):
        loader.set_epoch(epoch)
        total, count = torch.zeros((), device=accelerator.device), 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            total += loss.detach()
            count += 1
        mean_loss = accelerator.reduce(total / count, reduction="mean").item()
        accelerator.print(f"epoch {epoch}: loss {mean_loss:.6f}")

        staging = shared_folder(accelerator)
        saved = accelerator.save_state(os.path.join(staging, "state"))
        # One folder holds every rank's files: rank 0 reports it and Ray copies it into its storage.
        reported = Checkpoint.from_directory(saved) if accelerator.is_main_process else None
        ray.train.report({"epoch": epoch, "loss": mean_loss}, checkpoint=reported)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            shutil.rmtree(staging)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--gpu", action="store_true", help="one GPU per worker (nccl)")
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: start a local one)")
    parser.add_argument("--storage", default=None, help="Ray's storage path (default: a temporary folder)")
    parser.add_argument("--name", default="accel-ray-train", help="the run's name: the same name resumes")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=16, help="per worker")
    parser.add_argument("--dataset_size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    for name in ("num_workers", "epochs", "batch_size", "dataset_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def main() -> None:
    args = parse_args()
    storage = args.storage or tempfile.mkdtemp(prefix="accel-ray-storage-")
    if args.address is None:
        ray.init(address="local", num_cpus=args.num_workers, include_dashboard=False)
    else:
        ray.init(address=args.address)
    try:
        trainer = TorchTrainer(
            train_loop_per_worker=train_function,
            train_loop_config={
                key: getattr(args, key) for key in ("epochs", "batch_size", "dataset_size", "lr", "seed")
            },
            scaling_config=ScalingConfig(num_workers=args.num_workers, use_gpu=args.gpu),
            run_config=RunConfig(storage_path=os.path.abspath(storage), name=args.name),
        )
        result = trainer.fit()
    finally:
        ray.shutdown()
    metrics = result.metrics or {}
    checkpoint = result.checkpoint.path if result.checkpoint is not None else None
    print(f"final loss {metrics.get('loss')} after epoch {metrics.get('epoch')}; checkpoint: {checkpoint}")
    print(json.dumps({"loss": metrics.get("loss"), "epoch": metrics.get("epoch"), "checkpoint": checkpoint}))


if __name__ == "__main__":
    main()
