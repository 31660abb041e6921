"""The results table, as aligned text for the terminal and as Markdown for the README."""

from __future__ import annotations

from typing import Any

from benchmarks.measurement import ACCEL, ACCELERATE, RAW
from benchmarks.stats import CONFIDENCE
from benchmarks.targets import MISSED, UNCHECKED, UNDECIDED

HEADER = ("figure", "raw", "accel", "Accelerate", "accel/raw", "accel/Accelerate", "target")


def number(value: float) -> str:
    """Return `value` with four significant digits, without an exponent for large values."""
    if abs(value) >= 1000:
        return f"{value:.0f}"
    return f"{value:.4g}"


def _cell(summary: dict[str, Any] | None, digits: str | None = None) -> str:
    """Return the median and its spread: for a ratio of paired rounds the interval of the median (and
    its coverage where too few rounds fall short of the usual), so spread reads against the target."""
    if summary is None:
        return "-"
    median = f"{summary['median']:.3f}" if digits == "ratio" else number(summary["median"])
    if summary["rounds"] < 2:
        return median
    interval = summary.get("interval")  # absent from records written before intervals
    if interval is None:
        return f"{median} ±{summary['spread_pct']:.1f}%"
    shortfall = f" ({interval['coverage']:.0%})" if interval["coverage"] < CONFIDENCE else ""
    return f"{median} [{interval['low']:.3f}, {interval['high']:.3f}]{shortfall}"


def _target(record: dict[str, Any]) -> str:
    if not record.get("target"):
        return ""
    status = record.get("target_status") or UNCHECKED
    return f"{status.upper() if status == MISSED else status} ({record['target']})"


def rows(run: dict[str, Any]) -> list[tuple[str, ...]]:
    """Return one row of cells per measurement of `run`, in the order measured."""
    accelerate_absent = ACCELERATE in run.get("absent", {})
    table: list[tuple[str, ...]] = []
    for record in run["measurements"]:
        figure = f"{record['figure']} [{record['unit']}]"
        if record.get("skipped"):
            table.append((figure, f"skipped: {record['skipped']}", "", "", "", "", ""))
            continue
        summary, ratios = record["summary"], record["ratios"]
        accelerate = "absent" if accelerate_absent else _cell(summary.get(ACCELERATE))
        versus_accelerate = (
            "absent" if accelerate_absent else _cell(ratios.get(f"{ACCEL}/{ACCELERATE}"), "ratio")
        )
        table.append(
            (
                figure,
                _cell(summary.get(RAW)),
                _cell(summary.get(ACCEL)),
                accelerate,
                _cell(ratios.get(f"{ACCEL}/{RAW}"), "ratio"),
                versus_accelerate,
                _target(record),
            )
        )
    return table


def text(run: dict[str, Any]) -> str:
    """Return the table as aligned columns, with a line per absent contender and failed figure."""
    body = rows(run)
    widths = [len(cell) for cell in HEADER]
    for row in body:
        # A skipped row's reason runs across the other columns: only its figure sets a width.
        for index, cell in enumerate(row[:1] if _skipped(row) else row):
            widths[index] = max(widths[index], len(cell))
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(HEADER, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    for row in body:
        if _skipped(row):
            lines.append(f"{row[0].ljust(widths[0])}  {row[1]}")
        else:
            lines.append(
                "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            )
    lines.extend(footnotes(run))
    return "\n".join(lines)


def _skipped(row: tuple[str, ...]) -> bool:
    return row[1].startswith("skipped: ")


def markdown(run: dict[str, Any]) -> str:
    """Return the table in Markdown, with the same footnotes as the text table."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    for row in rows(run):
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    notes = footnotes(run)
    if notes:
        lines.append("")
        lines.extend(f"- {note}" for note in notes)
    return "\n".join(lines)


def footnotes(run: dict[str, Any]) -> list[str]:
    """Return the lines that explain the table: absent contenders, failed figures, then the missed
    targets and, apart from them, the undecided ones."""
    notes = [f"{name} absent: {reason}" for name, reason in run.get("absent", {}).items()]
    for name, figure in run.get("figures", {}).items():
        if figure.get("error"):
            notes.append(f"figure {name} failed: {figure['error']}")
    for status in (MISSED, UNDECIDED):
        for record in run["measurements"]:
            if record.get("target_status") == status:
                notes.append(f"target {status}: {record['figure']}: {record['target_detail']}")
    return notes
