"""Where every target stands: the newest measurement of each figure that declares a target, taken
from the latest results of every folder under `results/` (the full run's and the topical re-runs'),
and, for each target that is not met, what was measured of why and what would close it
(`causes.toml`, written by hand from profiles; the verdict tests keep it in step with the results).
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any

import tomllib

from benchmarks import machine, report, targets

CAUSES = Path(__file__).resolve().parent / "causes.toml"


@dataclasses.dataclass(frozen=True)
class Standing:
    """A target's newest verdict, where it was measured, and (when not met) why."""

    figure: str
    target: str
    status: str
    detail: str  # each clause's median, and a paired ratio's interval
    wrong_side: bool  # a clause's median is on the wrong side of its bound
    date: str
    rounds: int | None
    cpu: str
    results: Path
    rounds_needed: int | None = None  # for an undecided one-ratio target: rounds that would decide it
    cause: str | None = None
    needs: str | None = None

    @property
    def leans_missed(self) -> bool:
        """Whether the verdict is missed, or undecided with a median on the wrong side of its bound."""
        return self.status == targets.MISSED or (self.status == targets.UNDECIDED and self.wrong_side)


def newest(root: Path, causes_file: Path = CAUSES) -> list[Standing]:
    """Return the newest verdict of each target measured under `root`, in the order first met (the
    folders in name order, `root` itself first), each with its cause from `causes_file`."""
    found: dict[str, Standing] = {}
    for folder in [root, *sorted(path for path in root.iterdir() if path.is_dir())]:
        latest = report.latest(folder)
        if latest is None:
            continue
        run = report.load(latest)
        if run["options"].get("quick"):
            continue
        for record in run["measurements"]:
            if not record.get("target") or record.get("skipped"):
                continue
            figure = run["figures"].get(record.get("module", ""), {})
            detail, wrong_side = _measured(record)
            standing = Standing(
                figure=record["figure"],
                target=record["target"],
                status=record.get("target_status") or targets.UNCHECKED,
                detail=detail,
                wrong_side=wrong_side,
                date=figure.get("date", run["date"]),
                rounds=figure.get("rounds", run["options"].get("rounds")),
                cpu=machine.label(figure.get("machine", run["machine"])),
                results=latest,
                rounds_needed=rounds_to_decide(record),
            )
            known = found.get(standing.figure)
            if known is None or known.date < standing.date:
                found[standing.figure] = standing
    causes = read_causes(causes_file)
    return [
        dataclasses.replace(standing, cause=causes[name]["cause"], needs=causes[name]["needs"])
        if name in causes
        else standing
        for name, standing in found.items()
    ]


def _measured(record: dict[str, Any]) -> tuple[str, bool]:
    """Return each clause's value (and the interval of a paired ratio's median), and whether one of
    them has its median on the wrong side of its bound."""
    shown, wrong = [], False
    try:
        clauses = targets.parse(record["target"])
    except targets.TargetError:  # judged "not checked" when recorded; its detail says why
        return record.get("target_detail") or "", False
    for lhs, divisor, op, bound in clauses:
        key = f"{lhs}/{divisor}" if divisor else lhs
        summary = (record.get("ratios") or {}).get(key) if divisor else (record.get("summary") or {}).get(lhs)
        if summary is None:
            shown.append(f"{key} not measured")
            continue
        interval = summary.get("interval") if divisor else None
        within = f" [{interval['low']:.3g}, {interval['high']:.3g}]" if interval else ""
        shown.append(f"{key} {summary['median']:.3g}{within}")
        wrong = wrong or not targets.holds(op, summary["median"], bound)
    return "; ".join(shown), wrong


def rounds_to_decide(record: dict[str, Any]) -> int | None:
    """Estimate the rounds that would decide an undecided one-ratio target at the spread measured
    (the interval narrows as 1/sqrt(rounds)); None where that does not apply."""
    if record.get("target_status") != targets.UNDECIDED:
        return None
    clauses = targets.parse(record["target"])
    if len(clauses) != 1 or clauses[0][1] is None:
        return None
    lhs, divisor, _, bound = clauses[0]
    summary: dict[str, Any] = (record.get("ratios") or {}).get(f"{lhs}/{divisor}") or {}
    rounds, interval, median = summary.get("rounds"), summary.get("interval"), summary.get("median")
    if not interval or not rounds or median is None or median == bound:
        return None
    reach = max(abs(interval["low"] - median), abs(interval["high"] - median))
    return math.ceil(rounds * (reach / abs(median - bound)) ** 2)


