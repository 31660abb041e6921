"""One contender's training job on one N-D mesh of 4 processes: steps per second and each rank's
peak resident memory above its start.

    <launcher> nd_job.py CONTENDER SHAPE --width 512 --blocks 4 --steps 6

The model: BLOCKS residual MLP blocks (up: width -> 4 width, down: back), AdamW, one thread per
process, the global batch split over the data parallel ranks. SHAPE:
- ddp (dp_replicate 4): raw `DistributedDataParallel`; accel `Accelerator()`;
- fsdp (dp_shard 4), hsdp (dp_replicate 2 x dp_shard 2), fsdp_tp (dp_shard 2 x tp 2): raw builds
  the same device mesh by hand (`init_device_mesh` with accel's four dimensions), splits each
  block's `up` column-wise and `down` row-wise over `tp` (`parallelize_module`), then
  `fully_shard`s each block and the root over the data dimensions; accel is
  `Accelerator(parallelism_config=...)` with the same plan and a plugin that shards each block.
Timed: STEPS steps after two warm-up steps, each on its own; steps/s is one over the median step.
Four processes share two cores here, so a step the scheduler preempted can take twice as long: the
median leaves those out, where the mean over all steps carried them into the ratio. Rank 0 emits
{"steps_per_s": s, "peaks_mb": [per rank]}.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.jobs import emit
from benchmarks.workers.job_exit import end_job

SHAPES = {
    "ddp": {"dp_replicate": 4, "dp_shard": 1, "tp": 1},
    "fsdp": {"dp_replicate": 1, "dp_shard": 4, "tp": 1},
    "hsdp": {"dp_replicate": 2, "dp_shard": 2, "tp": 1},
    "fsdp_tp": {"dp_replicate": 1, "dp_shard": 2, "tp": 2},
}
PLAN = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}
GLOBAL_BATCH = 32
Step = Callable[[torch.Tensor], None]


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self, width: int, blocks: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _model(width: int, blocks: int) -> Net:
    torch.manual_seed(0)
    return Net(width, blocks)


def raw(shape: str, width: int, blocks: int, before: list[float]) -> tuple[Step, int]:
    dist.init_process_group("gloo")
    before.append(_peak_mb())
    sizes = SHAPES[shape]
    model: Any = _model(width, blocks)
    if shape == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
        data_shards, index = dist.get_world_size(), dist.get_rank()
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        names = ("dp_replicate", "dp_shard", "cp", "tp")
        shape_of = (sizes["dp_replicate"], sizes["dp_shard"], 1, sizes["tp"])
        mesh = init_device_mesh("cpu", shape_of, mesh_dim_names=names)
        mesh[("dp_shard", "cp")]._flatten("dp_shard_cp")
        dp = mesh[("dp_replicate", "dp_shard")]._flatten("dp")
        if sizes["tp"] > 1:
            styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
            plan = {
                f"blocks.{i}.{name}": styles[style]()
                for i in range(blocks)
                for name, style in (("up", PLAN["blocks.*.up"]), ("down", PLAN["blocks.*.down"]))
            }
            parallelize_module(model, mesh["tp"], plan)
        shard_mesh = (
            mesh[("dp_replicate", "dp_shard_cp")] if sizes["dp_replicate"] > 1 else mesh["dp_shard_cp"]
        )
        for block in model.blocks:
            fully_shard(block, mesh=shard_mesh)
        fully_shard(model, mesh=shard_mesh)
        data_shards, index = dp.size(), dp.get_local_rank()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(x: torch.Tensor) -> None:
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    del index  # every rank draws its own rows: only their number matters to the timing
    return step, GLOBAL_BATCH // data_shards


def accel(shape: str, width: int, blocks: int, before: list[float]) -> tuple[Step, int]:
    from accel import (
        Accelerator,
        FullyShardedDataParallelPlugin,
        ParallelismConfig,
        TorchTensorParallelConfig,
    )

    sizes = SHAPES[shape]
    if shape == "ddp":
        accelerator = Accelerator()
    else:
        config = ParallelismConfig(
            dp_replicate_size=sizes["dp_replicate"],
            dp_shard_size=sizes["dp_shard"],
            tp_size=sizes["tp"],
            tp_handler=TorchTensorParallelConfig(tp_plan=PLAN),
        )
        plugin = FullyShardedDataParallelPlugin(
            auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap=["Block"]
        )
        accelerator = Accelerator(parallelism_config=config, fsdp_plugin=plugin)
    before.append(_peak_mb())
    model = accelerator.prepare(_model(width, blocks))
    optimizer = accelerator.prepare(torch.optim.AdamW(model.parameters(), lr=1e-4))
    layout = accelerator.backend.data_layout()
    shards = accelerator.num_processes if layout is None else layout.num_shards

    def step(x: torch.Tensor) -> None:
        accelerator.backward(model(x).square().mean())
        optimizer.step()
        optimizer.zero_grad()

    return step, GLOBAL_BATCH // shards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=("raw", "accel"))
    parser.add_argument("shape", choices=tuple(SHAPES))
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    before: list[float] = []
    step, rows = {"raw": raw, "accel": accel}[args.contender](args.shape, args.width, args.blocks, before)
    x = torch.randn(rows, args.width)
    for _ in range(2):
        step(x)
    dist.barrier()
    seconds = []
    for _ in range(args.steps):
        started = time.perf_counter()
        step(x)  # its collectives keep the ranks in step
        seconds.append(time.perf_counter() - started)
    dist.barrier()
    peaks = [None] * dist.get_world_size()
    dist.all_gather_object(peaks, _peak_mb() - before[0])
    if dist.get_rank() == 0:
        emit({"steps_per_s": 1 / statistics.median(seconds), "peaks_mb": peaks})
    dist.barrier()
    end_job(args.contender)


if __name__ == "__main__":
    main()
