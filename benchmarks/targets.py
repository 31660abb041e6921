"""The targets a figure declares ("accel/raw>=0.99", "accel<0.1"), parsed and checked: a ratio of
paired rounds against the interval of its median (so noise reads as undecided, not as a verdict), a
contender or a ratio without paired rounds against its median."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

from benchmarks.measurement import CONTENDERS
from benchmarks.stats import Interval, Summary

MET, MISSED, UNDECIDED, UNCHECKED = "met", "missed", "undecided", "not checked"
# A target's status is its worst clause's: a missed clause outweighs an undecided one, and so on.
_SEVERITY = (MET, UNCHECKED, UNDECIDED, MISSED)

_OPERATORS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    ">=": operator.ge,
    "<": operator.lt,
    ">": operator.gt,
}
_CLAUSE = re.compile(r"^\s*([a-z]+)(?:\s*/\s*([a-z]+))?\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*$")


class TargetError(ValueError):
    """A target string does not follow "<contender>[/<contender>]<op><number>"."""


def parse(target: str) -> list[tuple[str, str | None, str, float]]:
    """Return the clauses of `target`: (contender, divisor contender or None, operator, bound)."""
    clauses = []
    for text in target.split(";"):
        match = _CLAUSE.match(text)
        if not match:
            raise TargetError(
                f"target {target!r}: {text.strip()!r} is not '<contender>[/<contender>]<op><number>'"
            )
        lhs, divisor, op, bound = match.groups()
        for name in (lhs, divisor):
            if name is not None and name not in CONTENDERS:
                raise TargetError(
                    f"target {target!r}: unknown contender {name!r} (known: {', '.join(CONTENDERS)})"
                )
        try:
            clauses.append((lhs, divisor, op, float(bound)))
        except ValueError:
            raise TargetError(f"target {target!r}: {bound!r} is not a number") from None
    return clauses


def check(target: str, medians: dict[str, float], ratios: dict[str, Summary]) -> tuple[str, str]:
    """Return (status, detail): met only when every clause holds; the worst clause's status otherwise.

    `medians` maps a contender to its median, `ratios` maps "a/b" to the summary of the ratio of a to b.
    """
    details, status = [], MET
    for lhs, divisor, op, bound in parse(target):
        key = f"{lhs}/{divisor}" if divisor else lhs
        if divisor:
            summary = ratios.get(key)
            value, interval = (summary.median, summary.interval) if summary is not None else (None, None)
        else:
            value, interval = medians.get(lhs), None
        if value is None:
            clause, detail = UNCHECKED, f"{key}: not measured"
        elif interval is None:
            clause, detail = _median_verdict(key, value, op, bound)
        else:
            clause, detail = _interval_verdict(key, value, interval, op, bound)
        details.append(detail)
        status = max(status, clause, key=_SEVERITY.index)
    return status, "; ".join(details)


def holds(op: str, value: float, bound: float) -> bool:
    """Return whether `value op bound` holds ("<=", ">=", "<", ">")."""
    return _OPERATORS[op](value, bound)


def _median_verdict(key: str, value: float, op: str, bound: float) -> tuple[str, str]:
    """Judge a clause on the median alone: what a single contender or an unpaired ratio offers."""
    if _OPERATORS[op](value, bound):
        return MET, f"{key} = {value:.3g} {op} {bound:g}"
    return MISSED, f"{key} = {value:.3g}, not {op} {bound:g}"


def _interval_verdict(key: str, value: float, interval: Interval, op: str, bound: float) -> tuple[str, str]:
    """Judge a clause on the whole interval of the median: met or missed only where all of it agrees."""
    holds = _OPERATORS[op]
    within = f"{interval.coverage:.0%} interval {interval.low:.3g}-{interval.high:.3g}"
    low_holds, high_holds = holds(interval.low, bound), holds(interval.high, bound)
    if low_holds and high_holds:
        return MET, f"{key} = {value:.3g} {op} {bound:g} across its {within}"
    if not low_holds and not high_holds:
        return MISSED, f"{key} = {value:.3g}, not {op} {bound:g} across its {within}"
    return (
        UNDECIDED,
        f"{key} = {value:.3g} ({within}) straddles {bound:g}: more rounds or a quieter machine needed",
    )
