"""A training block job: the same models, data and loop written by hand for DDP (`raw`), through accel,
or through Hugging Face Accelerate; one block is one epoch of a model's loader.

    <launcher> train_loop.py --contender raw|accel|accelerate --precision no|bf16 --accumulation N
        --models mlp,transformer [--batches N] [--quick] --connect HOST:PORT --job NAME

Models: "mlp" (3 x Linear 512, SGD), "transformer" (an encoder, AdamW), and "mlp<W>" such as
"mlp1024" (3 x Linear W, AdamW, the `scaling` figure's model-size curve). Every answer also holds
the model's parameter count.

A block is a whole epoch so that no prepared loader is left half-walked while another model's runs
(a loader's end is what Accelerate and accel read to sync an accumulation step).
"""

from __future__ import annotations

import argparse
import re
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
# "mlp<W>": the MLP at width W, trained with AdamW; its batch and default batches are the MLP's.
WIDE_MLP = re.compile(r"mlp([1-9][0-9]*)")


def mlp_width(name: str) -> int | None:
    """Return the width of an MLP model ("mlp": MLP_WIDTH, "mlp<W>": W), else None."""
    if name == "mlp":
        return MLP_WIDTH
    match = WIDE_MLP.fullmatch(name)
    return int(match.group(1)) if match else None


def known_model(name: str) -> bool:
    return name in BATCH or mlp_width(name) is not None


def batch_size(name: str, quick: bool) -> int:
    """Return a model's per-process batch: every MLP's is BATCH["mlp"]; the encoder's is 1 in quick runs."""
    if mlp_width(name) is not None:
        return BATCH["mlp"]
    return 1 if quick and name == "transformer" else BATCH[name]


def make_model(name: str) -> torch.nn.Module:
    width = mlp_width(name)
    if width is not None:
        layers: list[torch.nn.Module] = []
        for _ in range(MLP_LAYERS - 1):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(width, width))
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
    width = mlp_width(name)
    shape = (width,) if width is not None else (SEQUENCE, ENCODER_WIDTH)
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
        batch = batch_size(name, args.quick)
        dataset = make_dataset(name, batch, args.batches[name], world)
        sampler: DistributedSampler[Any] = DistributedSampler(dataset, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
        tasks[name] = Task(
            _raw_epoch(args, model, optimizer, loader, Epochs(sampler.set_epoch), batch * world),
            extras=_parameters(model),
        )
    return tasks, dist.barrier, dist.get_rank()


def _plain_epoch(model: Any, optimizer: Any, loader: Any, epochs: Epochs, samples_per_step: int,
                 backward: Callable[[torch.Tensor], Any]) -> Callable[[], float]:  # fmt: skip
    """The plain loop, the same lines by hand (`backward` the tensor's own) and through a library
    (its `backward`): nothing else differs between them."""

    def run() -> float:
        epochs.next()
        steps = 0
        for x, y in loader:
            steps += 1
            loss = loss_of(model(x), y)
            backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        return steps * samples_per_step

    return run


def _raw_epoch(args: argparse.Namespace, model: Any, optimizer: Any, loader: DataLoader, epochs: Epochs,
               samples_per_step: int) -> Callable[[], float]:  # fmt: skip
    """The epoch as written by hand for this setting alone: the plain loops without an accumulation
    branch, plain fp32 without an autocast context (the loop's own lines count in accel's own
    work, `step_work`: a line the hand-written loop need not run would be credited to accel)."""
    every = args.accumulation
    bf16 = args.precision == "bf16"

    run = _plain_epoch(model, optimizer, loader, epochs, samples_per_step, torch.Tensor.backward)

    def run_bf16() -> float:
        epochs.next()
        steps = 0
        for x, y in loader:
            steps += 1
            with torch.autocast("cpu", dtype=torch.bfloat16):
                output = model(x)
            loss = loss_of(output, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        return steps * samples_per_step

    def run_accumulating() -> float:
        epochs.next()
        steps = 0
        for steps, (x, y) in enumerate(loader, start=1):
            syncs = steps % every == 0
            with nullcontext() if syncs else model.no_sync():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    output = model(x)
                (loss_of(output, y) / every).backward()
            if syncs:
                optimizer.step()
                optimizer.zero_grad()
        return steps * samples_per_step

    return run_accumulating if every > 1 else run_bf16 if bf16 else run


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
        batch = batch_size(name, args.quick)
        dataset = make_dataset(name, batch, args.batches[name], accelerator.num_processes)
        loader = DataLoader(dataset, batch_size=batch, shuffle=True)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        samples = batch * accelerator.num_processes
        tasks[name] = Task(
            _library_epoch(args, accelerator, model, optimizer, loader, Epochs(loader.set_epoch), samples),
            extras=_parameters(model),
        )
    return tasks, accelerator.wait_for_everyone, accelerator.process_index


def _library_epoch(args: argparse.Namespace, accelerator: Any, model: Any, optimizer: Any, loader: Any,
                   epochs: Epochs, samples_per_step: int) -> Callable[[], float]:  # fmt: skip
    """The epoch as Accelerate documents it for this setting: accumulate() only when accumulating."""

    run = _plain_epoch(model, optimizer, loader, epochs, samples_per_step, accelerator.backward)

    def run_accumulating() -> float:
        epochs.next()
        steps = 0
        for x, y in loader:
            steps += 1
            with accelerator.accumulate(model):
                loss = loss_of(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        return steps * samples_per_step

    return run_accumulating if args.accumulation > 1 else run


def _parameters(model: torch.nn.Module) -> Callable[[], dict[str, float]]:
    """Return the extras of a model's answers: its parameter count."""
    count = float(sum(parameter.numel() for parameter in model.parameters()))
    return lambda: {"parameters": count}


def batch_counts(text: str) -> dict[str, int]:
    """Parse "mlp=64,transformer=8" (or "mlp1024=16")."""
    counts = {}
    for item in text.split(","):
        name, _, count = item.partition("=")
        if not known_model(name) or not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not <model>=<batches> with a model of {sorted(BATCH)} or mlp<width>"
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
    unknown = [name for name in args.models if not known_model(name)]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)} (known: {', '.join(BATCH)}, mlp<width>)")
    # An "mlp<W>" not named in --batches walks the MLP's batches per epoch.
    args.batches = {**{name: BATCHES["mlp"] for name in args.models if name not in BATCH}, **args.batches}
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
