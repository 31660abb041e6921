"""One contender's prepared loader on every rank: CPU seconds per batch of a full pass.

    <launcher> loader_job.py CONTENDER --rows 100000 --passes 7

A TensorDataset (x: 16 floats, y: an int; batch 32, shuffled), each rank reading its shard:
- raw: a DataLoader with a `DistributedSampler` (`set_epoch` before each pass);
- accel / accelerate: `accelerator.prepare(DataLoader(dataset, batch_size=32, shuffle=True))`.
Per rank: the median over passes (after one warm-up pass) of this process's CPU time per batch,
from each pass's second batch on (steadier than the wall clock when other work shares the
machine; the loop never waits). The
accel and accelerate jobs also run the raw loader, its passes alternating with their own: a
ratio within one job, which differences between processes and load between jobs cannot skew.
Rank 0 emits {"seconds_per_batch", "wall_seconds_per_batch", and "raw_seconds_per_batch" (the
raw loader in this job)}, each the mean over ranks.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from benchmarks.jobs import emit
from benchmarks.workers.job_exit import end_job

BATCH_SIZE = 32


def _dataset(rows: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(rows, 16, generator=generator), torch.randint(10, (rows,), generator=generator)
    )


def _raw(rows: int) -> tuple[Any, Any]:
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    dataset = _dataset(rows)
    sampler: DistributedSampler[Any] = DistributedSampler(dataset, shuffle=True, seed=0)
    return DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler), sampler.set_epoch


def _library(accelerator: Any, rows: int) -> tuple[Any, Any]:
    loader = accelerator.prepare(DataLoader(_dataset(rows), batch_size=BATCH_SIZE, shuffle=True))
    return loader, loader.set_epoch


def _accel(rows: int) -> tuple[Any, Any]:
    from accel import Accelerator

    return _library(Accelerator(), rows)


def _accelerate(rows: int) -> tuple[Any, Any]:
    from accelerate import Accelerator

    return _library(Accelerator(), rows)


def _pass(loader: Any) -> tuple[float, float]:
    """Return CPU and wall seconds per batch of one pass over `loader`, from its second batch on.

    The first batch is left out: a prepared loader starts each pass by agreeing on its shuffle
    with the other ranks (one collective, a cost per epoch, not per batch), and waiting there
    for a rank still busy elsewhere would be counted as this loader's work.
    """
    batches = iter(loader)
    next(batches)
    count = 0
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in batches:
        count += 1
    return (time.process_time() - cpu) / count, (time.perf_counter() - wall) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=("raw", "accel", "accelerate"))
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    build = {"raw": _raw, "accel": _accel, "accelerate": _accelerate}[args.contender]
    loaders = {"own": build(args.rows)}
    if args.contender != "raw":
        loaders["raw"] = _raw(args.rows)  # passes alternate with the library's own
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in loaders}
    for epoch in range(args.passes + 1):
        for name, (loader, set_epoch) in loaders.items():
            set_epoch(epoch)
            times[name].append(_pass(loader))
    medians = [statistics.median(t[i] for t in times[name][1:]) for name in loaders for i in (0, 1)]
    mine = torch.tensor(medians, dtype=torch.float64)
    dist.all_reduce(mine)
    mean = (mine / dist.get_world_size()).tolist()
    if dist.get_rank() == 0:
        answer = {"seconds_per_batch": mean[0], "wall_seconds_per_batch": mean[1]}
        if "raw" in loaders:
            answer["raw_seconds_per_batch"] = mean[2]
        emit(answer)
    dist.barrier()
    end_job(args.contender)


if __name__ == "__main__":
    main()
