"""One-shot jobs: start a figure's job the way each contender starts its own, and read back its one
answer (block jobs, started once and asked for blocks of work, are `benchmarks.blockjobs`).

raw: `torchrun`; accel: `accel launch --cpu`; accelerate: `torchrun` with `ACCELERATE_USE_CPU=true`
(see `benchmarks.launchers`); a single-process job runs with plain `python`.

A job is a script in benchmarks/workers; its rank 0 prints one line `MARK <json>` (`emit`). Every job
runs one thread per process, with the switches that change what the libraries check (debug mode,
accel's input checks) cleared, so that each job measures the default behaviour unless it asks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks import launchers

MARK = "FIGURE_RESULT "
# Settings of the calling shell that would change what a job measures (debug mode is cleared too).
_CLEARED = ("ACCEL_CHECK_COLLECTIVES", "ACCELERATE_DEBUG_MODE")


class JobError(RuntimeError):
    """A figure's job exited with an error or without an answer."""


def run_job(
    contender: str,
    script: str,
    arguments: Sequence[str],
    *,
    processes: int | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 900,
) -> Any:
    """Run `script` for `contender` (launched on `processes` ranks, or as one plain process when
    None) and return the JSON its rank 0 emitted."""
    if processes is None:
        launcher, env = [sys.executable], launchers.child_env()
    else:
        launcher, env = launchers.launcher(contender, processes)
    for name in _CLEARED:
        env.pop(name, None)
    env.update(extra_env or {})
    command = [*launcher, launchers.worker(script), *arguments]
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=timeout, cwd=launchers.REPO_ROOT
    )
    answers = [line[len(MARK) :] for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not answers:
        raise JobError(
            f"{script} ({contender}, {processes or 1} process(es)) failed with exit {done.returncode}:\n"
            f"{done.stderr[-3000:]}"
        )
    return json.loads(answers[-1])


def emit(result: Any) -> None:
    """Print a job's answer (from rank 0 only) where `run_job` finds it."""
    print(MARK + json.dumps(result), flush=True)


def round_order(contenders: Sequence[str], round_index: int) -> list[str]:
    """Return `contenders` rotated by `round_index`: each leads in turn, so drift hits all alike."""
    shift = round_index % len(contenders) if contenders else 0
    return [*contenders[shift:], *contenders[:shift]]
