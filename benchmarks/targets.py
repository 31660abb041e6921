"""The targets a figure declares ("accel/raw>=0.99", "accel<0.1"), parsed and checked against the medians."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable

from benchmarks.measurement import CONTENDERS

MET, MISSED, UNCHECKED = "met", "missed", "not checked"

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


def check(target: str, medians: dict[str, float], ratios: dict[str, float]) -> tuple[str, str]:
    """Return (status, detail): met only when every clause holds; not checked when a value is missing.

    `medians` maps a contender to its median, `ratios` maps "a/b" to the ratio of a to b.
    """
    details, status = [], MET
    for lhs, divisor, op, bound in parse(target):
        key = f"{lhs}/{divisor}" if divisor else lhs
        value = ratios.get(key) if divisor else medians.get(lhs)
        if value is None:
            details.append(f"{key}: not measured")
            if status == MET:
                status = UNCHECKED
            continue
        holds = _OPERATORS[op](value, bound)
        details.append(
            f"{key} = {value:.3g} {op} {bound:g}" if holds else f"{key} = {value:.3g}, not {op} {bound:g}"
        )
        if not holds:
            status = MISSED
    return status, "; ".join(details)
