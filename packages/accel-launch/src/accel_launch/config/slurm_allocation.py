"""The settings a SLURM allocation implies for an `accel launch` started inside it (salloc, sbatch, srun).

Inside an allocation the job's size is already decided, so `salloc -n 4 accel launch train.py` starts
4 processes without `--num_processes 4`, and `srun --ntasks-per-node=1 accel launch ...` on several
nodes finds its machine rank and the main machine itself. These values rank just above the defaults:
a config file, an ACCEL_* variable or a flag that sets the same key wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accel_state.environment.slurm import first_host, job_port, tasks_per_node

SOURCE = "slurm"


@dataclass(frozen=True)
class AllocationSetting:
    """A setting's value and the SLURM variable it was read from (for messages)."""

    value: Any
    variable: str


def allocation_settings(environ: Mapping[str, str]) -> dict[str, AllocationSetting]:
    """Return the settings the SLURM job around this process implies (none outside a job)."""
    if not environ.get("SLURM_JOB_ID"):
        return {}
    if _in_step(environ):
        return _step_settings(environ)
    # The allocation's shell (salloc) or batch script: this machine runs the tasks SLURM gave its node.
    tasks = tasks_per_node(environ.get("SLURM_TASKS_PER_NODE"), _number(environ, "SLURM_NODEID") or 0)
    return {"num_processes": AllocationSetting(tasks, "SLURM_TASKS_PER_NODE")} if tasks else {}


def _step_settings(environ: Mapping[str, str]) -> dict[str, AllocationSetting]:
    """Return what srun's step says when srun started this `accel launch` (one per node).

    The step's task count is the count of launchers, not of processes: the processes per node are
    not in a step's variables and stay with --num_processes.
    """
    nodes = _number(environ, "SLURM_STEP_NUM_NODES") or 1
    if nodes == 1 or _number(environ, "SLURM_STEP_NUM_TASKS") != nodes:
        return {}
    host = first_host(environ.get("SLURM_STEP_NODELIST"))
    job, step = _number(environ, "SLURM_JOB_ID") or 0, _number(environ, "SLURM_STEP_ID") or 0
    settings = {
        "num_machines": AllocationSetting(nodes, "SLURM_STEP_NUM_NODES"),
        "machine_rank": AllocationSetting(_number(environ, "SLURM_NODEID") or 0, "SLURM_NODEID"),
        "main_process_port": AllocationSetting(job_port(job, step), "SLURM_JOB_ID"),
    }
    if host is not None:
        settings["main_process_ip"] = AllocationSetting(host, "SLURM_STEP_NODELIST")
    return settings


def allocation_warning(environ: Mapping[str, str]) -> str | None:
    """Return why this `accel launch` does not span its SLURM allocation, when it cannot (None: it does)."""
    if not environ.get("SLURM_JOB_ID"):
        return None
    if _in_step(environ):
        nodes = _number(environ, "SLURM_STEP_NUM_NODES") or 1
        launchers = _number(environ, "SLURM_STEP_NUM_TASKS") or 1
        if launchers > nodes:
            return (
                f"srun started {launchers} copies of accel launch on {nodes} node(s), and each starts a job "
                "of its own: start one per node (srun --ntasks-per-node=1 accel launch ...), or start "
                "the script itself with srun (srun python train.py)"
            )
        return None
    nodes = _number(environ, "SLURM_JOB_NUM_NODES") or 1
    if nodes > 1:
        return (
            f"the SLURM allocation spans {nodes} nodes but accel launch starts processes on this one only: "
            "start it once per node (srun --ntasks-per-node=1 accel launch --num_processes N ...)"
        )
    return None


def _in_step(environ: Mapping[str, str]) -> bool:
    """Whether srun started this process (a job step), not the allocation's shell or batch script."""
    return bool(environ.get("SLURM_STEP_NUM_TASKS"))


def _number(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else None
