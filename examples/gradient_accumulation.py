"""Gradient accumulation with `accelerator.accumulate(model)`: k small batches make one big one.

    accel launch --cpu --num_processes 2 examples/gradient_accumulation.py --gradient_accumulation_steps 4
    accel launch --num_processes 8 examples/gradient_accumulation.py   # 8 GPUs, unchanged

Each process runs micro-batches of --batch_size samples; inside `accelerator.accumulate(model)`,
`accelerator.backward` divides the loss by k and the gradients of k micro-batches add up locally
(no all-reduce until the k-th), `optimizer.step()` and `optimizer.zero_grad()` act only on that
k-th micro-batch. One optimizer step therefore sees batch_size x k x processes samples, and the
script checks that the result equals a plain PyTorch loop on that large batch: the same model,
trained here on one process without accel, on the same samples in the same order. In fp32 the
weights agree to rounding (about 1e-6); under --mixed_precision they differ by the precision's
rounding, since the reference stays in fp32.

The last line printed is a JSON object with the loss over the data set before training and
after it, for both runs, and the largest difference between their weights.
"""

from __future__ import annotations

import argparse
import copy
import json

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from accel import Accelerator, set_seed


def make_dataset(size: int, seed: int) -> TensorDataset:
    """A smooth nonlinear regression, already shuffled, identical on every process."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 8, generator=generator)
    w = torch.randn(8, 1, generator=generator)
    y = torch.sin(x @ w) + 0.1 * x[:, :1] ** 2 + 0.05 * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)


def make_model() -> nn.Module:
    """A small MLP."""
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


def train_reference(
    model: nn.Module, dataset: TensorDataset, big_batch: int, epochs: int, lr: float
) -> nn.Module:
    """The plain loop on one process with the large batch: the result accumulation must match."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    for _ in range(epochs):
        for x, y in DataLoader(dataset, batch_size=big_batch):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    return model


@torch.no_grad()
def dataset_loss(model: nn.Module, dataset: TensorDataset) -> float:
    """Mean squared error over the whole data set, computed on the CPU in fp32."""
    x, y = dataset.tensors
    return nn.functional.mse_loss(copy.deepcopy(model).float().cpu()(x), y).item()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradient_accumulation_steps", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=8, help="micro-batch, per process")
    parser.add_argument("--steps_per_epoch", type=int, default=50, help="optimizer steps per epoch")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], default=None)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    for name in ("gradient_accumulation_steps", "batch_size", "steps_per_epoch", "epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def main() -> None:
    args = parse_args()
    accelerator = Accelerator(
        gradient_accumulation_steps=args.gradient_accumulation_steps, mixed_precision=args.mixed_precision
    )
    set_seed(args.seed)
    # One optimizer step consumes this many samples, over all processes and micro-batches.
    big_batch = args.batch_size * args.gradient_accumulation_steps * accelerator.num_processes
    dataset = make_dataset(args.steps_per_epoch * big_batch, seed=args.seed)
    # Not shuffled by the loader: the data set is shuffled already, and the reference below must
    # see the same samples in each step (process p gets micro-batches p, p + N, p + 2N, ...).
    loader = DataLoader(dataset, batch_size=args.batch_size)
    model = make_model()
    reference = copy.deepcopy(model)
    initial_loss = dataset_loss(model, dataset)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    accelerator.print(
        f"micro-batch {args.batch_size} x {args.gradient_accumulation_steps} accumulation steps x "
        f"{accelerator.num_processes} process(es) = {big_batch} samples per optimizer step"
    )
    for epoch in range(1, args.epochs + 1):
        model.train()
        total_loss, batches = torch.zeros((), device=accelerator.device), 0
        bar = tqdm(loader, desc=f"epoch {epoch}", leave=False, disable=not accelerator.is_local_main_process)
        for x, y in bar:
            with accelerator.accumulate(model):
                loss = nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
            total_loss += loss.detach().float()
            batches += 1
        train_loss = accelerator.reduce(total_loss / batches, reduction="mean").item()
        accelerator.print(f"epoch {epoch}/{args.epochs}: train loss {train_loss:.5f}")

    trained = accelerator.unwrap_model(model)
    reference = train_reference(reference, dataset, big_batch, args.epochs, args.lr)
    difference = max(
        (a.detach().float().cpu() - b.detach()).abs().max().item()
        for a, b in zip(trained.parameters(), reference.parameters(), strict=True)
    )
    losses = {
        name: dataset_loss(net, dataset) for name, net in [("loss", trained), ("reference_loss", reference)]
    }
    accelerator.print(
        f"loss over the data set: {initial_loss:.5f} before training, {losses['loss']:.5f} accumulated, "
        f"{losses['reference_loss']:.5f} with one batch of {big_batch}; "
        f"largest weight difference {difference:.1e}"
    )
    metrics = {"initial_loss": round(initial_loss, 6), **{k: round(v, 6) for k, v in losses.items()}}
    metrics |= {"max_weight_difference": difference, "samples_per_step": big_batch}
    accelerator.print(json.dumps(metrics))
    accelerator.end_training()


if __name__ == "__main__":
    main()
