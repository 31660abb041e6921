"""The results of a run as one JSON-ready record: per figure the samples, medians, spreads, ratios (with
the interval of a paired ratio's median) and whether its target was met; written as
`<output>/<date>-<machine>.json`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from benchmarks import stats, targets
from benchmarks.machine import IDENTITY
from benchmarks.measurement import ACCEL, ACCELERATE, CONTENDERS, RAW, Measurement

RATIOS = ((ACCEL, RAW), (ACCEL, ACCELERATE))
SCHEMA = 1


def measurement_record(module: str, measurement: Measurement, quick: bool = False) -> dict[str, Any]:
    """Return `measurement` with its summaries, ratios and target status added (a quick run's one
    round of tiny inputs checks no target)."""
    record = asdict(measurement)
    record["module"] = module
    summaries = {
        name: summary.as_dict()
        for name in CONTENDERS
        if (summary := stats.summarize(measurement.samples.get(name, []))) is not None
    }
    ratios: dict[str, stats.Summary] = {}
    for numerator, denominator in RATIOS:
        summary = stats.ratio(
            measurement.samples.get(numerator, []), measurement.samples.get(denominator, [])
        )
        if summary is not None:
            ratios[f"{numerator}/{denominator}"] = summary
    record["summary"] = summaries
    record["ratios"] = {key: summary.as_dict() for key, summary in ratios.items()}
    record["target_status"] = record["target_detail"] = None
    if measurement.target and quick:
        record["target_status"], record["target_detail"] = targets.UNCHECKED, "quick run"
    elif measurement.target and not measurement.skipped:
        try:
            status, detail = targets.check(
                measurement.target,
                {name: cell["median"] for name, cell in summaries.items()},
                ratios,
            )
        except targets.TargetError as error:
            status, detail = targets.UNCHECKED, str(error)
        record["target_status"], record["target_detail"] = status, detail
    return record


def run_record(
    *,
    date: str,
    machine: dict[str, Any],
    versions: dict[str, Any],
    options: dict[str, Any],
    absent: dict[str, str],
    figures: dict[str, dict[str, Any]],
    measurements: list[dict[str, Any]],
) -> dict[str, Any]:
    """Return the whole run's record: what the JSON file holds and the README is made from."""
    return {
        "schema": SCHEMA,
        "date": date,
        "machine": machine,
        "versions": versions,
        "options": options,
        "absent": absent,
        "figures": figures,
        "measurements": measurements,
        "plots": [],
    }


def check_comparable(
    previous: dict[str, Any], fresh: dict[str, Any], flag: str, pooled_figures: Iterable[str] = ()
) -> None:
    """Refuse (SystemExit, one line) to combine `fresh` with `previous` unless both were measured in
    full on the same machine with the same versions.

    Rounds are pooled only with rounds of the same CPU: each of `pooled_figures` is compared with
    the machine it was measured on. Results written before the CPU's identity was recorded
    (`IDENTITY`) may be updated (each figure keeps the machine it was measured on) but not pooled:
    nothing shows their rounds ran on this CPU."""
    if previous["options"].get("quick"):
        raise SystemExit(
            f"benchmarks: {flag}: the latest results are a quick run (no measurement): run every figure"
        )
    machines = [
        previous["figures"].get(name, {}).get("machine", previous["machine"]) for name in pooled_figures
    ]
    for measured_on in machines or [previous["machine"]]:
        for key in IDENTITY:
            there, here = measured_on.get(key), fresh["machine"].get(key)
            if there == here or (there is None and flag == "--update"):
                continue
            if there is None:
                raise SystemExit(
                    f"benchmarks: {flag}: the latest results do not record the CPU's {key} "
                    f"(here {here!r}): nothing shows they were measured on this CPU: run every figure"
                )
            raise SystemExit(
                f"benchmarks: {flag}: the latest results were measured on another machine "
                f"({key} {there!r}, here {here!r}): run every figure"
            )
    if previous["versions"] != fresh["versions"]:
        changed = sorted(k for k in {**previous["versions"], **fresh["versions"]}
                         if previous["versions"].get(k) != fresh["versions"].get(k))  # fmt: skip
        raise SystemExit(
            f"benchmarks: {flag}: the latest results were measured with other versions of "
            f"{', '.join(changed)}: run every figure"
        )


