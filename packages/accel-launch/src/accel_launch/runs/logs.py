"""Read the scalar metrics of training runs from the files accel's trackers write, for `accel plot`.

A run folder is a folder that directly holds `metrics.jsonl` (the JSON-lines tracker: one
`{"step": ..., "values": {...}}` object per line) or TensorBoard event files
(`events.out.tfevents.*`). A folder given on the command line may be a run folder itself or any
folder above run folders (the project dir, `logging_dir/run_name` below it): every run folder under
it is a run, except folders inside a run folder, which belong to that run (TensorBoard's
`add_scalars` and `add_hparams` write there). When a run folder holds both kinds of logs, only
`metrics.jsonl` is read: it holds every value the tracker was given, and needs nothing installed.

Only numbers are kept (a nested dict of numbers becomes `name/key`, as TensorBoard's `add_scalars`
shows it); strings, lists and booleans are skipped. A JSON line whose step is null is placed at its
position in the file (0, 1, ...). Nothing here imports tensorboard unless a run has only event files.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The JSON-lines tracker's file: accel's tracker writes it under this name, which it imports from here.
JSONL_FILE_NAME = "metrics.jsonl"
EVENT_FILE_PREFIX = "events.out.tfevents."


class RunLogError(ValueError):
    """A folder or log file that cannot be plotted; the message names it."""


@dataclass
class Series:
    """One metric of one run: its steps and values, in the order they were logged."""

    steps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


@dataclass
class Run:
    """The scalar metrics of one run folder, and the name its lines get in a legend."""

    name: str
    folder: Path
    metrics: dict[str, Series] = field(default_factory=dict)

    def add(self, metric: str, step: float, value: float) -> None:
        self.metrics.setdefault(metric, Series())
        self.metrics[metric].steps.append(step)
        self.metrics[metric].values.append(value)


def _holds_logs(filenames: list[str]) -> bool:
    return JSONL_FILE_NAME in filenames or any(name.startswith(EVENT_FILE_PREFIX) for name in filenames)


def find_run_folders(root: Path) -> list[Path]:
    """Return the run folders at or under `root`, in path order (folders inside a run are not runs)."""
    found: list[Path] = []
    for folder, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if _holds_logs(filenames):
            found.append(Path(folder))
            dirnames.clear()
    return found


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_jsonl(path: Path, run: Run) -> None:
    """Add the numeric values of a JSON-lines metrics file to `run`; raise RunLogError at a bad line.

    A last line without its newline is a record the run is still writing (plotting a live run):
    it is left out, not an error.
    """
    with open(path, encoding="utf-8") as file:
        for position, (number, line) in enumerate(enumerate(file, start=1)):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                if not line.endswith("\n"):
                    return
                raise RunLogError(f"{path}:{number}: not valid JSON ({error.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("values"), dict):
                raise RunLogError(f'{path}:{number}: expected an object {{"step": ..., "values": {{...}}}}')
            step = record.get("step")
            x = float(position) if step is None else _number(step)
            if x is None:
                raise RunLogError(f"{path}:{number}: step {step!r} is not a number")
            for name, value in record["values"].items():
                nested = value.items() if isinstance(value, dict) else [(None, value)]
                for key, item in nested:
                    number_value = _number(item)
                    if number_value is not None:
                        run.add(name if key is None else f"{name}/{key}", x, number_value)


def read_tensorboard(folder: Path, run: Run) -> None:
    """Add the scalars of the TensorBoard event files in `folder` and its subfolders to `run`.

    A subfolder is what `add_scalars(tag, {key: ...})` writes as `<tag>_<key>`: its values are named
    `tag/key`. Raises RunLogError when tensorboard is not installed.
    """
    try:
        # By name: tensorboard ships no type information. The package first: it is what may be missing.
        importlib.import_module("tensorboard")
        events: Any = importlib.import_module("tensorboard.backend.event_processing.event_accumulator")
    except ImportError:
        raise RunLogError(
            f"{folder}: holds TensorBoard event files only, and reading them needs tensorboard "
            "(pip install tensorboard)"
        ) from None
    for sub, _, filenames in sorted(os.walk(folder)):
        if not any(name.startswith(EVENT_FILE_PREFIX) for name in filenames):
            continue
        # size_guidance 0: keep every scalar (the default keeps a sample of 10,000 per tag).
        accumulator = events.EventAccumulator(sub, size_guidance={events.SCALARS: 0})
        accumulator.Reload()
        relative = Path(sub).relative_to(folder).as_posix()
        for tag in accumulator.Tags().get("scalars", []):
            name = tag
            if relative != ".":
                prefix = tag.replace("/", "_") + "_"
                key = relative[len(prefix) :] if relative.startswith(prefix) else relative
                name = f"{tag}/{key}"
            for event in accumulator.Scalars(tag):
                run.add(name, float(event.step), float(event.value))


def read_run(folder: Path, name: str) -> Run:
    """Return the run in `folder`: its metrics.jsonl if there is one, else its TensorBoard events."""
    run = Run(name=name, folder=folder)
    jsonl = folder / JSONL_FILE_NAME
    if jsonl.is_file():
        read_jsonl(jsonl, run)
    else:
        read_tensorboard(folder, run)
    return run


def _display_root(given: str) -> str:
    """Return the name of a folder as given: its last part, or the real folder's for `.` or `..`."""
    name = Path(given).name
    return name if name not in ("", ".", "..") else Path(given).resolve().name


def load_runs(folders: list[str]) -> list[Run]:
    """Return the runs under each folder given, in order, with unique names for a legend.

    A run is named after the folder given, with its path below that folder appended; when two runs
    would share a name, the paths as given are used. Raises RunLogError for a missing folder, a
    folder without logs, a folder whose logs hold no numbers, and a bad log line.
    """
    located: list[tuple[Path, str, str]] = []  # run folder, short name, name from the path as given
    seen: set[Path] = set()
    for given in folders:
        root = Path(given)
        if not root.exists():
            raise RunLogError(f"{given}: no such folder")
        if not root.is_dir():
            raise RunLogError(f"{given}: not a folder (give the run's folder, not a file in it)")
        run_folders = find_run_folders(root)
        if not run_folders:
            raise RunLogError(
                f"{given}: no {JSONL_FILE_NAME} or TensorBoard event files ({EVENT_FILE_PREFIX}*) under it"
            )
        for folder in run_folders:
            if folder.resolve() in seen:
                continue
            seen.add(folder.resolve())
            relative = folder.relative_to(root).as_posix()
            short = _display_root(given) if relative == "." else f"{_display_root(given)}/{relative}"
            located.append((folder, short, str(folder)))
    shorts = [short for _, short, _ in located]
    runs: list[Run] = []
    for folder, short, full in located:
        run = read_run(folder, short if shorts.count(short) == 1 else full)
        if run.metrics:
            runs.append(run)
    for given in folders:
        if not any(_is_under(run.folder, Path(given)) for run in runs):
            raise RunLogError(f"{given}: its logs hold no numeric values to plot")
    return runs


def _is_under(folder: Path, root: Path) -> bool:
    return folder.resolve().is_relative_to(root.resolve())
