"""How the GPU check runs its commands: each in a fresh process (its own process group) from the
repository root, with our packages and their entry points on PYTHONPATH, until its deadline.

A command past its deadline is interrupted (SIGINT to its process group, so that the benchmarks'
runner stops its jobs), then killed. Its command line, exit status and output go to
logs/<name>.log in the output folder; one-shot jobs answer through `benchmarks.jobs.emit`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import launchers
from benchmarks.gpu_check.record import StepResult
from benchmarks.jobs import MARK

REPO_ROOT = launchers.REPO_ROOT
# A job's log name -> (launcher, arguments of gpu_check_job.py).
Specs = dict[str, tuple[list[str], list[str]]]


@dataclass
class Run:
    """The check's settings and where it writes."""

    dry_run: bool
    output: Path
    metadata_folder: Path

    def env(self) -> dict[str, str]:
        """Return the environment of every step's command: the benchmarks' child env, our metadata."""
        env = launchers.child_env()
        env["PYTHONPATH"] = os.pathsep.join([str(self.metadata_folder), env["PYTHONPATH"]])
        return env


class StepError(RuntimeError):
    """A step's command failed or timed out; the message says which and the last line it wrote."""


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


def shown(command: list[str]) -> str:
    """Return `command` as a shell line, with this interpreter as `python` and paths repo-relative."""
    parts = ["python" if part == sys.executable else part for part in command]
    root = f"{REPO_ROOT}{os.sep}"
    return shlex.join(part.replace(root, "") for part in parts)


def start(
    run: Run, result: StepResult, command: list[str], env: dict[str, str] | None = None
) -> subprocess.Popen:
    result.commands.append(shown(command))
    return subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=env or run.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(run: Run, process: subprocess.Popen, log: str, deadline: float) -> Done:
    """Wait for `process` until `deadline` (then interrupt it, then kill it); log and return its output."""
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        stdout, stderr = stop(process)
    logs = run.output / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    command = " ".join(map(str, process.args))  # type: ignore[arg-type]
    text = f"$ {command}\nexit {process.returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n"
    (logs / f"{log}.log").write_text(text)
    return Done(process.returncode, stdout or "", stderr or "", timed_out)


def stop(process: subprocess.Popen) -> tuple[str, str]:
    """Interrupt `process`'s group, kill it if it has not ended 20 s later; return its output."""
    for sent in (signal.SIGINT, signal.SIGKILL):
        try:
            os.killpg(process.pid, sent)
        except ProcessLookupError:
            break
        try:
            return process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            continue
    return process.communicate()


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if any(c.isalnum() for c in line)]
    return lines[-1] if lines else "no output"


def answer(done: Done, log: str, deadline_s: float) -> dict[str, Any]:
    """Return the JSON a job emitted, or raise naming the job and how it failed."""
    if done.timed_out:
        raise StepError(f"{log} timed out (deadline {deadline_s:.0f} s); see logs/{log}.log")
    found = [line[len(MARK) :] for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not found:
        raise StepError(f"{log} exited {done.returncode}: {last_line(done.stderr)}")
    return json.loads(found[-1])


def jobs(run: Run, result: StepResult, specs: Specs, deadline: float) -> dict[str, dict[str, Any]]:
    """Run gpu_check_job.py once per spec (log name -> launcher and arguments) and return each answer.

    On a GPU the jobs run one after the other (each is timed); a dry run starts them all at once."""
    worker = launchers.worker("gpu_check_job.py")
    budget = deadline - time.monotonic()
    answers: dict[str, dict[str, Any]] = {}
    pending: dict[str, subprocess.Popen] = {}
    for log, (launcher, arguments) in specs.items():
        pending[log] = start(run, result, [*launcher, worker, *arguments])
        if not run.dry_run:
            answers[log] = answer(finish(run, pending.pop(log), log, deadline), log, budget)
    for log, process in pending.items():
        answers[log] = answer(finish(run, process, log, deadline), log, budget)
    return answers


def spec(arguments: list[str], launcher: list[str] | None = None) -> tuple[list[str], list[str]]:
    return (launcher or [sys.executable], arguments)
