"""Latency of gather, pad_across_processes and gather_for_metrics vs raw all_gather_into_tensor.

2 CPU processes (gloo, one thread each), float32 tensors of 1 KB to 64 MB per rank. Each round
starts one job per contender (`workers/collectives_job.py`), in rotating order; a job times
every op at every size in 5 blocks and answers each (op, size)'s fastest block.

The ratio to raw is measured within each library's own job: the job times the raw ops in the same
blocks as its own, so a process that happens to be slower (memory layout, a neighbour's load)
slows both sides alike. The raw job's own figure is in the note. Targets (accel / raw): with the
input check on, <= 1.3 up to 64 KB (the check's header exchange is one small extra collective; a
gather of at most 1 KB travels inside it) and <= 1.05 from 1 MB; with the check off
(`ACCEL_CHECK_COLLECTIVES=0`, rows "... check off") <= 1.05 at every size. Rows "gather ...,
debug mode" hold accel's gather in debug mode (`ACCEL_DEBUG_MODE=1`, what the tests run), without
a target.

Rows "accel's own work, ... check off" count what the clock cannot resolve: between two processes
the transport's time varies from one job to the next by more than 5%. accel's job also times its
gather and gather_for_metrics (check off) and the raw gather with the time inside the transport's
all_gather taken off each side; what accel's call spends around it beyond the raw one's is given in
% of the raw call timed in the same job (target <= 5%, the 1.05 ratio). It is counted between real
exchanges, where the code around them runs with cold caches: run in a loop of its own, with a local
copy for a transport, the same code took a fifth of that time (2026-12-07).
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
OWN_BLOCKS = 9  # blocks of accel's own work per size, the time inside the transport taken off
OWN_OPS = ("gather", "gather_for_metrics")
OWN_TARGET = f"{ACCEL}<=5"  # % of the raw call: the check-off target of 1.05x raw
# (smallest size, target) from small to large: the check on, and the check off.
CHECKED_TARGETS = ((0, "accel/raw<=1.3"), (2**20, "accel/raw<=1.05"))
UNCHECKED_TARGETS = ((0, "accel/raw<=1.05"),)
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
    arguments += ["--own-blocks", "1" if options.quick else str(OWN_BLOCKS)]
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
            raw, note = _raw_reference(samples, op, size, contenders)
            per_contender[RAW] = raw
            measurements.append(
                _measurement(
                    f"{op} {size_label(size)}",
                    "collectives",
                    op,
                    size,
                    per_contender,
                    NOTES[op] + note,
                    _target(CHECKED_TARGETS, size),
                )
            )
    if ACCEL not in contenders or RAW not in contenders:
        return measurements
    for op in CHECKED_OPS:
        for size in sizes:
            checked = samples[ACCEL][op][size]
            unchecked = samples[ACCEL][f"{op}/nocheck"][size]
            cost = statistics.median(c - u for c, u in zip(checked, unchecked, strict=True)) * 1e3
            note = f"accel with ACCEL_CHECK_COLLECTIVES=0; the default check costs {cost:+.0f} us per call"
            per_contender = {RAW: samples[ACCEL][f"raw/{RAW_EQUIVALENT[op]}"][size], ACCEL: unchecked}
            figure = f"{op} {size_label(size)}, check off"
            series = f"{op}, check off"
            measurements.append(_measurement(figure, "collectives check off", series, size, per_contender,
                                             note, _target(UNCHECKED_TARGETS, size)))  # fmt: skip
    measurements += _own_work(samples[ACCEL], sizes)
    for op in DEBUG_OPS:
        for size in sizes:
            checked, debug = samples[ACCEL][op][size], samples[ACCEL][f"{op}/debug"][size]
            cost = statistics.median(d - c for d, c in zip(debug, checked, strict=True)) * 1e3
            note = (
                "accel with ACCEL_DEBUG_MODE=1 (the inputs' full descriptions compared across ranks); "
                f"it costs {cost:+.0f} us per call over the default check"
            )
            per_contender = {RAW: samples[ACCEL][f"raw/{RAW_EQUIVALENT[op]}"][size], ACCEL: debug}
            figure, series = f"{op} {size_label(size)}, debug mode", f"{op}, debug mode"
            # Debug mode is for finding bugs, not for speed: no target.
            measurements.append(_measurement(figure, "collectives debug", series, size, per_contender, note))
    return measurements


def _own_work(accel: dict[str, dict[int, list[float]]], sizes: tuple[int, ...]) -> list[Measurement]:
    """Return a row per (op, size) of what accel's call adds with the check off, in % of the raw call
    timed in the same job; a job in which accel spent less around it than raw counts as adding nothing."""
    measurements = []
    for op in OWN_OPS:
        for size in sizes:
            own, raw = accel[f"own/{op}"][size], accel[f"raw/{RAW_EQUIVALENT[op]}"][size]
            share = [max(0.0, 100 * o / r) for o, r in zip(own, raw, strict=True)]
            note = (
                f"accel with ACCEL_CHECK_COLLECTIVES=0 and the raw gather, each with the time inside the "
                f"transport's all_gather taken off ({OWN_BLOCKS} blocks each, the median): accel's call "
                f"spends {statistics.median(own) * 1e3:.3g} us more around it, against a raw call of "
                f"{statistics.median(raw) * 1e3:.3g} us, in the same job"
            )
            measurements.append(
                Measurement(
                    figure=f"accel's own work, {op} {size_label(size)}, check off",
                    group="collectives own work",
                    unit="% of the raw call",
                    higher_is_better=False,
                    samples={ACCEL: share},
                    x=float(size),
                    x_label="bytes per rank",
                    note=note,
                    target=OWN_TARGET,
                    series=f"accel's own work, {op}, check off",
                )
            )
    return measurements


def _target(targets: tuple[tuple[int, str], ...], size: int) -> str:
    """Return the target of the largest threshold at or below `size`."""
    return [target for smallest, target in targets if size >= smallest][-1]


def _raw_reference(
    samples: dict[str, dict[str, dict[int, list[float]]]], op: str, size: int, contenders: tuple[str, ...]
) -> tuple[list[float], str]:
    """Return the raw samples accel is judged against (timed in accel's own job, when it ran) and a
    note with the raw job's own median and Accelerate's in-job ratio."""
    raw_job = samples[RAW][RAW_EQUIVALENT[op]][size] if RAW in contenders else []
    if ACCEL not in contenders:
        return raw_job, ""
    in_job = samples[ACCEL][f"raw/{RAW_EQUIVALENT[op]}"][size]
    parts = ["; raw: the same op timed in accel's own job"]
    if raw_job:
        parts.append(f" (the raw job alone: {statistics.median(raw_job):.4g} ms)")
    for contender in contenders:
        if contender in (RAW, ACCEL):
            continue
        ours, raw = samples[contender][op][size], samples[contender][f"raw/{RAW_EQUIVALENT[op]}"][size]
        ratio = statistics.median(o / r for o, r in zip(ours, raw, strict=True))
        parts.append(f"; {contender}'s own in-job ratio to raw: {ratio:.2f}")
    return in_job, "".join(parts)


def _measurement(
    figure: str,
    group: str,
    series: str,
    size: int,
    samples: dict[str, list[float]],
    note: str,
    target: str | None = None,
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
        target=target,
        series=series,
    )
