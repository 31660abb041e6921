"""Latency of gather, pad_across_processes and gather_for_metrics vs raw all_gather_into_tensor.

2 CPU processes (gloo, one thread each), float32 tensors of 1 KB to 64 MB per rank. Each round
starts one job per contender (`workers/collectives_job.py`), in rotating order; a job times
every op at every size in 5 blocks and answers each (op, size)'s fastest block. Target: accel
<= 1.05x raw from 1 MB up; below that, at most one extra small collective (the input check's
header exchange; a gather of at most 1 KB travels inside it). The check's cost is reported on its own: rows
"... check off" hold accel with `ACCEL_CHECK_COLLECTIVES=0`, and rows "gather ..., debug mode"
accel's gather in debug mode (`ACCEL_DEBUG_MODE=1`, what the tests run), both measured in the
accel job itself.
Each library job also times the raw ops between its own: the notes carry that in-job ratio,
which load from other work on the machine between jobs cannot skew.
"""

from __future__ import annotations

import statistics

from benchmarks.jobs import round_order, run_job
from benchmarks.measurement import ACCEL, RAW, Measurement, RunOptions

SIZES = (2**10, 2**16, 2**20, 2**23, 2**26)  # 1 KB, 64 KB, 1 MB, 8 MB, 64 MB per rank
QUICK_SIZES = (2**10, 2**16)
OPS = ("gather", "pad_across_processes", "gather_for_metrics")
CHECKED_OPS = ("gather", "gather_for_metrics")  # pad always exchanges sizes: nothing to turn off
DEBUG_OPS = ("gather",)
PROCESSES = 2
TARGET, TARGET_FROM = "accel/raw<=1.05", 2**20
# op -> what the raw job's samples for it are called.
RAW_EQUIVALENT = {
    "gather": "gather",
    "pad_across_processes": "pad_across_processes",
    "gather_for_metrics": "gather",
}
NOTES = {
    "gather": "raw: all_gather_into_tensor into a fresh tensor",
    "pad_across_processes": "rank 1 holds 1 element fewer; raw: all_gather of the lengths, new_full, copy",
    "gather_for_metrics": "inside a prepared loader's pass; raw: all_gather_into_tensor",
}


def size_label(size: int) -> str:
    """Return `size` bytes as "1 KB", "64 MB"."""
    for unit, scale in (("MB", 2**20), ("KB", 2**10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def measure(options: RunOptions) -> list[Measurement]:
    """Return one Measurement per (op, size), plus accel with its input check off per (op, size)."""
    sizes = QUICK_SIZES if options.quick else SIZES
    rounds = 1 if options.quick else options.rounds
    arguments = ["--sizes", ",".join(map(str, sizes))]
    arguments += ["--blocks", "1", "--block-seconds", "0.005"] if options.quick else ["--blocks", "5"]
    # contender -> op -> size -> one value per round
    samples: dict[str, dict[str, dict[int, list[float]]]] = {}
    for round_index in range(rounds):
        for contender in round_order(options.contenders, round_index):
            answer = run_job(contender, "collectives_job.py", [contender, *arguments], processes=PROCESSES)
            per_op = samples.setdefault(contender, {})
            for op, per_size in answer.items():
                for size, seconds in per_size.items():
                    per_op.setdefault(op, {}).setdefault(int(size), []).append(seconds * 1e3)
    return _measurements(samples, sizes, options.contenders)


def _measurements(
    samples: dict[str, dict[str, dict[int, list[float]]]], sizes: tuple[int, ...], contenders: tuple[str, ...]
) -> list[Measurement]:
    measurements = []
    for op in OPS:
        for size in sizes:
            per_contender = {
                contender: samples[contender][RAW_EQUIVALENT[op] if contender == RAW else op][size]
                for contender in contenders
            }
            note = NOTES[op] + _in_job_ratios(samples, op, size, contenders)
            measurements.append(
                _measurement(f"{op} {size_label(size)}", "collectives", op, size, per_contender, note)
            )
    if ACCEL not in contenders or RAW not in contenders:
        return measurements
    for op in CHECKED_OPS:
        for size in sizes:
            checked = samples[ACCEL][op][size]
            unchecked = samples[ACCEL][f"{op}/nocheck"][size]
            cost = statistics.median(c - u for c, u in zip(checked, unchecked, strict=True)) * 1e3
            note = f"accel with ACCEL_CHECK_COLLECTIVES=0; the default check costs {cost:+.0f} us per call"
            per_contender = {RAW: samples[RAW][RAW_EQUIVALENT[op]][size], ACCEL: unchecked}
            figure = f"{op} {size_label(size)}, check off"
            series = f"{op}, check off"
            measurements.append(
                _measurement(figure, "collectives check off", series, size, per_contender, note)
            )
    for op in DEBUG_OPS:
        for size in sizes:
            checked, debug = samples[ACCEL][op][size], samples[ACCEL][f"{op}/debug"][size]
            cost = statistics.median(d - c for d, c in zip(debug, checked, strict=True)) * 1e3
            note = (
                "accel with ACCEL_DEBUG_MODE=1 (the inputs' full descriptions compared across ranks); "
                f"it costs {cost:+.0f} us per call over the default check"
            )
            per_contender = {RAW: samples[RAW][RAW_EQUIVALENT[op]][size], ACCEL: debug}
            figure, series = f"{op} {size_label(size)}, debug mode", f"{op}, debug mode"
            # Debug mode is for finding bugs, not for speed: no target.
            measurements.append(
                _measurement(figure, "collectives debug", series, size, per_contender, note, targeted=False)
            )
    return measurements


def _in_job_ratios(
    samples: dict[str, dict[str, dict[int, list[float]]]], op: str, size: int, contenders: tuple[str, ...]
) -> str:
    """Return "; in-job ratio to raw: accel 1.01, accelerate 1.20" (medians of per-round ratios)."""
    parts = []
    for contender in contenders:
        if contender == RAW:
            continue
        ours, raw = samples[contender][op][size], samples[contender][f"raw/{RAW_EQUIVALENT[op]}"][size]
        parts.append(f"{contender} {statistics.median(o / r for o, r in zip(ours, raw, strict=True)):.2f}")
    return f"; in-job ratio to raw: {', '.join(parts)}" if parts else ""


def _measurement(
    figure: str,
    group: str,
    series: str,
    size: int,
    samples: dict[str, list[float]],
    note: str,
    targeted: bool = True,
) -> Measurement:
    return Measurement(
        figure=figure,
        group=group,
        unit="ms per call",
        higher_is_better=False,
        samples=samples,
        x=float(size),
        x_label="bytes per rank",
        note=note,
        target=TARGET if targeted and size >= TARGET_FROM else None,
        series=series,
    )
