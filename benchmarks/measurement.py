"""What every head-to-head figure hands the runner: samples per contender, one per round.

A figure module (`benchmarks/figures/<name>.py`) exposes `measure(options: RunOptions) ->
list[Measurement]`. The runner (`python -m benchmarks`) calls each, then reports medians, spreads
and ratios (accel/raw, accel/Accelerate), writes the JSON and draws the plots from these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RAW, ACCEL, ACCELERATE = "raw", "accel", "accelerate"
CONTENDERS = (RAW, ACCEL, ACCELERATE)


@dataclass(frozen=True)
class RunOptions:
    """How much to measure: `quick` runs each figure once on tiny inputs (the test suite's smoke run)."""

    quick: bool
    rounds: int
    # The contenders this run can measure: Accelerate only where `accelerate` imports.
    contenders: tuple[str, ...]


@dataclass
class Measurement:
    """One figure: e.g. "gather latency" at one size, or "MLP fp32 steps/s"."""

    figure: str
    # Plot grouping: figures of one group share a plot (e.g. "collectives", "checkpoint", "training").
    group: str
    unit: str
    higher_is_better: bool
    # contender -> one value per round, rounds interleaved across contenders; a contender not measured
    # is absent.
    samples: dict[str, list[float]] = field(default_factory=dict)
    # For cost-vs-size plots: the size (bytes, n, process count) and what it is.
    x: float | None = None
    x_label: str | None = None
    note: str = ""
    # What accel must reach, checked by the runner (a ratio over paired rounds on its median's 90%
    # interval, anything else on the median): "<lhs><op><number>", where lhs is a
    # contender ("accel<0.1": its median) or a ratio of two ("accel/raw>=0.99", "accel/accelerate<=0.5")
    # and op one of < <= > >=; several joined by ";" must all hold.
    target: str | None = None
    # Line of a cost-vs-size plot this point belongs to (e.g. "gather"); by default the figure name
    # with its size words (those holding a digit) left out.
    series: str | None = None
    # Why nothing was measured (e.g. "no CUDA device"): the figure is listed, not measured.
    skipped: str | None = None
