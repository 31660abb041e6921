"""Prepared-loader overhead per batch: accel's and Accelerate's prepared DataLoader vs a raw
DataLoader with a DistributedSampler, on 2 CPU processes (target: accel <= 1.02x raw).

Each round starts one job per contender (`workers/loader_job.py`), in rotating order; a job
times full passes over its rank's shard of 100k rows (batch 32) and answers the CPU time per batch,
the median of its passes, averaged over ranks (the wall clock's figure goes into the note). The
library jobs also run the raw loader in alternating passes: the note gives that in-job ratio,
steadier than one between jobs.
"""

from __future__ import annotations

import statistics

from benchmarks.jobs import round_order, run_job
from benchmarks.measurement import Measurement, RunOptions

PROCESSES = 2
ROWS, PASSES = 100_000, 7
QUICK_ROWS, QUICK_PASSES = 4_000, 1
TARGET = "accel/raw<=1.02"


def measure(options: RunOptions) -> list[Measurement]:
    """Return one Measurement: microseconds of CPU time per batch, per contender."""
    rows, passes = (QUICK_ROWS, QUICK_PASSES) if options.quick else (ROWS, PASSES)
    rounds = 1 if options.quick else options.rounds
    cpu: dict[str, list[float]] = {contender: [] for contender in options.contenders}
    wall: dict[str, list[float]] = {contender: [] for contender in options.contenders}
    in_job: dict[str, list[float]] = {}  # contender -> its ratio to the raw loader in its own job
    for round_index in range(rounds):
        for contender in round_order(options.contenders, round_index):
            arguments = [contender, "--rows", str(rows), "--passes", str(passes)]
            answer = run_job(contender, "loader_job.py", arguments, processes=PROCESSES)
            cpu[contender].append(answer["seconds_per_batch"] * 1e6)
            wall[contender].append(answer["wall_seconds_per_batch"] * 1e6)
            if "raw_seconds_per_batch" in answer:
                ratio = answer["seconds_per_batch"] / answer["raw_seconds_per_batch"]
                in_job.setdefault(contender, []).append(ratio)
    by_wall = ", ".join(f"{name} {statistics.median(values):.1f}" for name, values in wall.items())
    ratios = ", ".join(f"{name} {statistics.median(values):.3f}" for name, values in in_job.items())
    return [
        Measurement(
            figure="loader CPU time per batch",
            group="loader",
            unit="us per batch",
            higher_is_better=False,
            samples=cpu,
            note=(
                f"2 CPU processes, {rows:,} rows, batch 32, shuffled; raw: DataLoader + DistributedSampler; "
                f"accel, accelerate: accelerator.prepare(DataLoader); wall-clock medians (us): {by_wall}; "
                f"in-job ratio to raw: {ratios or 'none measured'}"
            ),
            target=TARGET,
        )
    ]
