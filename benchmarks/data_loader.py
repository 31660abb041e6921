"""Per-batch cost of a prepared loader vs the raw DataLoader, and the time to skip 10,000 batches.

One process, one thread. Overhead: full passes over a TensorDataset of 100k rows (x: 16 floats,
y: an int), batch 32, shuffled, through a raw `DataLoader` and through
`prepare_data_loader(loader, put_on_device=True)`, alternating so that drift in the machine's speed
hits both alike; medians of the per-batch times (target: overhead <= 5%), by the wall clock and by
this process's CPU time (steadier when other work shares the machine). Skip: time of
`skip_first_batches(prepared, 10_000)` and fetching its first batch, over 400k rows so that batches
remain after the skipped 320k (target < 50 ms).

    python benchmarks/data_loader.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from accel_data import prepare_data_loader, skip_first_batches

BATCH_SIZE = 32
SKIPPED_BATCHES = 10_000


def _dataset(rows: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(rows, 16, generator=generator), torch.randint(10, (rows,), generator=generator)
    )


def _seconds_per_batch(loader: DataLoader) -> tuple[float, float]:
    """Return wall-clock and CPU seconds per batch of one pass."""
    count = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in loader:
        count += 1
    return (time.perf_counter() - wall) / count, (time.process_time() - cpu) / count


def _skip_seconds(prepared: DataLoader) -> tuple[float, float]:
    """Return wall-clock and CPU seconds to skip and fetch the first batch after the skip."""
    prepared.set_epoch(0)
    wall, cpu = time.perf_counter(), time.process_time()
    skipped = skip_first_batches(prepared, SKIPPED_BATCHES)
    next(iter(skipped))
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    dataset = _dataset(100_000)
    raw = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)
    prepared = prepare_data_loader(
        DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True),
        device=torch.device("cpu"),
        put_on_device=True,
    )
    _seconds_per_batch(raw), _seconds_per_batch(prepared)  # warm-up
    raw_times: list[tuple[float, float]] = []
    prepared_times: list[tuple[float, float]] = []
    for repeat in range(args.repeats):
        pair = [(raw, raw_times), (prepared, prepared_times)]
        for loader, times in pair if repeat % 2 == 0 else reversed(pair):
            times.append(_seconds_per_batch(loader))
    for clock, index in (("wall", 0), ("CPU", 1)):
        raw_median = statistics.median(t[index] for t in raw_times)
        prepared_median = statistics.median(t[index] for t in prepared_times)
        print(
            f"{clock:>4} time per batch: raw DataLoader {raw_median * 1e6:7.1f} us, prepared "
            f"{prepared_median * 1e6:7.1f} us (medians of {args.repeats} passes of 100k rows); "
            f"overhead {(prepared_median / raw_median - 1) * 100:+.2f}% (target <= 5%)"
        )

    big = prepare_data_loader(
        DataLoader(_dataset(400_000), batch_size=BATCH_SIZE, shuffle=True),
        device=torch.device("cpu"),
        put_on_device=True,
    )
    _skip_seconds(big)  # warm-up
    skip_times = [_skip_seconds(big) for _ in range(args.repeats)]
    for clock, index in (("wall", 0), ("CPU", 1)):
        times = [t[index] for t in skip_times]
        print(
            f"{clock:>4} time to skip {SKIPPED_BATCHES:,} batches and fetch the next: "
            f"{statistics.median(times) * 1e3:.1f} ms (median of {args.repeats}; max "
            f"{max(times) * 1e3:.1f} ms) (target < 50 ms)"
        )


if __name__ == "__main__":
    main()
