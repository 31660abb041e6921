"""The launcher's side of the hang diagnosis: turn the ranks' reports into one text a person can act on.

Each rank's report (accel_state.process_group.diagnosis) says which collective it is in, if any
(operation, sequence number on that rank, call site), its last collectives, and where its main
thread is (the innermost frame of the script, outside accel and torch). Collectives are matched
by sequence number: the ranks inside the furthest collective wait for the others, and a rank whose
sequence is behind (in the script's own code, in an earlier collective) or that died is the one
that stalls the job, named first. Ranks inside different collectives under the same number called
them in different orders. Pure functions of the reports: tested without processes.

`python -m accel_launch.launch.diagnosis FOLDER` prints the diagnosis of the reports in a folder:
for jobs started without `accel launch` (plain torchrun) whose ranks were given ACCEL_DIAGNOSIS_DIR
and asked for their reports with SIGUSR1 by hand (see docs/troubleshooting.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_DETAIL_COLLECTIVES = 3  # last collectives shown per rank in the text (the JSON has all of them)


@dataclass
class Diagnosis:
    """The text printed for a person and the data written as JSON."""

    lines: list[str]
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def read_report(path: str) -> dict[str, Any] | None:
    """Return the report in `path`, or None when there is none (or it is not whole yet)."""
    try:
        with open(path, encoding="utf-8") as file:
            report = json.load(file)
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def _short(path: str) -> str:
    return os.path.basename(path) or path


def _where(report: Mapping[str, Any]) -> str:
    where = report.get("where")
    if not where:
        return "outside the script's code (every frame of its main thread is accel's or torch's)"
    code = f": {where['code'].rstrip(':')}" if where.get("code") else ""  # a `for ...:` line reads on
    torch_op = report.get("torch_collective")
    inside = f" (inside torch.distributed's {torch_op})" if torch_op and not report.get("current") else ""
    return f"{_short(where['file'])}:{where['line']} in {where['function']}{code}{inside}"


def _label(entry: Mapping[str, Any]) -> str:
    return f"{entry['operation']} #{entry['sequence']} at {_short(entry['file'])}:{entry['line']}"


def _exit_text(code: int | None) -> str:
    if code is None:
        return "it is still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _failed(report: Mapping[str, Any]) -> bool:
    return bool(report.get("error"))


def diagnose(
    reports: Mapping[int, Mapping[str, Any] | None],
    exits: Mapping[int, int | None],
    reason: str,
    elsewhere: Collection[int] = (),
) -> Diagnosis:
    """Return the diagnosis of the ranks' `reports` (None: no report) given their `exits` (None: alive).

    `reason` says what triggered it ("rank 0 failed", "no rank made progress for 60 s");
    `elsewhere`: ranks on another machine, whose launcher sent no report.
    """
    ranks = sorted(set(reports) | set(exits))
    in_collective = {r: rep["current"] for r, rep in reports.items() if rep and rep.get("current")}
    front = max((entry["sequence"] for entry in in_collective.values()), default=None)
    front_entries = [entry for entry in in_collective.values() if entry["sequence"] == front]
    front_ops = sorted({entry["operation"] for entry in front_entries})
    target = f"{front_ops[0]} #{front}" if len(front_ops) == 1 else f"collective #{front}"

    culprits: list[str] = []
    groups: dict[tuple[Any, ...], list[int]] = {}  # ranks inside the furthest collective, by call
    failed: dict[tuple[Any, ...], list[bool]] = {}
    for rank in ranks:
        report = reports.get(rank)
        code = exits.get(rank)
        if report is None:
            if rank in elsewhere:
                culprits.append(
                    f"rank {rank} runs on another machine, whose launcher sent no report: "
                    "see that machine's output"
                )
            elif code is not None:
                culprits.append(
                    f"rank {rank} died ({_exit_text(code)}) without a report: where it was is unknown"
                )
            else:
                never = f" (it never reached {target})" if front else ""
                culprits.append(
                    f"rank {rank} did not answer: its Python is stuck holding the GIL, or it set "
                    f"nothing up yet{never}"
                )
            continue
        current = report.get("current")
        if front is not None and current is not None and current["sequence"] == front:
            key = (current["operation"], current["sequence"], current["file"], current["line"])
            groups.setdefault(key, []).append(rank)
            failed.setdefault(key, []).append(_failed(report))
            continue
        dead = f" ({_exit_text(code)})" if code is not None else ""
        if current is not None:
            where = f"it is in {_label(current)}"
        elif report.get("error"):
            where = f"it raised {report['error']} at {_where(report)}"  # an uncaught exception
        else:
            where = f"it is in {_where(report)}"
        if front is not None:
            culprits.append(f"rank {rank}{dead} never reached {target}: {where}")
        else:
            culprits.append(f"rank {rank}{dead} is in no collective: {where}")
    waiting = []
    # Fewest first: where ranks are in different collectives, the odd one out leads.
    for key, members in sorted(groups.items(), key=lambda item: (len(item[1]), item[1])):
        operation, sequence, file, line = key
        who = f"rank {members[0]}" if len(members) == 1 else "ranks " + ", ".join(map(str, members))
        label = f"{operation} #{sequence} at {_short(file)}:{line}"
        if len(groups) > 1:
            waiting.append(f"{who} {'is' if len(members) == 1 else 'are'} in {label}")
        else:
            tense = "waited" if all(failed[key]) else ("waits" if len(members) == 1 else "wait")
            waiting.append(f"{who} {tense} in {label}")
    if len(groups) > 1:
        headline = "ranks called different collectives as #" + f"{front}: " + " while ".join(waiting)
        headline = "; ".join([headline, *culprits])
    else:
        headline = "; ".join(culprits + waiting)
    lines = [f"diagnosis ({reason}): {headline}"]
    for rank in ranks:
        lines.extend(_detail(rank, reports.get(rank), exits.get(rank), elsewhere))
    data = {
        "reason": reason,
        "summary": headline,
        "ranks": {str(rank): {"exit": exits.get(rank), "report": reports.get(rank)} for rank in ranks},
    }
    return Diagnosis(lines, data)


def _detail(
    rank: int, report: Mapping[str, Any] | None, code: int | None, elsewhere: Collection[int] = ()
) -> list[str]:
    status = "" if code is None else f" ({_exit_text(code)})"
    if report is None:
        return [f"  rank {rank}{status}: no report{' (another machine)' if rank in elsewhere else ''}"]
    current = report.get("current")
    done = [entry for entry in report.get("collectives", []) if current is None or entry != current]
    head = f"  rank {rank}{status}, pid {report.get('pid')}: at {_where(report)}"
    lines = [head]
    if current is not None:
        inputs = f" ({current['input']})" if current.get("input") else ""
        lines.append(f"    in {_label(current)}{inputs}")
    if report.get("error"):
        lines.append(f"    {report['error']}")
    if done:
        shown = ", ".join(_label(entry) for entry in done[-_DETAIL_COLLECTIVES:])
        lines.append(f"    last collectives: {shown}")
    else:
        lines.append("    no collective done yet")
    return lines


def diagnose_folder(folder: str) -> Diagnosis | None:
    """Return the diagnosis of the reports (`rank<R>.json`) in `folder`, or None when it holds none."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    reports: dict[int, Mapping[str, Any] | None] = {}
    for name in names:
        match = re.fullmatch(r"rank(\d+)\.(json|pid)", name)
        if match:
            rank = int(match.group(1))
            report = read_report(os.path.join(folder, name)) if match.group(2) == "json" else None
            reports[rank] = report or reports.get(rank)
    if not any(reports.values()):
        return None
    return diagnose(reports, {}, f"the reports in {folder}")


def main(argv: Sequence[str] | None = None) -> int:
    """Print the diagnosis of the reports in the folder named by `argv`; return the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if len(arguments) != 1:
        print("usage: python -m accel_launch.launch.diagnosis FOLDER", file=sys.stderr)
        return 2
    result = diagnose_folder(arguments[0])
    if result is None:
        print(f"no rank report (rank<R>.json) in {arguments[0]}", file=sys.stderr)
        return 1
    print(result.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
