"""Medians, spreads and ratios of a measurement's rounds: what each cell of the table shows."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Summary:
    """One cell: the median of the rounds and how far they strayed (half the range, in % of the median)."""

    median: float
    low: float
    high: float
    spread_pct: float
    rounds: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarize(values: list[float]) -> Summary | None:
    """Return the summary of `values`, or None where there is nothing to summarize."""
    if not values:
        return None
    median = statistics.median(values)
    low, high = min(values), max(values)
    spread = (high - low) / 2 / abs(median) * 100 if median else 0.0
    return Summary(median, low, high, spread, len(values))


def ratio(numerator: list[float], denominator: list[float]) -> Summary | None:
    """Return the summary of numerator/denominator.

    Rounds measured side by side are compared within their round (drift between rounds cancels);
    samples of unequal counts fall back to the ratio of the medians.
    """
    if not numerator or not denominator:
        return None
    if len(numerator) == len(denominator) and all(denominator):
        return summarize([n / d for n, d in zip(numerator, denominator, strict=True)])
    base = statistics.median(denominator)
    if not base:
        return None
    value = statistics.median(numerator) / base
    return Summary(value, value, value, 0.0, min(len(numerator), len(denominator)))
