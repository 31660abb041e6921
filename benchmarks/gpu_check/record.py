"""The GPU check's record: one result per step (commands, seconds, status, numbers), written as JSON and
as markdown (a table of the steps, then each step's details)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASSED, FAILED, SKIPPED, INCOMPLETE = "passed", "failed", "skipped", "incomplete"
SCHEMA = 1
JSON_NAME, MARKDOWN_NAME = "gpu_check.json", "gpu_check.md"


@dataclass
class StepResult:
    """What one step did: `status` is passed, failed or skipped, `reason` says why when not passed."""

    name: str
    title: str
    status: str = PASSED
    seconds: float = 0.0
    commands: list[str] = field(default_factory=list)
    reason: str = ""
    summary: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    # What a reader needs to read the numbers right (a tolerance's reason, what a figure cannot do).
    notes: list[str] = field(default_factory=list)
    # Rows of the step's detail table in the markdown (one dict per row, same keys).
    rows: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, reason: str) -> None:
        """Mark the step failed, keeping every reason given."""
        self.status = FAILED
        self.reason = f"{self.reason}; {reason}" if self.reason else reason

    def skip(self, reason: str) -> None:
        if self.status != FAILED:
            self.status, self.reason = SKIPPED, reason


def run_record(header: dict[str, Any], steps: list[StepResult], pending: int = 0) -> dict[str, Any]:
    """Return the whole check as one JSON-ready record; its status is failed if any step failed, and
    incomplete while `pending` steps have yet to run (the record written after each step)."""
    failed = [step.name for step in steps if step.status == FAILED]
    return {
        "schema": SCHEMA,
        **header,
        "status": FAILED if failed else INCOMPLETE if pending else PASSED,
        "failed_steps": failed,
        "pending_steps": pending,
        "steps": [asdict(step) for step in steps],
    }


def cell(value: Any) -> str:
    """Return `value` as a markdown table cell: numbers to 4 significant digits, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]]) -> list[str]:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column)) for column in columns) + " |" for row in rows]
    return lines


def markdown(record: dict[str, Any]) -> str:
    """Return the check as markdown: the machine, one line per step, then each step's details."""
    title = (
        "GPU check (dry run on the CPU: tiny sizes, not a measurement)" if record["dry_run"] else "GPU check"
    )
    machine = record["machine"]
    lines = [
        f"# {title}",
        "",
        f"- run {record['date']} on `{machine['hostname']}`: {machine['device']}; "
        + ", ".join(f"{name} {version or 'not installed'}" for name, version in record["versions"].items()),
        f"- command: `{record['command']}`",
        f"- result: **{record['status']}** in {record['seconds']:.0f} s"
        + (f" (failed: {', '.join(record['failed_steps'])})" if record["failed_steps"] else "")
        + (f"; {record['pending_steps']} steps not run yet" if record.get("pending_steps") else ""),
        "",
    ]
    overview = [
        {
            "step": f"{index}. {step['title']}",
            "status": step["status"] + (f": {step['reason']}" if step["reason"] else ""),
            "seconds": round(step["seconds"], 1),
            "result": step["summary"],
        }
        for index, step in enumerate(record["steps"])
    ]
    lines += table(overview) + [""]
    for index, step in enumerate(record["steps"]):
        lines += [f"## {index}. {step['title']}", ""]
        lines += [f"- `{command}`" for command in step["commands"]] or ["- (no command run)"]
        lines += [f"- {note}" for note in step["notes"]]
        lines.append("")
        if step["rows"]:
            lines += table(step["rows"]) + [""]
    return "\n".join(lines)


def write(record: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """Write the JSON and the markdown into `folder`; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    as_json, as_markdown = folder / JSON_NAME, folder / MARKDOWN_NAME
    as_json.write_text(json.dumps(record, indent=1) + "\n")
    as_markdown.write_text(markdown(record) + "\n")
    return as_json, as_markdown
