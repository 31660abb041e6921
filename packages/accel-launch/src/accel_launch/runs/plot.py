"""Draw the metrics of runs side by side into an image file: one panel per metric, one line per run.

matplotlib is an optional extra (accel-launch's `plot`) and is imported only when a picture is
drawn. The figure is drawn without pyplot, so no window or GUI backend is ever involved.
"""

from __future__ import annotations

import math
from pathlib import Path

from accel_launch.runs.logs import Run

PANEL_INCHES = (5.0, 3.6)
DPI = 100  # a panel is 500 x 360 pixels
MAX_COLUMNS = 3
SHOW_POINTS_UP_TO = 20
# Printed wherever the user is: the paths are the repository's (`accel` on PyPI is another project).
INSTALL_HINT = (
    "from the repository root: "
    "pip install -c constraints.txt ./packages/accel-state './packages/accel-launch[plot]'"
)


class PlotError(ValueError):
    """A picture that cannot be drawn or written; the message names why."""


def check_output(output: Path) -> None:
    """Raise PlotError when `output` cannot be written: its folder is missing, or it is a folder."""
    folder = output.parent
    if not folder.is_dir():
        raise PlotError(f"{output}: the folder {folder} does not exist")
    if output.is_dir():
        raise PlotError(f"{output}: is a folder; give a file name such as {output / 'plot.png'}")


def check_matplotlib() -> None:
    """Raise PlotError with the install command when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError(f"accel plot needs matplotlib, which is not installed; {INSTALL_HINT}") from None


def metric_names(runs: list[Run], wanted: list[str] | None = None) -> list[str]:
    """Return the metrics to draw: those of `wanted` (in its order), else every metric in first-seen order.

    Raises PlotError for a wanted metric no run has.
    """
    names: list[str] = []
    for run in runs:
        names += [name for name in run.metrics if name not in names]
    if not wanted:
        return names
    missing = [name for name in wanted if name not in names]
    if missing:
        raise PlotError(f"no run has the metric {missing[0]!r}; the runs have: {', '.join(names)}")
    return list(dict.fromkeys(wanted))


def grid(count: int) -> tuple[int, int]:
    """Return (rows, columns) of the panels for `count` metrics: up to MAX_COLUMNS side by side."""
    columns = min(count, MAX_COLUMNS)
    return math.ceil(count / columns), columns


def plot_runs(runs: list[Run], output: Path, metrics: list[str] | None = None) -> list[str]:
    """Draw `runs` into the image file `output` (its format from its suffix, PNG without one); return
    the metrics drawn."""
    check_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    names = metric_names(runs, metrics)
    rows, columns = grid(len(names))
    figure = Figure(
        figsize=(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows), dpi=DPI, layout="constrained"
    )
    axes = figure.subplots(rows, columns, squeeze=False).flatten()
    for ax in axes[1 : len(names)]:
        ax.sharex(axes[0])  # one step range in every panel, so panels line up by step
    # One colour per run in every panel, so a run is recognised across panels.
    colours = [f"C{index % 10}" for index in range(len(runs))]
    for ax, name in zip(axes, names, strict=False):  # axes left over are hidden
        for run, colour in zip(runs, colours, strict=True):
            series = run.metrics.get(name)
            if series is None:
                continue
            # Sparse series (evaluations once an epoch, a single value) show their points.
            marker = "o" if len(series.steps) <= SHOW_POINTS_UP_TO else None
            ax.plot(
                series.steps,
                series.values,
                color=colour,
                marker=marker,
                markersize=4,
                linewidth=1.5,
                label=run.name,
            )
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    try:
        # An explicit format: without one, matplotlib would add ".png" to a name that has no suffix.
        figure.savefig(output, dpi=DPI, format=output.suffix[1:].lower() or "png")
    except (ValueError, OSError) as error:
        raise PlotError(f"{output}: cannot write the picture ({error})") from None
    return names
