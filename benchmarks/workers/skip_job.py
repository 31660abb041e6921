"""One round of the skip figure, in one fresh process: seconds to the first batch after n skipped.

    python skip_job.py --contenders raw,accel --skips 100,1000 --batch 16 --round 0

Every contender reads the same shuffled map-style dataset (one int64 per row, sized so that
batches remain after the largest skip; the same size for every n, so only n changes):
- raw: `next(itertools.islice(iter(loader), n, None))` over a plain DataLoader (loads the skipped
  batches: the cost a loop without an index to skip by pays);
- accel / accelerate: `accelerator.skip_first_batches(prepared, n)` on a loader prepared by each
  library (one process), then its first batch.
Contenders run in the order given, rotated by the round; emits {contender: {n: seconds}}.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.jobs import emit, round_order

FirstBatchAfter = Callable[[int], Any]


def _loader(rows: int, batch: int) -> DataLoader:
    return DataLoader(TensorDataset(torch.arange(rows)), batch_size=batch, shuffle=True)


def _raw(rows: int, batch: int) -> FirstBatchAfter:
    loader = _loader(rows, batch)
    return lambda n: next(itertools.islice(iter(loader), n, None))


def _library(accelerator: Any, rows: int, batch: int) -> FirstBatchAfter:
    prepared = accelerator.prepare(_loader(rows, batch))
    return lambda n: next(iter(accelerator.skip_first_batches(prepared, n)))


def _accel(rows: int, batch: int) -> FirstBatchAfter:
    from accel import Accelerator

    return _library(Accelerator(cpu=True), rows, batch)


def _accelerate(rows: int, batch: int) -> FirstBatchAfter:
    from accelerate import Accelerator

    return _library(Accelerator(cpu=True), rows, batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contenders", required=True)
    parser.add_argument("--skips", required=True, help="numbers of batches to skip, comma-separated")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--round", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    skips = [int(n) for n in args.skips.split(",")]
    rows = (max(skips) + 2) * args.batch
    builders = {"raw": _raw, "accel": _accel, "accelerate": _accelerate}
    contenders = round_order(args.contenders.split(","), args.round)
    first_batch_after = {name: builders[name](rows, args.batch) for name in contenders}
    for function in first_batch_after.values():
        function(1)  # warm-up: the first pass builds what every later one reuses
    results: dict[str, dict[int, float]] = {name: {} for name in contenders}
    for n in skips:
        for name in contenders:
            started = time.perf_counter()
            batch = first_batch_after[name](n)
            results[name][n] = time.perf_counter() - started
            assert len(batch[0]) == args.batch, (name, n, batch)
    emit(results)


if __name__ == "__main__":
    main()