class CausesError(ValueError):
    """causes.toml is not a list of [[cause]] tables with figures, why and needs."""


def read_causes(path: Path = CAUSES) -> dict[str, dict[str, str]]:
    """Return figure -> {"cause": why, "needs": what would close it}, from `path`'s [[cause]] tables."""
    try:
        tables = tomllib.loads(path.read_text()).get("cause", [])
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise CausesError(f"{path}: {error}") from None
    causes: dict[str, dict[str, str]] = {}
    for index, table in enumerate(tables):
        figures, why, needs = table.get("figures"), table.get("why"), table.get("needs")
        if not (isinstance(figures, list) and figures and isinstance(why, str) and isinstance(needs, str)):
            raise CausesError(f"{path}: cause {index + 1} needs figures (a list), why and needs (text)")
        for figure in figures:
            if figure in causes:
                raise CausesError(f"{path}: figure {figure!r} has two causes")
            causes[figure] = {"cause": " ".join(why.split()), "needs": " ".join(needs.split())}
    return causes


def newest_plots(root: Path, readme: Path) -> list[str]:
    """Return a line per folder under `root` whose latest results have plots: its date, rounds, figures
    and a link to each plot (the scale curves among them), relative to `readme`."""
    lines = []
    for folder in sorted(path for path in root.iterdir() if path.is_dir()):
        latest = report.latest(folder)
        if latest is None:
            continue
        run = report.load(latest)
        if run["options"].get("quick") or not run.get("plots"):
            continue
        links = ", ".join(
            f"[{Path(name).stem.removeprefix(latest.stem + '-')}]"
            f"({os.path.relpath(latest.parent / name, readme.parent)})"
            for name in run["plots"]
        )
        # Figures measured again (--update) or given more rounds (--add-rounds) carry their own count.
        counts = sorted(
            {figure.get("rounds", run["options"]["rounds"]) for figure in run["figures"].values()}
        ) or [run["options"]["rounds"]]
        rounds = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        lines.append(f"- `{folder.name}/` ({run['date'][:10]}, {rounds} rounds): {links}")
    return lines


def markdown(standings: list[Standing], readme: Path, plots: list[str] | None = None) -> list[str]:
    """Return the README's section: one row per target, its newest verdict and, when not met, why."""
    if not standings:
        return []
    met = sum(standing.status == targets.MET for standing in standings)
    lines = [
        "## Where every target stands",
        "",
        f"The newest measurement of each target under `results/` ({met} of {len(standings)} met). A target "
        "not met says what was measured of its cause and what would close it (`causes.toml`).",
        "",
        "| figure | verdict | measured | why not met; what would close it |",
        "| --- | --- | --- | --- |",
    ]
    for standing in standings:
        where = os.path.relpath(standing.results, readme.parent)
        verdict = standing.status.upper() if standing.status == targets.MISSED else standing.status
        why = f"{standing.cause} **Needs:** {standing.needs}" if standing.cause else _noise(standing)
        cells = (
            standing.figure,
            f"{verdict} ({standing.target}): {standing.detail}",
            f"[{standing.date[:10]}]({where}), {standing.rounds} rounds, {standing.cpu}",
            why,
        )
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines.append("")
    if plots:
        lines += ["The newest plots of each folder (scale curves: `launch-scale`, `training-scale`, "
                  "`collectives`, `checkpoint`):", "", *plots, ""]  # fmt: skip
    return lines


def _noise(standing: Standing) -> str:
    """Say what would decide an undecided target that has no cause of its own: more rounds."""
    if standing.status != targets.UNDECIDED:
        return ""
    if standing.rounds_needed is None:
        return "The interval straddles the bound: more rounds or a quieter machine."
    return (
        f"The interval straddles the bound: about {standing.rounds_needed} rounds at this spread would "
        "decide it, or a quieter machine."
    )
