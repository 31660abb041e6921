"""One benchmark worker: the same MLP training loop, hand-written DDP (`raw`) or through accel.

Started by overhead.py under torchrun (raw) or `accel launch` (accel); rank 0 prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

WIDTH, BATCH, LAYERS = 512, 64, 3


def make_model() -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS - 1):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(WIDTH, WIDTH))
    return torch.nn.Sequential(*layers)


def make_dataset(steps: int, world: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    rows = steps * BATCH * world
    return TensorDataset(
        torch.randn(rows, WIDTH, generator=generator), torch.randn(rows, WIDTH, generator=generator)
    )


def train(model, optimizer, loader, backward, warmup: int, barrier) -> tuple[int, float]:
    """Run every batch of `loader`; return (timed steps, seconds) excluding the first `warmup`."""
    steps, started = 0, None
    for i, (x, y) in enumerate(loader):
        if i == warmup:
            barrier()
            started = time.perf_counter()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        backward(loss)
        optimizer.step()
        if started is not None:
            steps += 1
    barrier()
    return steps, time.perf_counter() - started


def run_raw(steps: int, warmup: int) -> tuple[int, float, int]:
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    dataset = make_dataset(steps + warmup, world)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=DistributedSampler(dataset, shuffle=True, seed=0))
    timed, seconds = train(model, optimizer, loader, lambda loss: loss.backward(), warmup, dist.barrier)
    rank = dist.get_rank()
    dist.destroy_process_group()
    return timed, seconds, rank


def run_accel(steps: int, warmup: int) -> tuple[int, float, int]:
    from accel import Accelerator

    accelerator = Accelerator()
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(
        make_dataset(steps + warmup, accelerator.num_processes), batch_size=BATCH, shuffle=True
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    timed, seconds = train(
        model, optimizer, loader, accelerator.backward, warmup, accelerator.wait_for_everyone
    )
    return timed, seconds, accelerator.process_index


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["raw", "accel"])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = run_raw if args.mode == "raw" else run_accel
    timed, seconds, rank = run(args.steps, args.warmup)
    if rank == 0:
        print(
            json.dumps(
                {"mode": args.mode, "steps": timed, "seconds": seconds, "steps_per_s": timed / seconds}
            )
        )


if __name__ == "__main__":
    main()
