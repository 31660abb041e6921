"""Medians, spreads and ratios of a measurement's rounds: what each cell of the table shows, and how
sure a paired ratio's median is (what a target's verdict rests on)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any

# The coverage a ratio's interval must reach before a verdict rests on it.
CONFIDENCE = 0.9


@dataclass(frozen=True)
class Interval:
    """Where the true median lies, from order statistics: `coverage` is the chance it holds it."""

    low: float
    high: float
    coverage: float


@dataclass(frozen=True)
class Summary:
    """One cell: the median of the rounds and how far they strayed (half the range, in % of the median);
    a ratio of paired rounds also carries the interval of its median."""

    median: float
    low: float
    high: float
    spread_pct: float
    rounds: int
    interval: Interval | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(values: list[float]) -> Summary | None:
    """Return the summary of `values`, or None where there is nothing to summarize."""
    if not values:
        return None
    median = statistics.median(values)
    low, high = min(values), max(values)
    spread = (high - low) / 2 / abs(median) * 100 if median else 0.0
    return Summary(median, low, high, spread, len(values))


def coverage(n: int, k: int) -> float:
    """Return the chance that the k-th smallest and k-th largest of n values hold their median.

    Each value falls below the median with probability 1/2, whatever the distribution, so the pair
    misses it only when k-1 or fewer fall on one side: 1 - 2 * P(Binomial(n, 1/2) <= k-1).
    """
    below = sum(math.comb(n, j) for j in range(k))
    return 1 - 2 * below / 2**n


def order_statistic(n: int, confidence: float = CONFIDENCE) -> int:
    """Return the k of the narrowest pair x(k), x(n+1-k) that covers the median with `confidence`;
    1 (the full range) where n values are too few for any pair to reach it."""
    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(n, k + 1) >= confidence:
        k += 1
    return k


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> Interval | None:
    """Return the distribution-free interval of the median of `values` and the coverage it reaches
    (below `confidence` only when too few values allow no better than their full range)."""
    if not values:
        return None
    ordered = sorted(values)
    k = order_statistic(len(ordered), confidence)
    return Interval(ordered[k - 1], ordered[-k], coverage(len(ordered), k))


def ratio(numerator: list[float], denominator: list[float]) -> Summary | None:
    """Return the summary of numerator/denominator.

    Rounds measured side by side are compared within their round (drift between rounds cancels), and
    the median of those ratios carries its interval; samples of unequal counts fall back to the ratio
    of the medians, which has none.
    """
    if not numerator or not denominator:
        return None
    if len(numerator) == len(denominator) and all(denominator):
        ratios = [n / d for n, d in zip(numerator, denominator, strict=True)]
        summary = summarize(ratios)
        return summary and replace(summary, interval=median_interval(ratios))
    base = statistics.median(denominator)
    if not base:
        return None
    value = statistics.median(numerator) / base
    return Summary(value, value, value, 0.0, min(len(numerator), len(denominator)))
