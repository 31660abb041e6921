"""A training block job on a sharding engine: DeepSpeed ZeRO-2 or FSDP2, driven by hand (`raw`) or
through accel; one block is a fixed number of steps.

    <launcher> engine_loop.py --engine deepspeed|fsdp --contender raw|accel [--steps N]
        --connect HOST:PORT --job NAME

The model, data and DeepSpeed loops are those of benchmarks/deepspeed_zero2.py (an MLP of 4 Linear
layers of width 512, batch 64, torch AdamW); the FSDP2 loop by hand shards each Linear, then the root.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks import deepspeed_zero2 as zero2
from benchmarks.job_exit import end_job
from benchmarks.workers.serve import Task, add_arguments, serve

# The smallest Linear (512 x 512 + 512 parameters) is sharded on its own under both contenders.
WRAP_MIN_PARAMS = 100_000

Built = tuple[Callable[[Any], None], Iterator[Any], Callable[[], None], int]


def build_fsdp_raw() -> Built:
    """Return (step, batches, barrier, rank) of the FSDP2 loop written with `fully_shard`."""
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = zero2.make_model()
    for module in model:
        if sum(p.numel() for p in module.parameters()) > WRAP_MIN_PARAMS:
            fully_shard(module)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dataset = zero2.make_dataset(dist.get_world_size())
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=zero2.BATCH, sampler=sampler)

    def step(batch: Any) -> None:
        x, y = batch
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    return step, zero2.batches(loader, sampler.set_epoch), dist.barrier, dist.get_rank()


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
    model = accelerator.prepare(zero2.make_model())
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    loader = accelerator.prepare(
        DataLoader(zero2.make_dataset(accelerator.num_processes), batch_size=zero2.BATCH, shuffle=True)
    )

    def step(batch: Any) -> None:
        x, y = batch
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()

    return (
        step,
        zero2.batches(loader, loader.set_epoch),
        accelerator.wait_for_everyone,
        accelerator.process_index,
    )


BUILDERS = {
    ("deepspeed", "raw"): zero2.build_raw,
    ("deepspeed", "accel"): zero2.build_accel,
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
    samples = args.steps * zero2.BATCH * int(os.environ.get("WORLD_SIZE", "1"))

    def block() -> float:
        for _ in range(args.steps):
            step(next(data))
        return samples

    serve(args, rank, {args.engine: Task(block)}, barrier)
    end_job(args.contender)


if __name__ == "__main__":
    main()
