"""`python -m benchmarks`: find the figure modules, measure each, then print the table and write the
JSON, the plots and benchmarks/README.md.

A figure that fails is reported (and the run exits 1) without losing the others' results.
"""

from __future__ import annotations

import argparse
import importlib
import math
import pkgutil
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks import machine, plots, probe, readme, report, standing, table
from benchmarks.measurement import ACCEL, ACCELERATE, CONTENDERS, RAW, Measurement, RunOptions

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results"
DEFAULT_README = HERE / "README.md"
DEFAULT_ROUNDS = 5
# The table's order; figure modules not named here follow in alphabetical order.
ORDER = (
    "startup", "training", "engines", "xla", "precision", "loader", "skip", "collectives", "checkpoint",
    "memory",
)  # fmt: skip


def figure_names() -> list[str]:
    """Return the figure modules in benchmarks/figures, in the table's order."""
    import benchmarks.figures

    found = [
        info.name
        for info in pkgutil.iter_modules(benchmarks.figures.__path__)
        if not info.name.startswith("_")
    ]
    return sorted(found, key=lambda name: (ORDER.index(name) if name in ORDER else len(ORDER), name))


def detect_contenders() -> tuple[tuple[str, ...], dict[str, str]]:
    """Return the contenders this environment can measure, and why each missing one is absent.

    Accelerate counts only where it imports (checked in a child process).
    """
    missing = probe.missing_module("accelerate")
    return (CONTENDERS, {}) if missing is None else ((RAW, ACCEL), {ACCELERATE: missing})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0].replace("\n", " ")
    )
    parser.add_argument(
        "--quick", action="store_true", help="one round of tiny inputs per figure (seconds): a smoke test"
    )
    parser.add_argument(
        "--rounds", type=int, help=f"rounds per figure (default {DEFAULT_ROUNDS}; 1 with --quick)"
    )
    parser.add_argument("--only", help="comma-separated figure modules to run (default: all)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="folder of the JSON and plots")
    parser.add_argument("--readme", type=Path, help="README to regenerate (default: benchmarks/README.md "
                        "for the default output, else <output>/README.md)")  # fmt: skip
    parser.add_argument(
        "--readme-only",
        action="store_true",
        help="measure nothing: redraw the latest results' plots and regenerate the README",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="measure the --only figures again into a copy of the latest results in --output: the other "
        "figures keep their rows, each figure its own date, rounds and steal",
    )
    parser.add_argument(
        "--add-rounds",
        action="store_true",
        help="measure --rounds more rounds of the --only figures and pool them with the latest results' "
        "rounds of the same rows in --output (same machine and versions): each round stays paired",
    )
    args = parser.parse_args(argv)
    if args.update and args.add_rounds:
        parser.error("--update measures figures anew, --add-rounds pools with their rounds: choose one")
    for flag, chosen in (("--update", args.update), ("--add-rounds", args.add_rounds)):
        if chosen and (args.only is None or args.quick or args.readme_only):
            parser.error(
                f"{flag} needs --only (the figures to measure again) and no --quick or --readme-only"
            )
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.rounds is None:
        args.rounds = 1 if args.quick else DEFAULT_ROUNDS
    known = figure_names()
    if args.only is not None:
        wanted = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in known]
        if unknown or not wanted:
            parser.error(
                f"--only: unknown figure {', '.join(unknown) or repr(args.only)} (known: {', '.join(known)})"
            )
        args.figures = [name for name in known if name in wanted]
    else:
        args.figures = known
    partial = args.figures != known and not (args.quick or args.update or args.add_rounds or args.readme_only)
    if partial and args.output.resolve() == DEFAULT_OUTPUT.resolve():
        # The newest full results in the main folder are the main README's table: a run of some
        # figures there would become it, and the others' rows would leave the table.
        parser.error(
            f"--only {','.join(args.figures)} into {DEFAULT_OUTPUT.relative_to(HERE.parent)} would make "
            "a run of some figures the main README's table: add --update (the other figures keep their "
            "rows) or name --output (a figure's own folder, e.g. "
            f"benchmarks/results/{args.figures[0]})"
        )
    if args.readme is None:
        same = args.output.resolve() == DEFAULT_OUTPUT.resolve()
        args.readme = DEFAULT_README if same else args.output / "README.md"
    return args


def check_measurements(name: str, measurements: Any) -> list[Measurement]:
    """Return `measurements` if it is what the contract promises; else fail naming the figure and the flaw."""
    if not isinstance(measurements, list):
        raise TypeError(f"measure() returned {type(measurements).__name__}, not a list of Measurement")
    for item in measurements:
        if not isinstance(item, Measurement):
            raise TypeError(f"measure() returned a {type(item).__name__} among its measurements")
        for contender, values in item.samples.items():
            if contender not in CONTENDERS:
                raise ValueError(f"{item.figure!r}: unknown contender {contender!r}")
            if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
                raise ValueError(f"{item.figure!r}: {contender} has a sample that is not a finite number")
    return measurements


