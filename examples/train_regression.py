"""Linear regression on synthetic data: a plain PyTorch loop with the four accel lines.

    accel launch --cpu --num_processes 2 examples/train_regression.py
    accel launch --num_processes 8 examples/train_regression.py   # 8 GPUs, unchanged

The four lines: build an `Accelerator`, `prepare` the model, optimizer and loader (which places
them on `accelerator.device` and shards the batches), and call `accelerator.backward(loss)`;
`accelerator.reduce` averages the epoch loss over the processes. The data order depends on the
seed alone, so 1 process with batch 32, 2 processes with batch 16 each, and 2 processes with
--split_batches and batch 32 all end with the same weights. The last line printed is a JSON
object with the final loss and weights.
"""

from __future__ import annotations

import argparse
import json

import torch
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accel import Accelerator, set_seed


def make_dataset(size: int, seed: int) -> TensorDataset:
    """y = 2x + 3 + noise, drawn from its own generator so it is identical on every rank."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 1, generator=generator)
    y = 2 * x + 3 + 0.1 * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--batch_size", type=int, default=16, help="per process (global with --split_batches)"
    )
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dataset_size", type=int, default=640)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--split_batches", action="store_true")
    parser.add_argument("--mixed_precision", default=None)
    parser.add_argument("--save_weights", default=None, help="save the final state dict here")
    args = parser.parse_args()
    for name in ("epochs", "batch_size", "dataset_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(split_batches=args.split_batches, mixed_precision=args.mixed_precision)
    set_seed(args.seed)
    dataset = make_dataset(args.dataset_size, seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for epoch in range(args.epochs):
        model.train()
        total, count = torch.zeros((), device=accelerator.device), 0
        bar = tqdm(loader, desc=f"epoch {epoch}", leave=False, disable=not accelerator.is_local_main_process)
        for x, y in bar:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            total += loss.detach()
            count += 1
        mean_loss = accelerator.reduce(total / count, reduction="mean")
        accelerator.print(f"epoch {epoch}: loss {mean_loss.item():.6f}")

    weights = accelerator.unwrap_model(model)
    weight, bias = weights.weight.item(), weights.bias.item()
    accelerator.print(f"weight {weight:.4f}, bias {bias:.4f} (true: 2, 3)")
    if args.save_weights:
        accelerator.save(weights.state_dict(), args.save_weights)
    accelerator.print(
        json.dumps({"loss": round(mean_loss.item(), 6), "weight": round(weight, 4), "bias": round(bias, 4)})
    )


if __name__ == "__main__":
    main()
