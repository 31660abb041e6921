"""A training block job: the same models, data and loop written by hand for DDP (`raw`), through accel,
or through Hugging Face Accelerate; one block is one epoch of a model's loader.

    <launcher> train_loop.py --contender raw|accel|accelerate --precision no|bf16 --accumulation N
        --models mlp,transformer [--batches N] [--quick] --connect HOST:PORT --job NAME

A block is a whole epoch so that no prepared loader is left half-walked while another model's runs
(a loader's end is what Accelerate and accel read to sync an accumulation step).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from benchmarks.workers.job_exit import end_job
from benchmarks.workers.serve import Task, add_arguments, serve

MLP_WIDTH, MLP_LAYERS = 512, 3
ENCODER_WIDTH, ENCODER_LAYERS, ENCODER_HEADS, SEQUENCE = 256, 4, 4, 128
# Per-process batch of each model (the encoder's is 1 in quick runs).
BATCH = {"mlp": 64, "transformer": 4}
# Batches per process in one epoch of each model: one block of work.
BATCHES = {"mlp": 64, "transformer": 8}


def make_model(name: str) -> torch.nn.Module:
    if name == "mlp":
        layers: list[torch.nn.Module] = []
        for _ in range(MLP_LAYERS - 1):
            layers += [torch.nn.Linear(MLP_WIDTH, MLP_WIDTH), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(MLP_WIDTH, MLP_WIDTH))
        return torch.nn.Sequential(*layers)
    layer = torch.nn.TransformerEncoderLayer(
        ENCODER_WIDTH, ENCODER_HEADS, dim_feedforward=4 * ENCODER_WIDTH, batch_first=True
    )
    return torch.nn.TransformerEncoder(layer, ENCODER_LAYERS, enable_nested_tensor=False)


def make_optimizer(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    if name == "mlp":
        return torch.optim.SGD(model.parameters(), lr=1e-3)
    return torch.optim.AdamW(model.parameters(), lr=1e-4)


def make_dataset(name: str, batch: int, batches: int, world: int) -> TensorDataset:
    """Return `batches` batches per process of random inputs and targets of the model's shape."""
    generator = torch.Generator().manual_seed(0)
    shape = (MLP_WIDTH,) if name == "mlp" else (SEQUENCE, ENCODER_WIDTH)
    rows = batch * batches * world
    return TensorDataset(
        torch.randn(rows, *shape, generator=generator), torch.randn(rows, *shape, generator=generator)
    )


def loss_of(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(output.float(), target)


class Epochs:
    """Counts the epochs of one model's loader, so that each block shuffles anew."""

    def __init__(self, set_epoch: Callable[[int], None]) -> None:
        self.set_epoch, self.epoch = set_epoch, 0

    def next(self) -> None:
        self.set_epoch(self.epoch)
        self.epoch += 1


def raw_tasks(args: argparse.Namespace) -> tuple[dict[str, Task], Callable[[], None], int]:
    """The loop by hand: DDP, DistributedSampler, autocast for bf16, no_sync between accumulated steps."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    tasks = {}
    for name in args.models:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(make_model(name))
        optimizer = make_optimizer(name, model)
        batch = BATCH[name] if not args.quick else 1 if name == "transformer" else BATCH[name]
        dataset = make_dataset(name, batch, args.batches[name], world)
        sampler: DistributedSampler[Any] = DistributedSampler(dataset, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
        tasks[name] = Task(
            _raw_epoch(args, model, optimizer, loader, Epochs(sampler.set_epoch), batch * world)
        )
    return tasks, dist.barrier, dist.get_rank()


def _raw_epoch(args: argparse.Namespace, model: Any, optimizer: Any, loader: DataLoader, epochs: Epochs,
               samples_per_step: int) -> Callable[[], float]:  # fmt: skip
    every = args.accumulation

    def run() -> float:
        epochs.next()
        steps = 0
        for steps, (x, y) in enumerate(loader, start=1):
            syncs = steps % every == 0
            with nullcontext() if syncs else model.no_sync():
                with (
                    torch.autocast("cpu", dtype=torch.bfloat16) if args.precision == "bf16" else nullcontext()
                ):
                    output = model(x)
                loss = loss_of(output, y)
                (loss / every if every > 1 else loss).backward()
            if syncs:
                optimizer.step()
                optimizer.zero_grad()
        return steps * samples_per_step

    return run


def library_tasks(args: argparse.Namespace) -> tuple[dict[str, Task], Callable[[], None], int]:
    """The loop as Accelerate documents it, through accel or Accelerate (the same code, other import)."""
    if args.contender == "accel":
        from accel import Accelerator
    else:
        from accelerate import Accelerator  # type: ignore[no-redef]
    accelerator = Accelerator(mixed_precision=args.precision, gradient_accumulation_steps=args.accumulation)
    tasks = {}
    for name in args.models:
        torch.manual_seed(0)
        model = make_model(name)
        optimizer = make_optimizer(name, model)
        batch = BATCH[name] if not args.quick else 1 if name == "transformer" else BATCH[name]
        dataset = make_dataset(name, batch, args.batches[name], accelerator.num_processes)
        loader = DataLoader(dataset, batch_size=batch, shuffle=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        samples = batch * accelerator.num_processes
        tasks[name] = Task(
            _library_epoch(args, accelerator, model, optimizer, loader, Epochs(loader.set_epoch), samples)
        )
    return tasks, accelerator.wait_for_everyone, accelerator.process_index


def _library_epoch(args: argparse.Namespace, accelerator: Any, model: Any, optimizer: Any, loader: Any,
                   epochs: Epochs, samples_per_step: int) -> Callable[[], float]:  # fmt: skip
    accumulate = args.accumulation > 1

    def run() -> float:
        epochs.next()
        steps = 0
        for x, y in loader:
            steps += 1
            with accelerator.accumulate(model) if accumulate else nullcontext():
                loss = loss_of(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        return steps * samples_per_step

    return run


def batch_counts(text: str) -> dict[str, int]:
    """Parse "mlp=64,transformer=8"."""
    counts = {}
    for item in text.split(","):
        name, _, count = item.partition("=")
        if name not in BATCH or not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not <model>=<batches> with a model of {sorted(BATCH)}"
            )
        counts[name] = int(count)
    return {**BATCHES, **counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contender", choices=["raw", "accel", "accelerate"], required=True)
    parser.add_argument("--precision", choices=["no", "bf16"], default="no")
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--models", type=lambda text: text.split(","), default=["mlp", "transformer"])
    parser.add_argument("--batches", type=batch_counts, default=BATCHES,
                        help="batches per process in an epoch (a block): mlp=64,transformer=8")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="the encoder on batches of 1")
    add_arguments(parser)
    args = parser.parse_args()
    for name, count in args.batches.items():
        if count % args.accumulation:
            parser.error(f"--batches {name}={count} is not a multiple of --accumulation {args.accumulation}")
    torch.set_num_threads(1)
    build = raw_tasks if args.contender == "raw" else library_tasks
    tasks, barrier, rank = build(args)
    serve(args, rank, tasks, barrier)
    end_job(args.contender)


if __name__ == "__main__":
    main()
