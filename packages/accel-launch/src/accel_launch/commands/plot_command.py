"""`accel plot`: the metrics of one or more runs side by side (matplotlib, imported only to draw)."""

from __future__ import annotations

import click

from accel_launch.commands.common import CONTEXT, ConfigProblem


@click.command("plot", context_settings=CONTEXT)
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...")
@click.option("-o", "--output", required=True, help="Image file to write (.png, .svg, .pdf, ...).")
@click.option(
    "-m", "--metric", "metrics", multiple=True, help="Draw only this metric (repeatable); default: all."
)
def plot_command(run_dirs: tuple[str, ...], output: str, metrics: tuple[str, ...]) -> None:
    """Draw the metrics of one or more runs side by side: a panel per metric, a line per run.

    RUN_DIR is a run's folder or a folder above runs (a project dir): every folder under it that
    holds the JSON-lines tracker's metrics.jsonl or TensorBoard event files is a run. Needs
    matplotlib (accel-launch's plot extra; without it the error gives the install command);
    TensorBoard logs need tensorboard.
    """
    from pathlib import Path

    from accel_launch.runs.logs import RunLogError, load_runs
    from accel_launch.runs.plot import PlotError, check_matplotlib, check_output, plot_runs

    target = Path(output)
    try:
        check_output(target)
        check_matplotlib()
        runs = load_runs(list(run_dirs))
        drawn = plot_runs(runs, target, list(metrics) or None)
    except (PlotError, RunLogError) as error:
        raise ConfigProblem(str(error)) from None
    click.echo(f"accel plot: {len(drawn)} metric(s) of {len(runs)} run(s) written to {target}")