def pooled(previous: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """Return `previous` with the rounds `fresh` measured added to the same rows of the same figures.

    Each round pairs its contenders (one job after the other, interleaved), so rounds of two runs on
    the same machine and versions pool into one row whose per-round ratios are all still paired: more
    rounds narrow the interval of the median without mixing unpaired numbers. A row measured
    differently (another group, unit or target), one run lacks, or whose contenders have unequal
    round counts is refused, naming it.
    """
    check_comparable(previous, fresh, "--add-rounds", fresh["figures"])
    measured_again = set(fresh["figures"])
    old_rows = {
        record["figure"]: record
        for record in previous["measurements"]
        if record.get("module") in measured_again
    }
    new_rows = {record["figure"]: record for record in fresh["measurements"]}
    if set(old_rows) != set(new_rows):
        odd = sorted(set(old_rows) ^ set(new_rows))
        raise SystemExit(
            f"benchmarks: --add-rounds: row {odd[0]!r} is in one run only: measure it with --update"
        )
    pooled_rows = {name: _pooled_row(old_rows[name], new_rows[name]) for name in new_rows}
    measurements = [pooled_rows.get(record["figure"], record) if record.get("module") in measured_again
                    else record for record in previous["measurements"]]  # fmt: skip
    figures = dict(previous["figures"])
    for name, figure in fresh["figures"].items():
        before = {"date": previous["date"], "rounds": previous["options"]["rounds"], **figures[name]}
        earlier = [{key: before.get(key) for key in ("date", "rounds", "steal_pct")}]
        figures[name] = {
            **figure,
            "date": fresh["date"],
            "machine": fresh["machine"],
            "rounds": before["rounds"] + figure.get("rounds", fresh["options"]["rounds"]),
            "seconds": round(before.get("seconds", 0.0) + figure["seconds"], 1),
            "pooled_with": before.get("pooled_with", []) + earlier,
        }
    options = {
        **previous["options"],
        "updated": sorted(measured_again | set(previous["options"].get("updated", []))),
    }
    return {**previous, "options": options, "figures": figures, "measurements": measurements, "plots": []}


def _pooled_row(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    name = old["figure"]
    for key in ("group", "unit", "target", "higher_is_better", "x", "skipped"):
        if old.get(key) != new.get(key):
            raise SystemExit(
                f"benchmarks: --add-rounds: row {name!r} was measured with another {key} "
                f"({old.get(key)!r}, now {new.get(key)!r}): measure it with --update"
            )
    for record in (old, new):
        counts = {len(values) for values in record["samples"].values()}
        if len(counts) > 1 or set(record["samples"]) != set(old["samples"]):
            rounds = ", ".join(f"{who} {len(values)}" for who, values in record["samples"].items())
            raise SystemExit(
                f"benchmarks: --add-rounds: row {name!r} has unpaired rounds ({rounds}): "
                f"measure it with --update"
            )
    known = {item.name for item in fields(Measurement)}
    row = {key: value for key, value in old.items() if key in known}
    row["samples"] = {who: old["samples"][who] + new["samples"][who] for who in old["samples"]}
    if new.get("note") != old.get("note"):  # a note may carry figures of its own run (wall clocks)
        rounds = len(next(iter(new["samples"].values()), []))
        row["note"] = f"{new.get('note', '')} (the figures in this note: the last {rounds} rounds)"
    return measurement_record(old.get("module", ""), Measurement(**row))


def merged(previous: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """Return `previous` with the figures `fresh` measured again put in place of their old rows.

    Each figure keeps the date, rounds, steal and machine of the run that measured it, so that a
    figure re-measured on a quieter hour (or a CPU recorded in more detail) says so. Results of
    another machine or other versions are refused: ratios from two machines side by side would
    compare what cannot be compared.
    """
    check_comparable(previous, fresh, "--update")
    measured_again = set(fresh["figures"])
    figures = {}
    for run in (previous, fresh):
        stamp = {"date": run["date"], "rounds": run["options"]["rounds"], "machine": run["machine"]}
        figures.update({name: {**stamp, **figure} for name, figure in run["figures"].items()})
    by_module: dict[str, list[dict[str, Any]]] = {}
    for record in fresh["measurements"]:
        by_module.setdefault(record.get("module", ""), []).append(record)
    measurements: list[dict[str, Any]] = []
    for record in previous["measurements"]:
        module = record.get("module", "")
        if module not in measured_again:
            measurements.append(record)
        elif module in by_module:
            measurements += by_module.pop(module)  # where the old rows stood
    measurements += [record for records in by_module.values() for record in records]
    options = {
        **previous["options"],
        "updated": sorted(measured_again | set(previous["options"].get("updated", []))),
    }
    return {**previous, "options": options, "figures": figures, "measurements": measurements, "plots": []}


def write(record: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")


def load(path: Path) -> dict[str, Any]:
    """Return the record of a results file; a file that is not one fails naming the file."""
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"benchmarks: cannot read results file {path}: {error}") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise SystemExit(f"benchmarks: {path} is not a results file of schema {SCHEMA}")
    quick = bool(record.get("options", {}).get("quick", False))
    measurements = []
    for measured in record.get("measurements", []):
        try:
            measurements.append(rejudged(measured, quick) if predates_intervals(measured) else measured)
        except (TypeError, ValueError, AttributeError) as error:
            figure = measured.get("figure", "?") if isinstance(measured, dict) else repr(measured)[:60]
            raise SystemExit(f"benchmarks: {path}: measurement {figure!r} cannot be read: {error}") from None
    record["measurements"] = measurements
    return record


def predates_intervals(record: dict[str, Any]) -> bool:
    """Return whether `record` was written before ratios carried the interval of their median."""
    return any("interval" not in cell for cell in (record.get("ratios") or {}).values())


def rejudged(record: dict[str, Any], quick: bool) -> dict[str, Any]:
    """Return `record` with its summaries, ratios and verdict derived again from its samples: an older
    record's verdict rested on the median alone, which the README would otherwise repeat."""
    known = {field.name for field in fields(Measurement)}
    measurement = Measurement(**{key: value for key, value in record.items() if key in known})
    return measurement_record(record.get("module", ""), measurement, quick)


def latest(folder: Path) -> Path | None:
    """Return the newest full results file in `folder`, else the newest quick one, else None."""
    found = []
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(record, dict) and record.get("schema") == SCHEMA:
            found.append(
                (not record.get("options", {}).get("quick", False), str(record.get("date", "")), path)
            )
    return max(found)[2] if found else None
