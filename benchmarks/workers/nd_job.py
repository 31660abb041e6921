"""One contender's training job on one N-D mesh of 4 processes: steps per second and each rank's
peak resident memory above its start.

    <launcher> nd_job.py CONTENDER SHAPE --width 512 --blocks 4 --steps 6 [--pairs N]

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

With `--pairs N` (accel only), once its own steps and memory are taken, the job also builds four
fresh copies of the model in the same processes, hand-written, accel, accel, hand-written (ORDER),
and steps each in turn until each side has taken N steps:
{"paired": {"steps_per_s": {"raw": s, "accel": s}, "later_copy": {"raw": r, "accel": r}}}, one over
each side's median step, and each side's later copy over its earlier (the same code against itself:
what building order alone does here). Both sides then run in the same processes at the same
moments, so what the host does to one job and not the other (its neighbours, where the scheduler
puts four processes on two cores) no longer enters their ratio. Last, each side's first copy takes
WORK_STEPS steps under cProfile (`step_work`): "work": what accel's step adds to the hand-written
one (`step_work.added`: its own code and the calls the hand-written step does not make, with their
seconds per step), on the rank where it adds the most, which bounds accel's cost below what the
clock can resolve here.
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
from benchmarks.workers.step_work import added, step_work

SHAPES = {
    "ddp": {"dp_replicate": 4, "dp_shard": 1, "tp": 1},
    "fsdp": {"dp_replicate": 1, "dp_shard": 4, "tp": 1},
    "hsdp": {"dp_replicate": 2, "dp_shard": 2, "tp": 1},
    "fsdp_tp": {"dp_replicate": 1, "dp_shard": 2, "tp": 2},
}
PLAN = {"blocks.*.up": "colwise", "blocks.*.down": "rowwise"}
# The copies --pairs builds, in this order: a trend from first-built to last-built hits both alike.
ORDER = ("raw", "accel", "accel", "raw")
GLOBAL_BATCH = 32
WORK_STEPS = 2  # profiled steps of each side: what a step does does not vary from one to the next
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
    if not dist.is_initialized():
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


def accelerator_for(shape: str) -> Any:
    """Return the Accelerator of mesh `shape` (it starts the process group)."""
    from accel import (
        Accelerator,
        FullyShardedDataParallelPlugin,
        ParallelismConfig,
        TorchTensorParallelConfig,
    )

    sizes = SHAPES[shape]
    if shape == "ddp":
        return Accelerator()
    config = ParallelismConfig(
        dp_replicate_size=sizes["dp_replicate"],
        dp_shard_size=sizes["dp_shard"],
        tp_size=sizes["tp"],
        tp_handler=TorchTensorParallelConfig(tp_plan=PLAN),
    )
    plugin = FullyShardedDataParallelPlugin(
        auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap=["Block"]
    )
    return Accelerator(parallelism_config=config, fsdp_plugin=plugin)


def accel(accelerator: Any, width: int, blocks: int) -> tuple[Step, int]:
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
    parser.add_argument("--pairs", type=int, default=0, help="accel: also time N steps of each side together")
    args = parser.parse_args()
    if args.pairs and args.contender != "accel":
        parser.error("--pairs: only the accel job times the hand-written steps beside its own")
    torch.set_num_threads(1)
    before: list[float] = []
    if args.contender == "accel":
        accelerator = accelerator_for(args.shape)
        before.append(_peak_mb())
        step, rows = accel(accelerator, args.width, args.blocks)
    else:
        step, rows = raw(args.shape, args.width, args.blocks, before)
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
    dist.all_gather_object(peaks, _peak_mb() - before[0])  # before the models of --pairs exist
    answer: dict[str, Any] = {"steps_per_s": 1 / statistics.median(seconds), "peaks_mb": peaks}
    if args.pairs:
        answer["paired"] = _paired(args, lambda: accel(accelerator, args.width, args.blocks))
    if dist.get_rank() == 0:
        emit(answer)
    dist.barrier()
    end_job(args.contender)


def _paired(args: argparse.Namespace, build_accel: Callable[[], tuple[Step, int]]) -> dict[str, Any]:
    """Time `args.pairs` steps of each side on four fresh copies built in the order raw, accel,
    accel, raw; each cycle steps every copy once, starting one copy further on."""
    build = {"raw": lambda: raw(args.shape, args.width, args.blocks, []), "accel": build_accel}
    copies = [(side, *build[side]()) for side in ORDER]
    rows = {side_rows for _, _, side_rows in copies}
    if len(rows) != 1:
        raise SystemExit(f"nd_job.py --pairs: the copies take different batch rows per rank: {sorted(rows)}")
    x = torch.randn(rows.pop(), args.width)
    for _, step, _ in copies:
        for _ in range(2):
            step(x)
    dist.barrier()
    seconds: list[list[float]] = [[] for _ in copies]
    for cycle in range((args.pairs + 1) // 2):
        for index in [(cycle + offset) % len(copies) for offset in range(len(copies))]:
            started = time.perf_counter()
            copies[index][1](x)
            seconds[index].append(time.perf_counter() - started)
    dist.barrier()

    def rate(indices: list[int]) -> float:
        return 1 / statistics.median(t for index in indices for t in seconds[index])

    sides = {side: [i for i, (name, _, _) in enumerate(copies) if name == side] for side in ("raw", "accel")}
    return {
        "steps_per_s": {side: rate(indices) for side, indices in sides.items()},
        # The later copy of a side over the earlier: what building order alone does to the same code.
        "later_copy": {side: rate(indices[1:]) / rate(indices[:1]) for side, indices in sides.items()},
        "work": _work(*(copies[sides[side][0]][1] for side in ("raw", "accel")), x),
    }


def _work(raw_step: Step, accel_step: Step, x: torch.Tensor) -> dict[str, Any]:
    """Return what accel's step adds to the hand-written one (`step_work.added`), on the rank where
    it adds the most."""
    work = {}
    for side, step in (("raw", raw_step), ("accel", accel_step)):
        dist.barrier()
        work[side] = step_work(lambda step=step: step(x), WORK_STEPS)  # type: ignore[misc]
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, added(work["raw"], work["accel"]))
    return max(per_rank, key=lambda rank: rank["seconds"])


if __name__ == "__main__":
    main()
