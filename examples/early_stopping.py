"""Stop every process at the same epoch once validation loss stops improving on any of them:
`accelerator.set_trigger()` on the rank that sees it, `accelerator.check_trigger()` on all.

    accel launch --num_processes 2 examples/early_stopping.py

A wide MLP learns a small training set with noisy labels, so it soon starts to overfit. Each
process measures the loss on its own shard of the validation set; a process whose loss has not
improved by `--min_delta` for `--patience` epochs raises the trigger. `check_trigger()` is a
collective: it returns True on every process as soon as any process raised it, so all leave the
loop together (one rank leaving alone would leave the others waiting in the next all-reduce).
The final JSON line says at which epoch each rank stopped and which ranks raised the trigger.
"""

from __future__ import annotations

import argparse
import json

import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accel import Accelerator, set_seed


def make_datasets(
    train_size: int, eval_size: int, noise: float, seed: int
) -> tuple[TensorDataset, TensorDataset]:
    """Return (train, eval) sets of a linear two-class problem in 32 dimensions, a fraction
    `noise` of the training labels flipped; identical on every rank (their own generator)."""
    generator = torch.Generator().manual_seed(seed)
    direction = torch.randn(32, generator=generator)
    points = torch.randn(train_size + eval_size, 32, generator=generator)
    labels = (points @ direction > 0).long()
    flipped = torch.rand(train_size, generator=generator) < noise
    labels[:train_size] = torch.where(flipped, 1 - labels[:train_size], labels[:train_size])
    train = TensorDataset(points[:train_size], labels[:train_size])
    return train, TensorDataset(points[train_size:], labels[train_size:])


class EarlyStopping:
    """Says when a loss has not improved by `min_delta` for `patience` checks in a row."""

    def __init__(self, patience: int, min_delta: float) -> None:
        self.patience = patience
        self.min_delta = min_delta
        self.best = float("inf")
        self.best_epoch = -1
        self.bad_epochs = 0

    def should_stop(self, loss: float, epoch: int) -> bool:
        if loss < self.best - self.min_delta:
            self.best, self.best_epoch, self.bad_epochs = loss, epoch, 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs >= self.patience


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch_size", type=int, default=16, help="per process")
    parser.add_argument("--max_epochs", type=int, default=100)
    parser.add_argument("--patience", type=int, default=3, help="epochs without improvement")
    parser.add_argument("--min_delta", type=float, default=0.0, help="the least change that improves")
    parser.add_argument("--train_size", type=int, default=128)
    parser.add_argument("--eval_size", type=int, default=512)
    parser.add_argument("--label_noise", type=float, default=0.3, help="fraction of flipped labels")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--mixed_precision", default=None)
    args = parser.parse_args()
    for name in ("batch_size", "max_epochs", "patience", "train_size", "eval_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not 0.0 <= args.label_noise < 0.5:
        parser.error(f"--label_noise must be in [0, 0.5), got {args.label_noise}")
    return args


def shard_loss(model: torch.nn.Module, loader: DataLoader) -> float:
    """Return the mean loss over this process's shard of the validation set (no communication)."""
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for points, labels in loader:
            total += torch.nn.functional.cross_entropy(model(points), labels, reduction="sum").item()
            count += len(labels)
    model.train()
    return total / max(count, 1)


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    set_seed(args.seed)
    train_set, eval_set = make_datasets(args.train_size, args.eval_size, args.label_noise, args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 2),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )

    stopper = EarlyStopping(args.patience, args.min_delta)
    raised = False
    epoch = 0
    bar = tqdm(range(args.max_epochs), disable=not accelerator.is_local_main_process)
    for epoch in bar:
        for points, labels in train_loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(points), labels)
            accelerator.backward(loss)
            optimizer.step()
        eval_loss = shard_loss(model, eval_loader)
        bar.set_postfix(eval_loss=f"{eval_loss:.4f}")
        if stopper.should_stop(eval_loss, epoch):
            accelerator.set_trigger()  # this rank only; the next check tells every rank
            raised = True
        if accelerator.check_trigger():
            break
    bar.close()

    # Every rank's view, gathered: the stop epoch must be the same everywhere.
    device = accelerator.device
    mine = torch.tensor([[epoch, stopper.best_epoch, int(raised)]], device=device)
    stops, bests, raisers = accelerator.gather(mine).cpu().T.tolist()
    best_losses = accelerator.gather(torch.tensor([stopper.best], device=device)).cpu().tolist()
    accelerator.print(
        json.dumps(
            {
                "stopped_epoch": stops,  # per rank
                "best_epoch": bests,  # per rank
                "best_eval_loss": best_losses,  # per rank, on its own shard
                "raised_by": [rank for rank, flag in enumerate(raisers) if flag],
                "max_epochs": args.max_epochs,
            }
        )
    )


if __name__ == "__main__":
    main()
