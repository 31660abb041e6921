"""What SLURM tells a process about its job that every task must agree on: where rank 0 runs, and a port.

srun and sbatch name the job's nodes in a compressed host list (`node[07-09,12],gpu3`) and publish no
rendezvous port, yet the tasks of a step (or the `accel launch` of each node) must pick the same
address and port without talking to each other. Stdlib only: the CLI reads it before torch is imported.
"""

from __future__ import annotations

import re

# Rendezvous ports are drawn from [15000, 31000): below Linux's ephemeral range (32768 and up), which the
# kernel hands to outgoing connections, so a busy node does not hold the port by chance.
PORT_BASE = 15000
PORT_SPAN = 16000
# Steps of one job that may run side by side on a node (`srun ... &`) get ports this far apart.
STEPS_PER_JOB = 8

_BRACKETS = re.compile(r"\[([^\]]*)\]")


def first_host(nodelist: str | None) -> str | None:
    """Return the first host of SLURM's compressed `nodelist` (`node[07-09],gpu3` -> `node07`), None if empty.

    Task 0 of a step runs on its first node (SLURM's block and cyclic distributions both start there),
    so this is where rank 0's rendezvous store listens.
    """
    entry = _first_entry((nodelist or "").strip())
    # Each bracket holds ranges and single numbers (`01-03,07`): the first one starts the expansion.
    host = _BRACKETS.sub(lambda match: match.group(1).split(",")[0].split("-")[0], entry)
    return host or None


def _first_entry(nodelist: str) -> str:
    """Return the part of `nodelist` before its first comma outside brackets."""
    depth = 0
    for index, char in enumerate(nodelist):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            return nodelist[:index]
    return nodelist


def tasks_per_node(raw: str | None, node_index: int) -> int | None:
    """Return node `node_index`'s task count from SLURM's `2(x3),1` notation (3 nodes of 2, then 1)."""
    if not raw:
        return None
    counts: list[int] = []
    for part in raw.split(","):
        count, _, repeat = part.partition("(x")
        if not count.strip().isdigit():
            return None
        counts += [int(count)] * (int(repeat.rstrip(")")) if repeat else 1)
    return counts[node_index] if 0 <= node_index < len(counts) else None


def job_port(job_id: int, step_id: int = 0) -> int:
    """Return the rendezvous port of step `step_id` of job `job_id`: the same on every task of the step.

    Jobs sharing a node get different ports unless their ids collide modulo the span, and so do the
    steps a job runs side by side.
    """
    return PORT_BASE + (job_id * STEPS_PER_JOB + step_id % STEPS_PER_JOB) % PORT_SPAN
