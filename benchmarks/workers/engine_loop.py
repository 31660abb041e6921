"""A training block job on a sharding engine: DeepSpeed ZeRO-2 or FSDP2, driven by hand (`raw`) or
through accel; one block is a fixed number of steps.

    <launcher> engine_loop.py --engine deepspeed|fsdp --contender raw|accel [--steps N]
        --connect HOST:PORT --job NAME

Both contenders train the same MLP (4 Linear layers of width 512, batch 64 per process) with the
same data and client optimizer (torch AdamW), so that only the training loop differs:

- DeepSpeed, raw: `deepspeed.init_distributed` (gloo) and `deepspeed.initialize` with the ZeRO-2
  config accel builds, then `engine(x)`, `engine.backward(loss)`, `engine.step()`; it imports
  nothing from accel. accel: `Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))`.
- FSDP2, raw: `fully_shard` on each Linear above WRAP_MIN_PARAMS, then the root. accel: the FSDP
  plugin with the same size-based wrap.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.workers.job_exit import end_job
from benchmarks.workers.serve import Task, add_arguments, serve

WIDTH, BATCH, LAYERS = 512, 64, 4
# Distinct batches per process: the loader is walked again (a new epoch) while the job runs.
BATCHES_PER_EPOCH = 32
# What accel builds from DeepSpeedPlugin(zero_stage=2) and a loader of per-process batch BATCH.
DEEPSPEED_CONFIG = {
    "train_micro_batch_size_per_gpu": BATCH,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 2},
    "gradient_clipping": 0.0,  # DeepSpeed would clip to 1.0 without the key; accel writes 0.0
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 2**31 - 1,
}
# The smallest Linear (512 x 512 + 512 parameters) is sharded on its own under both contenders.
WRAP_MIN_PARAMS = 100_000

Built = tuple[Callable[[Any], None], Iterator[Any], Callable[[], None], int]


def make_model() -> Any:
    import torch

    layers: list[torch.nn.Module] = []
    for _ in range(LAYERS - 1):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(WIDTH, WIDTH))
    return torch.nn.Sequential(*layers)


def make_dataset(world: int) -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(0)
    rows = BATCHES_PER_EPOCH * BATCH * world
    return TensorDataset(
        torch.randn(rows, WIDTH, generator=generator), torch.randn(rows, WIDTH, generator=generator)
    )


def batches(loader: Any, set_epoch: Callable[[int], None]) -> Iterator[Any]:
    """Yield batches from `loader` forever, one epoch after another."""
    epoch = 0
    while True:
        set_epoch(epoch)
        yield from loader
        epoch += 1


def build_deepspeed_raw() -> Built:
    """Return (step, batches, barrier, rank) of the hand-driven DeepSpeed engine."""
    import deepspeed.comm.torch  # noqa: F401 - loaded to patch it before init_distributed runs
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    # DeepSpeed compiles a shared-memory all-reduce op for CPU that training never uses.
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # type: ignore[attr-defined]
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=DEEPSPEED_CONFIG)
    dataset = make_dataset(dist.get_world_size())
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)

    def step(batch: Any) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()

    return step, batches(loader, sampler.set_epoch), dist.barrier, dist.get_rank()


def build_deepspeed_accel() -> Built:
    """Return (step, batches, barrier, rank) of the same loop through accel's DeepSpeed backend."""
    import torch
    from torch.utils.data import DataLoader

    from accel import Accelerator, DeepSpeedPlugin

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(make_dataset(accelerator.num_processes), batch_size=BATCH, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    def step(batch: Any) -> None:
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

    return step, batches(loader, loader.set_epoch), accelerator.wait_for_everyone, accelerator.process_index


def build_fsdp_raw() -> Built:
    """Return (step, batches, barrier, rank) of the FSDP2 loop written with `fully_shard`."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = make_model()
    for module in model:
        if sum(p.numel() for p in module.parameters()) > WRAP_MIN_PARAMS:
            fully_shard(module)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dataset = make_dataset(dist.get_world_size())
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)

    def step(batch: Any) -> None:
        x, y = batch
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    return step, batches(loader, sampler.set_epoch), dist.barrier, dist.get_rank()


def build_fsdp_accel() -> Built:
    """Return (step, batches, barrier, rank) of the same loop through accel's FSDP2 backend."""
    import torch
    from torch.utils.data import DataLoader

    from accel import Accelerator, FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=WRAP_MIN_PARAMS
    )
    accelerator = Accelerator(fsdp_plugin=plugin)
    torch.manual_seed(0)
    model = accelerator.prepare(make_model())
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    loader = accelerator.prepare(
        DataLoader(make_dataset(accelerator.num_processes), batch_size=BATCH, shuffle=True)
    )

    def step(batch: Any) -> None:
        x, y = batch
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()

    return (
        step,
        batches(loader, loader.set_epoch),
        accelerator.wait_for_everyone,
        accelerator.process_index,
    )


BUILDERS = {
    ("deepspeed", "raw"): build_deepspeed_raw,
    ("deepspeed", "accel"): build_deepspeed_accel,
    ("fsdp", "raw"): build_fsdp_raw,
    ("fsdp", "accel"): build_fsdp_accel,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["deepspeed", "fsdp"], required=True)
    parser.add_argument("--contender", choices=["raw", "accel"], required=True)
    parser.add_argument("--steps", type=int, default=20, help="steps in one block")
    add_arguments(parser)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    step, data, barrier, rank = BUILDERS[args.engine, args.contender]()
    samples = args.steps * BATCH * int(os.environ.get("WORLD_SIZE", "1"))

    def block() -> float:
        for _ in range(args.steps):
            step(next(data))
        return samples

    serve(args, rank, {args.engine: Task(block)}, barrier)
    end_job(args.contender)


if __name__ == "__main__":
    main()
