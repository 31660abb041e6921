"""PNG plots of a run, one per figure group: cost vs size where figures carry a size (log-log when
the sizes span decades), else bars per contender with each one's ratio to raw beneath.

matplotlib is optional: `available()` says why plots are skipped when it does not import.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.measurement import ACCEL, ACCELERATE, CONTENDERS, RAW

LABELS = {RAW: "raw PyTorch", ACCEL: "accel", ACCELERATE: "Accelerate"}
COLORS = {RAW: "#555555", ACCEL: "#1f77b4", ACCELERATE: "#ff7f0e"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def available() -> str | None:
    """Return None when matplotlib imports, else why plots are skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError as error:
        return f"matplotlib does not import ({error}); no plots drawn"
    return None


def series_of(record: dict[str, Any]) -> str:
    """Return the line a sized measurement belongs to: its `series`, else its figure name less size words."""
    if record.get("series"):
        return str(record["series"])
    words = [word for word in record["figure"].split() if not re.search(r"\d", word)]
    return " ".join(words) or record["figure"]


def draw(run: dict[str, Any], folder: Path, stem: str) -> list[str]:
    """Draw a PNG per group of `run`'s measured figures into `folder`; return the file names."""
    import matplotlib.pyplot as plt

    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in run["measurements"]:
        if not record.get("skipped") and record["summary"]:
            groups[record["group"]].append(record)
    written = []
    for group, records in groups.items():
        sized = all(record.get("x") is not None for record in records)
        figure = _cost_vs_size(plt, group, records) if sized else _bars(plt, group, records)
        name = f"{stem}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', group)}.png"
        figure.savefig(folder / name, dpi=110, bbox_inches="tight")
        plt.close(figure)
        written.append(name)
    return written


def _unit(records: list[dict[str, Any]]) -> str:
    units = sorted({record["unit"] for record in records})
    return ", ".join(units)


def _cost_vs_size(plt: Any, group: str, records: list[dict[str, Any]]) -> Any:
    figure, axes = plt.subplots(figsize=(7.5, 4.8))
    lines: dict[tuple[str, str], list[tuple[float, dict[str, Any]]]] = defaultdict(list)
    for record in records:
        for contender, cell in record["summary"].items():
            lines[series_of(record), contender].append((float(record["x"]), cell))
    series_names = sorted({series for series, _ in lines})
    for (series, contender), points in sorted(lines.items()):
        points.sort(key=lambda point: point[0])
        xs = [x for x, _ in points]
        medians = [cell["median"] for _, cell in points]
        below = [cell["median"] - cell["low"] for _, cell in points]
        above = [cell["high"] - cell["median"] for _, cell in points]
        label = (
            LABELS.get(contender, contender)
            if len(series_names) == 1
            else f"{series}: {LABELS.get(contender, contender)}"
        )
        axes.errorbar(xs, medians, yerr=[below, above], label=label, color=COLORS.get(contender),
                      marker=MARKERS[series_names.index(series) % len(MARKERS)], capsize=3)  # fmt: skip
    xs = [float(record["x"]) for record in records]
    values = [cell["median"] for record in records for cell in record["summary"].values()]
    if min(xs) > 0 and max(xs) / min(xs) >= 10:
        axes.set_xscale("log")
        if values and min(values) > 0:
            axes.set_yscale("log")
    elif len(set(xs)) <= 8:
        axes.set_xticks(sorted(set(xs)))  # e.g. process counts: no ticks between them
    x_label = records[0].get("x_label") or "size"
    axes.set_xlabel(x_label)
    axes.set_ylabel(_unit(records))
    axes.set_title(f"{group}: {_unit(records)} vs {x_label}")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    return figure


def _bars(plt: Any, group: str, records: list[dict[str, Any]]) -> Any:
    contenders = [name for name in CONTENDERS if any(name in record["summary"] for record in records)]
    with_ratios = any(name != RAW for name in contenders) and RAW in contenders
    size = (max(6.0, 1.1 * len(records) + 2), 7 if with_ratios else 4.5)
    figure, panels = plt.subplots(2 if with_ratios else 1, 1, figsize=size, squeeze=False, sharex=True)
    width = 0.8 / len(contenders)
    positions = range(len(records))
    top = panels[0][0]
    for index, contender in enumerate(contenders):
        offsets = [p + (index - (len(contenders) - 1) / 2) * width for p in positions]
        cells = [record["summary"].get(contender) for record in records]
        medians = [cell["median"] if cell else 0.0 for cell in cells]
        errors = [[cell["median"] - cell["low"] if cell else 0.0 for cell in cells],
                  [cell["high"] - cell["median"] if cell else 0.0 for cell in cells]]  # fmt: skip
        top.bar(offsets, medians, width, yerr=errors, label=LABELS.get(contender, contender),
                color=COLORS.get(contender), capsize=2)  # fmt: skip
    values = [
        cell["median"] for record in records for cell in record["summary"].values() if cell["median"] > 0
    ]
    if values and max(values) / min(values) >= 30:
        top.set_yscale("log")
    top.set_ylabel(_unit(records))
    top.set_title(f"{group}: per contender")
    top.legend(fontsize="small")
    top.grid(True, axis="y", alpha=0.3)
    bottom = panels[-1][0]
    if with_ratios:
        others = [name for name in contenders if name != RAW]
        for index, contender in enumerate(others):
            offsets = [p + (index - (len(others) - 1) / 2) * (0.8 / len(others)) for p in positions]
            ratios = [_ratio_to_raw(record, contender) for record in records]
            bottom.bar(
                offsets,
                ratios,
                0.8 / len(others),
                color=COLORS.get(contender),
                label=LABELS.get(contender, contender),
            )
        shown = [r for record in records for name in others if (r := _ratio_to_raw(record, name)) > 0]
        if shown and max(shown) / min(shown) >= 10:
            bottom.set_yscale("log")
        bottom.axhline(1.0, color="black", linewidth=0.8)
        bottom.set_ylabel("ratio to raw")
        bottom.grid(True, axis="y", alpha=0.3)
    bottom.set_xticks(list(positions))
    bottom.set_xticklabels(
        [record["figure"] for record in records], rotation=30, ha="right", fontsize="small"
    )
    figure.tight_layout()
    return figure


def _ratio_to_raw(record: dict[str, Any], contender: str) -> float:
    cells = record["summary"]
    if contender not in cells or RAW not in cells or not cells[RAW]["median"]:
        return 0.0
    return cells[contender]["median"] / cells[RAW]["median"]
