"""The figure "accel's own work": what accel adds to a step (or an epoch) of the loop, counted under
cProfile beside the hand-written loop doing the same work (`workers/step_work.py`), in % of the
hand-written loop's time. Two copies of the same code on a loaded machine differ by a few % of
wall-clock time, more than a 1% target can be judged by; the calls do not.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks import blockjobs
from benchmarks.measurement import ACCEL, RAW, Measurement
from benchmarks.workers.serve import WORK
from benchmarks.workers.step_work import added, least_waiting

TARGET = f"{ACCEL}<=1.0"
UNIT = "% of the hand-written {unit}"


def added_work(
    figure: str, group: str, work: list[dict[str, Any]], raw_seconds: list[float],
    unit: str, where: str, note: str, **common: Any,
) -> Measurement:  # fmt: skip
    """Return accel's added seconds per `unit` ("step", "epoch") in % of the hand-written one's,
    one sample per pair of `work` (`step_work.added`'s answers) and `raw_seconds`. `where`
    says which rank and copy the counts come from."""
    share = [100 * w["seconds"] / seconds for w, seconds in zip(work, raw_seconds, strict=True)]

    def median(key: str) -> float:
        return statistics.median(w[key] for w in work)

    how = (
        f"one {unit} under cProfile ({where}) makes {median('raw_calls'):.0f} calls hand-written; accel's "
        f"makes {median('own_calls'):.0f} calls in accel's code ({median('own_s') * 1e3:.3g} ms) and "
        f"{median('extra_calls'):.0f} other calls that the hand-written loop does not make "
        f"({median('extra_s') * 1e3:.3g} ms at their mean own time{_largest(work)}){_loop(work)}, "
        "against the time "
        f"of the hand-written {unit} (profiled, less the profiler's own cost per call measured beside it: "
        f"an upper bound); steps/s >= 0.99x hand-written holds "
        "wherever this is <= 1%"
    )
    return Measurement(
        figure=figure,
        group=group,
        unit=UNIT.format(unit=unit),
        higher_is_better=False,
        samples={ACCEL: share},
        note=f"{note}; {how}" if note else how,
        target=TARGET,
        series="accel's own work",
        **common,
    )


def _loop(work: list[dict[str, Any]]) -> str:
    """Return ", and its loop's own lines <ms> ms more/fewer than the hand-written loop's (...)" (the
    median; nothing for answers that do not count the loop's lines)."""
    if not all("loop_s" in w for w in work):
        return ""
    loop_s = statistics.median(w["loop_s"] for w in work)
    if loop_s >= 0:
        return f", and its loop's own lines {loop_s * 1e3:.3g} ms more than the hand-written loop's (charged)"
    return (
        f", and its loop's own lines {-loop_s * 1e3:.3g} ms fewer than the hand-written loop's (counted "
        "off: work moved into accel's code)"
    )


def _largest(work: list[dict[str, Any]]) -> str:
    """Return ", the most: <function> (<calls> calls, <ms> ms)" for the sample of median seconds."""
    middle = sorted(work, key=lambda w: w["seconds"])[len(work) // 2]
    name, calls, seconds = middle["largest"]
    return f", the most: {name} ({calls:.3g} calls, {seconds * 1e3:.3g} ms)" if name else ""


def profiling(tasks: list[str], blocks: int) -> tuple[dict[str, list[dict[str, Any]]], blockjobs.StartHook]:
    """Return (work, hook): `hook`, run in each start of the jobs (`blockjobs.interleaved_in_starts`),
    profiles that start's share of `blocks` blocks of each task in raw's and accel's jobs and adds
    to `work` (task -> what accel's block adds to the hand-written one's, `step_work.added`, rank 0,
    each collective's time at the rank that waited least: `step_work.least_waiting`); `work` stays
    empty when either job is absent."""
    work: dict[str, list[dict[str, Any]]] = {}

    def hook(jobs: dict[str, blockjobs.BlockJob], index: int, count: int) -> None:
        if RAW not in jobs or ACCEL not in jobs:
            return
        for task in tasks:
            for _ in range(blockjobs.share(blocks, index, count)):
                answers = {
                    side: least_waiting(jobs[side].run_on_every_rank(task + WORK)) for side in (RAW, ACCEL)
                }
                work.setdefault(task, []).append(added(answers[RAW], answers[ACCEL]))

    return work, hook


def block_work(
    figure: str, group: str, work: list[dict[str, Any]], raw_answers: list[dict[str, Any]], unit: str,
    note: str, **common: Any,
) -> Measurement:  # fmt: skip
    """Return `added_work` of profiled blocks against the median of the hand-written job's timed
    blocks (`raw_answers`, with their "seconds")."""
    raw_seconds = statistics.median(answer["seconds"] for answer in raw_answers)
    where = (
        "rank 0, a collective's time at the rank that waited least; against the median of the "
        "hand-written job's timed blocks"
    )
    return added_work(figure, group, work, [raw_seconds] * len(work), unit, where, note, **common)
