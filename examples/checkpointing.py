"""Checkpoint every N steps and resume bit-exactly: a small MLP classifier with dropout, AdamW and
a learning-rate schedule, saved with `save_state` under automatically named folders.

    accel launch --num_processes 2 examples/checkpointing.py --output_dir runs/ckpt
    accel launch --num_processes 2 examples/checkpointing.py --output_dir runs/ckpt \
        --resume_from_checkpoint latest

Checkpoints go to `OUTPUT_DIR/checkpoints/checkpoint_<n>` (`ProjectConfiguration(
automatic_checkpoint_naming=True, total_limit=...)` keeps the newest `--total_limit`). Each holds
the model, AdamW's state, the scheduler, every rank's random states (dropout), the loader's epoch
and a `TrainingProgress` registered with `register_for_checkpointing`, which says how many
optimizer steps were done. `--resume_from_checkpoint latest` (or a checkpoint folder) loads it,
skips the batches of the current epoch already trained on (`skip_first_batches`), and ends with
exactly the weights of an uninterrupted run: the final JSON line holds their sha256.
`--stop_after_steps K` ends the run after K steps, as a crash would (no save at the stop).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accel import Accelerator, ProjectConfiguration, set_seed


class TrainingProgress:
    """The optimizer steps done so far, saved and restored with every checkpoint."""

    def __init__(self) -> None:
        self.completed_steps = 0

    def state_dict(self) -> dict[str, int]:
        return {"completed_steps": self.completed_steps}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.completed_steps = int(state["completed_steps"])


def make_datasets(size: int, features: int, classes: int, seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Return (train, eval) points around `classes` random centres, identical on every rank (drawn
    from their own generator); the evaluation set has a quarter of `size` points."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, features, generator=generator)
    total = size + size // 4
    labels = torch.randint(0, classes, (total,), generator=generator)
    points = centres[labels] + torch.randn(total, features, generator=generator)
    return TensorDataset(points[:size], labels[:size]), TensorDataset(points[size:], labels[size:])


def make_model(features: int, classes: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(features, 64),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.2),  # random: resuming exactly needs each rank's generator back
        torch.nn.Linear(64, classes),
    )


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """Return the sha256 of every weight's bytes, in key order: equal only for identical weights."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        digest.update(name.encode())
        digest.update(state_dict[name].detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default="runs/checkpointing", help="checkpoints go under it")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dataset_size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--checkpointing_steps", type=int, default=10, help="save every N optimizer steps")
    parser.add_argument("--total_limit", type=int, default=2, help="checkpoints kept")
    parser.add_argument(
        "--resume_from_checkpoint", default=None, help='"latest" or a checkpoint folder to resume from'
    )
    parser.add_argument("--stop_after_steps", type=int, default=None, help="end after K steps (no save)")
    parser.add_argument("--mixed_precision", default=None)
    args = parser.parse_args()
    for name in ("batch_size", "epochs", "dataset_size", "checkpointing_steps", "total_limit"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.stop_after_steps is not None and args.stop_after_steps < 1:
        parser.error(f"--stop_after_steps must be at least 1, got {args.stop_after_steps}")
    return args


def evaluate(accelerator: Accelerator, model: torch.nn.Module, loader: DataLoader) -> dict[str, float]:
    """Return the loss and accuracy over the whole evaluation set (each sample counted once)."""
    model.eval()
    losses, correct = [], []
    with torch.no_grad():
        for points, labels in loader:
            logits = model(points)
            loss = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
            loss, hits = accelerator.gather_for_metrics((loss, logits.argmax(-1) == labels))
            losses.append(loss)
            correct.append(hits)
    model.train()
    return {
        "eval_loss": torch.cat(losses).mean().item(),
        "accuracy": torch.cat(correct).float().mean().item(),
    }


def main() -> None:
    args = parse_args()
    project = ProjectConfiguration(
        project_dir=args.output_dir, automatic_checkpoint_naming=True, total_limit=args.total_limit
    )
    accelerator = Accelerator(project_config=project, mixed_precision=args.mixed_precision)
    set_seed(args.seed)
    features, classes = 16, 4
    train_set, eval_set = make_datasets(args.dataset_size, features, classes, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size)
    model = make_model(features, classes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # Written for one process: the prepared scheduler advances once per process at each step.
    scheduler = torch.optim.lr_scheduler.LinearLR(
        optimizer, 1.0, 0.1, total_iters=args.epochs * len(train_loader)
    )
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )
    steps_per_epoch = len(train_loader)  # the prepared loader's: batches per process
    total_steps = args.epochs * steps_per_epoch
    progress = TrainingProgress()
    accelerator.register_for_checkpointing(progress)

    if args.resume_from_checkpoint:
        folder = None if args.resume_from_checkpoint == "latest" else args.resume_from_checkpoint
        loaded = accelerator.load_state(folder)
        accelerator.print(f"resumed from {loaded} after {progress.completed_steps} steps")
    start_epoch, skip = divmod(progress.completed_steps, steps_per_epoch)
    resumed_at = progress.completed_steps

    bar = tqdm(total=total_steps, initial=resumed_at, disable=not accelerator.is_local_main_process)
    last_loss = torch.zeros((), device=accelerator.device)
    stopped = False
    for epoch in range(start_epoch, args.epochs):
        train_loader.set_epoch(epoch)
        batches = accelerator.skip_first_batches(train_loader, skip) if epoch == start_epoch else train_loader
        for points, labels in batches:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(points), labels)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            last_loss = loss.detach()
            progress.completed_steps += 1
            bar.update(1)
            if progress.completed_steps % args.checkpointing_steps == 0:
                accelerator.save_state()
            if args.stop_after_steps is not None and progress.completed_steps >= args.stop_after_steps:
                stopped = True
                break
        if stopped:
            break
    bar.close()

    # json writes floats with every digit: equal numbers here mean bit-equal losses.
    metrics: dict[str, Any] = {
        "completed_steps": progress.completed_steps,
        "resumed_at": resumed_at,
        "stopped": stopped,
        "last_loss": accelerator.reduce(last_loss, reduction="mean").item(),
        **evaluate(accelerator, model, eval_loader),
        "weights_sha256": weights_digest(accelerator.get_state_dict(model)),
    }
    accelerator.print(json.dumps(metrics))


if __name__ == "__main__":
    main()