def run_figure(name: str, options: RunOptions) -> tuple[list[Measurement], dict[str, Any]]:
    """Return a figure module's measurements and how its run went (seconds, error)."""
    started = time.perf_counter()
    try:
        module = importlib.import_module(f"benchmarks.figures.{name}")
        measurements = check_measurements(name, module.measure(options))
        error = None
    except Exception as failure:  # noqa: BLE001 - one figure's failure must not lose the others
        traceback.print_exc(file=sys.stderr)
        # The last line that says something (a launcher's report ends in a rule of "=").
        lines = [line.strip() for line in str(failure).splitlines() if any(c.isalnum() for c in line)]
        measurements, error = [], f"{type(failure).__name__}: {lines[-1] if lines else ''}"
    return measurements, {"seconds": round(time.perf_counter() - started, 1), "error": error}


def finish(run: dict[str, Any], results_file: Path, readme_path: Path) -> None:
    """Draw the plots beside `results_file`, write it, and regenerate the README from the latest results."""
    results_file.parent.mkdir(parents=True, exist_ok=True)
    draw_plots(run, results_file)
    report.write(run, results_file)
    regenerate_readme(results_file.parent, readme_path)


def draw_plots(run: dict[str, Any], results_file: Path) -> None:
    """Draw `run`'s plots beside `results_file` and list them in `run`, or say why there are none."""
    reason = plots.available()
    if reason is None:
        run["plots"] = plots.draw(run, results_file.parent, results_file.stem)
        run.pop("plots_skipped", None)
    else:
        run["plots"], run["plots_skipped"] = [], reason
        print(f"benchmarks: {reason}", file=sys.stderr)


def regenerate_readme(folder: Path, readme_path: Path, redraw: bool = False) -> None:
    """Write the README from the latest results in `folder` (first redrawing its plots, if asked)."""
    latest = report.latest(folder)
    if latest is None:
        raise SystemExit(f"benchmarks: no results file in {folder} to make {readme_path} from")
    run = report.load(latest)
    if redraw:
        draw_plots(run, latest)
        report.write(run, latest)
    # The main README also says where every target stands across the topical re-runs' folders.
    main = readme_path.resolve() == DEFAULT_README and folder.resolve() == DEFAULT_OUTPUT
    try:
        standings = standing.newest(DEFAULT_OUTPUT) if main else None
    except standing.CausesError as error:
        raise SystemExit(f"benchmarks: {error}") from None
    plots = standing.newest_plots(DEFAULT_OUTPUT, readme_path) if main else None
    readme.write(run, latest, readme_path, standings, plots)
    print(f"benchmarks: {readme_path} regenerated from {latest}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.readme_only:
        regenerate_readme(args.output, args.readme, redraw=True)
        return
    previous = None
    flag = "--update" if args.update else "--add-rounds" if args.add_rounds else None
    if flag is not None:  # read first: a folder without results fails before an hour of measuring
        latest = report.latest(args.output)
        if latest is None:
            raise SystemExit(f"benchmarks: {flag}: no results file in {args.output} to build on")
        previous = report.load(latest)
        missing = [name for name in args.figures if name not in previous["figures"]]
        if args.add_rounds and missing:
            raise SystemExit(
                f"benchmarks: --add-rounds: {latest} has no rounds of {', '.join(missing)} to add to"
            )
    described: dict[str, Any] = machine.describe()
    versions = machine.versions()
    if previous is not None and flag is not None:  # checked before an hour of measuring, not after
        pooled_figures = args.figures if args.add_rounds else ()
        report.check_comparable(previous, {"machine": described, "versions": versions}, flag, pooled_figures)
    contenders, absent = detect_contenders()
    options = RunOptions(quick=args.quick, rounds=args.rounds, contenders=contenders)
    for name, reason in absent.items():
        print(f"benchmarks: {name} absent: {reason}", file=sys.stderr)
    records, figures = [], {}
    run_started = machine.cpu_times()
    for name in args.figures:
        print(f"benchmarks: measuring {name} ...", file=sys.stderr, flush=True)
        figure_started = machine.cpu_times()
        measurements, figures[name] = run_figure(name, options)
        figures[name]["steal_pct"] = machine.steal_percent(figure_started, machine.cpu_times())
        figures[name]["rounds"] = args.rounds
        records += [report.measurement_record(name, measurement, args.quick) for measurement in measurements]
    now = datetime.now(timezone.utc)
    described["steal_pct"] = machine.steal_percent(run_started, machine.cpu_times())
    run = report.run_record(
        date=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        machine=described,
        versions=versions,
        options={
            "quick": args.quick,
            "rounds": args.rounds,
            "only": args.figures if args.only else None,
            "contenders": list(contenders),
        },  # fmt: skip
        absent=absent,
        figures=figures,
        measurements=records,
    )
    for figure in figures.values():
        figure["date"] = run["date"]
    if previous is not None:
        run = report.pooled(previous, run) if args.add_rounds else report.merged(previous, run)
    print(table.text(run))
    results_file = args.output / f"{now:%Y-%m-%d-%H%M%S}-{machine.slug(described)}.json"
    finish(run, results_file, args.readme)
    print(f"benchmarks: results in {results_file}")
    if any(figure["error"] for figure in figures.values()):
        sys.exit(1)
