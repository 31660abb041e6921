"""Reads who-am-I (rank, world size, rendezvous) from whatever launcher started this process.

torchrun (and so `accel launch`), SLURM's srun, OpenMPI's mpirun and MPICH/Intel MPI's mpiexec each
publish the same facts under different names; this module turns them into one `LaunchEnvironment`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from accel_state.environment import env_vars
from accel_state.environment.choices import DEFAULT_MASTER_PORT
from accel_state.environment.slurm import first_host, job_port, tasks_per_node


class LaunchEnvironmentError(RuntimeError):
    """The launcher's variables are incomplete or contradict each other."""


@dataclass(frozen=True)
class LaunchEnvironment:
    """Where this process stands in its job, as the launcher told it."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    source: str = "python"

    @property
    def is_distributed(self) -> bool:
        """Whether the launcher started more than one process."""
        return self.world_size > 1


def _int(name: str) -> int | None:
    return env_vars.read_int(name)


def _from_torchrun() -> LaunchEnvironment | None:
    rank, world = _int(env_vars.RANK), _int(env_vars.WORLD_SIZE)
    if rank is None or world is None:
        return None
    local_rank = _int(env_vars.LOCAL_RANK)
    local_world = _int(env_vars.LOCAL_WORLD_SIZE)
    return LaunchEnvironment(
        rank=rank,
        world_size=world,
        local_rank=rank if local_rank is None else local_rank,
        local_world_size=world if local_world is None else local_world,
        master_addr=env_vars.read_str(env_vars.MASTER_ADDR),
        master_port=_int(env_vars.MASTER_PORT),
        source="torchrun",
    )


def _from_slurm() -> LaunchEnvironment | None:
    # srun sets SLURM_STEP_NUM_TASKS for the step it starts; a plain `python` inside an sbatch
    # allocation only sees SLURM_NTASKS and is a single process, so it must not wait for others.
    rank = _int("SLURM_PROCID")
    world = _int("SLURM_STEP_NUM_TASKS")
    if rank is None or world is None:
        return None
    local_rank = _int("SLURM_LOCALID") or 0
    node = _int("SLURM_NODEID") or 0
    local_world = tasks_per_node(os.environ.get("SLURM_STEP_TASKS_PER_NODE"), node) or world
    addr = env_vars.read_str(env_vars.MASTER_ADDR)
    if addr is None and local_world != world:
        # Rank 0 runs on the step's first node; srun's own node (SLURM_LAUNCH_NODE_IPADDR) may be a
        # login node outside the step, kept only for a step that names no nodes.
        nodes = env_vars.read_str("SLURM_STEP_NODELIST") or env_vars.read_str("SLURM_JOB_NODELIST")
        addr = first_host(nodes) or env_vars.read_str("SLURM_LAUNCH_NODE_IPADDR")
    port = _int(env_vars.MASTER_PORT)
    job = _int("SLURM_JOB_ID")
    if port is None and job is not None:
        # Every task derives the same port from the job, and two jobs sharing a node do not both take 29500.
        port = job_port(job, _int("SLURM_STEP_ID") or 0)
    return LaunchEnvironment(rank, world, local_rank, local_world, addr, port, "slurm")


def _from_openmpi() -> LaunchEnvironment | None:
    rank, world = _int("OMPI_COMM_WORLD_RANK"), _int("OMPI_COMM_WORLD_SIZE")
    if rank is None or world is None:
        return None
    local_rank = _int("OMPI_COMM_WORLD_LOCAL_RANK") or 0
    local_world = _int("OMPI_COMM_WORLD_LOCAL_SIZE") or world
    addr = env_vars.read_str(env_vars.MASTER_ADDR)
    return LaunchEnvironment(
        rank, world, local_rank, local_world, addr, _int(env_vars.MASTER_PORT), "openmpi"
    )


def _from_mpich() -> LaunchEnvironment | None:
    rank, world = _int("PMI_RANK"), _int("PMI_SIZE")
    if rank is None or world is None:
        return None
    local_rank = _int("MPI_LOCALRANKID") or _int("PMI_LOCAL_RANK") or 0
    local_world = _int("MPI_LOCALNRANKS") or _int("PMI_LOCAL_SIZE") or world
    addr = env_vars.read_str(env_vars.MASTER_ADDR)
    return LaunchEnvironment(rank, world, local_rank, local_world, addr, _int(env_vars.MASTER_PORT), "mpich")


_DETECTORS = (_from_torchrun, _from_slurm, _from_openmpi, _from_mpich)


def detect_launch_environment() -> LaunchEnvironment:
    """Return this process's place in its job; a plain `python script.py` is rank 0 of 1."""
    for detect in _DETECTORS:
        found = detect()
        if found is not None:
            return _checked(_with_rendezvous(found))
    return LaunchEnvironment()


def _with_rendezvous(found: LaunchEnvironment) -> LaunchEnvironment:
    """Fill in MASTER_ADDR/PORT where a single-node job can infer them."""
    if not found.is_distributed:
        return found
    addr, port = found.master_addr, found.master_port
    if addr is None and found.local_world_size == found.world_size:
        addr = "127.0.0.1"
    if port is None:
        port = DEFAULT_MASTER_PORT
    return LaunchEnvironment(
        found.rank, found.world_size, found.local_rank, found.local_world_size, addr, port, found.source
    )


def _checked(found: LaunchEnvironment) -> LaunchEnvironment:
    where = f"(read from the {found.source} environment)"
    if found.world_size < 1:
        raise LaunchEnvironmentError(f"world size {found.world_size} must be at least 1 {where}")
    if not 0 <= found.rank < found.world_size:
        raise LaunchEnvironmentError(f"rank {found.rank} is outside world size {found.world_size} {where}")
    if not 0 <= found.local_rank < max(found.local_world_size, 1):
        raise LaunchEnvironmentError(
            f"local rank {found.local_rank} is outside local world size {found.local_world_size} {where}"
        )
    if found.is_distributed and found.master_addr is None:
        raise LaunchEnvironmentError(
            f"{found.world_size} processes span several nodes but {env_vars.MASTER_ADDR} is not set {where}"
        )
    return found


def export_for_torch(found: LaunchEnvironment) -> None:
    """Publish the environment under torchrun's names, which torch's `env://` rendezvous reads."""
    os.environ[env_vars.RANK] = str(found.rank)
    os.environ[env_vars.WORLD_SIZE] = str(found.world_size)
    os.environ[env_vars.LOCAL_RANK] = str(found.local_rank)
    os.environ[env_vars.LOCAL_WORLD_SIZE] = str(found.local_world_size)
    if found.master_addr is not None:
        os.environ[env_vars.MASTER_ADDR] = found.master_addr
    if found.master_port is not None:
        os.environ[env_vars.MASTER_PORT] = str(found.master_port)
