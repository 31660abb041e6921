"""Image classification with a small CNN on generated pictures of shapes and stripes.

    accel launch --cpu --num_processes 2 examples/cv_classification.py
    accel launch --num_processes 8 --mixed_precision bf16 examples/cv_classification.py   # 8 GPUs

Each grey-scale image holds one of four things drawn at a random place, size, contrast and
stripe period, under Gaussian noise: a disc, a cross, horizontal stripes or vertical stripes.
The images are drawn from a seeded generator, so every process builds the same data set.

The accel part is four lines over a plain PyTorch loop: build an `Accelerator`, `prepare` the
model, optimizer and loaders, call `accelerator.backward(loss)`, and count correct predictions
over every process with `gather_for_metrics`. The last line printed is a JSON object with the
final metrics.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accel import Accelerator, set_seed

CLASSES = ["disc", "cross", "horizontal stripes", "vertical stripes"]


def make_images(count: int, size: int, seed: int, noise: float = 0.4) -> TensorDataset:
    """`count` labelled images of shape (1, size, size), identical on every process."""
    generator = torch.Generator().manual_seed(seed)

    def uniform(low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(count, 1, 1, generator=generator)

    labels = torch.randint(len(CLASSES), (count,), generator=generator)
    y, x = torch.meshgrid(
        torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij"
    )
    centre_x, centre_y = uniform(0.3 * size, 0.7 * size), uniform(0.3 * size, 0.7 * size)
    radius = uniform(0.2 * size, 0.35 * size)
    period, phase = uniform(3.0, 6.0), uniform(0.0, 2 * math.pi)
    shapes = torch.stack(
        [
            ((x - centre_x) ** 2 + (y - centre_y) ** 2 <= radius**2).float(),
            cross(x - centre_x, y - centre_y, radius),
            (torch.sin(2 * math.pi * y / period + phase) > 0).float(),
            (torch.sin(2 * math.pi * x / period + phase) > 0).float(),
        ]
    )
    images = shapes[labels, torch.arange(count)] * uniform(0.5, 1.5)
    images = images + noise * torch.randn(count, size, size, generator=generator)
    return TensorDataset(images.unsqueeze(1), labels)


def cross(dx: torch.Tensor, dy: torch.Tensor, radius: torch.Tensor) -> torch.Tensor:
    """A plus sign of arm length `radius` centred where dx = dy = 0."""
    arm = torch.minimum(dx.abs(), dy.abs()) <= 0.3 * radius
    return (arm & (torch.maximum(dx.abs(), dy.abs()) <= radius)).float()


class SmallCNN(nn.Sequential):
    """Two convolution blocks, global average pooling and a linear classifier."""

    def __init__(self, num_classes: int, width: int = 16) -> None:
        super().__init__(
            nn.Conv2d(1, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(2 * width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(2 * width, num_classes),
        )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max_steps", type=int, default=None, help="stop after this many optimizer steps")
    parser.add_argument("--batch_size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--train_size", type=int, default=4000)
    parser.add_argument("--eval_size", type=int, default=800)
    parser.add_argument("--image_size", type=int, default=20)
    parser.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], default=None)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    for name in ("epochs", "batch_size", "train_size", "eval_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.image_size < 8:
        parser.error(f"--image_size must be at least 8, got {args.image_size}")
    if args.max_steps is not None and args.max_steps < 1:
        parser.error(f"--max_steps must be at least 1, got {args.max_steps}")
    return args


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, accelerator: Accelerator) -> float:
    """Accuracy over the whole evaluation set, whatever the number of processes."""
    model.eval()
    correct, total = 0, 0
    for images, labels in loader:
        predictions = model(images).argmax(dim=-1)
        # Every process's predictions, less the samples repeated to pad the last batch.
        predictions, labels = accelerator.gather_for_metrics((predictions, labels))
        correct += (predictions == labels).sum().item()
        total += labels.numel()
    return correct / total


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    set_seed(args.seed)

    train_set = make_images(args.train_size, args.image_size, seed=args.seed)
    eval_set = make_images(args.eval_size, args.image_size, seed=args.seed + 1)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    eval_loader = DataLoader(eval_set, batch_size=2 * args.batch_size)
    model = SmallCNN(len(CLASSES))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, train_loader, eval_loader = accelerator.prepare(
        model, optimizer, train_loader, eval_loader
    )

    accelerator.print(
        f"{len(train_set)} training and {len(eval_set)} evaluation images ({args.image_size} px square), "
        f"{len(CLASSES)} classes (chance: {1 / len(CLASSES):.2f}), {accelerator.num_processes} process(es)"
    )
    step, metrics = 0, {}
    for epoch in range(1, args.epochs + 1):
        started = time.perf_counter()
        model.train()
        total_loss, batches = torch.zeros((), device=accelerator.device), 0
        bar = tqdm(
            train_loader, desc=f"epoch {epoch}", leave=False, disable=not accelerator.is_local_main_process
        )
        for images, labels in bar:
            loss = nn.functional.cross_entropy(model(images), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total_loss += loss.detach().float()
            batches += 1
            step += 1
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if step == args.max_steps:
                break
        train_loss = accelerator.reduce(total_loss / max(batches, 1), reduction="mean").item()
        accuracy = evaluate(model, eval_loader, accelerator)
        metrics = {
            "epoch": epoch,
            "step": step,
            "train_loss": round(train_loss, 4),
            "accuracy": round(accuracy, 4),
        }
        accelerator.print(
            f"epoch {epoch}/{args.epochs}: train loss {train_loss:.4f}, eval accuracy {accuracy:.3f} "
            f"({time.perf_counter() - started:.1f} s)"
        )
        if step == args.max_steps:
            break

    accelerator.print(json.dumps(metrics))
    accelerator.end_training()


if __name__ == "__main__":
    main()
