"""`detect_launch_environment` over each launcher's variables (only reads the env; joins no group)."""

from __future__ import annotations

import pytest

from accel_state import LaunchEnvironment, LaunchEnvironmentError, detect_launch_environment
from accel_state.environment.launch_env import DEFAULT_MASTER_PORT
from accel_state.environment.slurm import job_port

# Launcher variables the shared fixture does not clear; cleared here so the host cannot leak in.
_EXTRA_VARS = (
    "SLURM_LOCALID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_LAUNCH_NODE_IPADDR",
    "SLURM_NODEID",
    "SLURM_STEP_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "PMI_LOCAL_RANK",
    "PMI_LOCAL_SIZE",
)


@pytest.fixture
def env(monkeypatch):
    for name in _EXTRA_VARS:
        monkeypatch.delenv(name, raising=False)

    def set_vars(**values: object) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, str(value))

    return set_vars


def test_plain_python_is_rank_zero_of_one(env):
    found = detect_launch_environment()
    assert found == LaunchEnvironment()
    assert (found.rank, found.world_size, found.local_rank, found.local_world_size) == (0, 1, 0, 1)
    assert found.source == "python"
    assert not found.is_distributed
    assert found.master_addr is None and found.master_port is None


def test_torchrun_variables(env):
    env(RANK=5, WORLD_SIZE=8, LOCAL_RANK=1, LOCAL_WORLD_SIZE=4, MASTER_ADDR="10.0.0.2", MASTER_PORT=1234)
    found = detect_launch_environment()
    assert found == LaunchEnvironment(5, 8, 1, 4, "10.0.0.2", 1234, "torchrun")
    assert found.is_distributed


def test_torchrun_without_local_vars_is_one_node_with_default_rendezvous(env):
    env(RANK=1, WORLD_SIZE=2)
    found = detect_launch_environment()
    assert (found.local_rank, found.local_world_size) == (1, 2)
    assert found.master_addr == "127.0.0.1"
    assert found.master_port == DEFAULT_MASTER_PORT == 29500


def test_single_node_keeps_a_given_master_port(env):
    env(RANK=0, WORLD_SIZE=2, MASTER_PORT=40001)
    found = detect_launch_environment()
    assert (found.master_addr, found.master_port) == ("127.0.0.1", 40001)


def test_world_of_one_from_torchrun_is_not_distributed_and_gets_no_rendezvous(env):
    env(RANK=0, WORLD_SIZE=1)
    found = detect_launch_environment()
    assert found.source == "torchrun"
    assert not found.is_distributed
    assert found.master_addr is None and found.master_port is None


def test_rank_without_world_size_is_ignored(env):
    env(RANK=3)
    assert detect_launch_environment() == LaunchEnvironment()


def test_slurm_srun_step(env):
    env(
        SLURM_PROCID=3,
        SLURM_STEP_NUM_TASKS=4,
        SLURM_LOCALID=1,
        SLURM_STEP_TASKS_PER_NODE="2(x2)",
        MASTER_ADDR="node0",
        MASTER_PORT=29999,
    )
    assert detect_launch_environment() == LaunchEnvironment(3, 4, 1, 2, "node0", 29999, "slurm")


def test_slurm_single_node_gets_loopback_and_default_port(env):
    env(SLURM_PROCID=2, SLURM_STEP_NUM_TASKS=3, SLURM_LOCALID=2, SLURM_STEP_TASKS_PER_NODE="3")
    found = detect_launch_environment()
    assert (found.rank, found.world_size, found.local_rank, found.local_world_size) == (2, 3, 2, 3)
    assert (found.master_addr, found.master_port) == ("127.0.0.1", DEFAULT_MASTER_PORT)


def test_slurm_multi_node_falls_back_to_the_launch_node_address(env):
    env(
        SLURM_PROCID=0,
        SLURM_STEP_NUM_TASKS=4,
        SLURM_LOCALID=0,
        SLURM_STEP_TASKS_PER_NODE="2(x2)",
        SLURM_LAUNCH_NODE_IPADDR="192.168.1.7",
    )
    assert detect_launch_environment().master_addr == "192.168.1.7"


def test_slurm_multi_node_takes_the_steps_first_node_over_the_launch_node(env):
    # srun started from a login node: rank 0 runs on the step's first node, not where srun runs.
    env(
        SLURM_PROCID=2,
        SLURM_STEP_NUM_TASKS=4,
        SLURM_LOCALID=0,
        SLURM_NODEID=1,
        SLURM_STEP_TASKS_PER_NODE="2(x2)",
        SLURM_STEP_NODELIST="gpu[07-08]",
        SLURM_JOB_NODELIST="gpu[05-08]",
        SLURM_LAUNCH_NODE_IPADDR="10.1.0.1",
    )
    assert detect_launch_environment().master_addr == "gpu07"


def test_slurm_single_node_stays_on_loopback_wherever_srun_ran(env):
    env(
        SLURM_PROCID=1,
        SLURM_STEP_NUM_TASKS=2,
        SLURM_STEP_TASKS_PER_NODE="2",
        SLURM_LAUNCH_NODE_IPADDR="10.1.0.1",
    )
    assert detect_launch_environment().master_addr == "127.0.0.1"


def test_slurm_port_comes_from_the_job_and_step_unless_master_port_is_set(env):
    env(SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=2, SLURM_JOB_ID=1234, SLURM_STEP_ID=1)
    assert detect_launch_environment().master_port == job_port(1234, 1)
    env(MASTER_PORT=29999, MASTER_ADDR="head")
    assert (detect_launch_environment().master_addr, detect_launch_environment().master_port) == (
        "head",
        29999,
    )


def test_sbatch_allocation_without_srun_step_is_one_process(env):
    # Inside `sbatch`, a plain `python` sees SLURM_PROCID but no step task count.
    env(SLURM_PROCID=0, SLURM_NTASKS=4)
    assert detect_launch_environment() == LaunchEnvironment()


def test_torchrun_variables_win_over_slurm(env):
    env(RANK=1, WORLD_SIZE=2, SLURM_PROCID=0, SLURM_STEP_NUM_TASKS=1)
    found = detect_launch_environment()
    assert found.source == "torchrun"
    assert found.rank == 1


def test_openmpi(env):
    env(
        OMPI_COMM_WORLD_RANK=1,
        OMPI_COMM_WORLD_SIZE=2,
        OMPI_COMM_WORLD_LOCAL_RANK=1,
        OMPI_COMM_WORLD_LOCAL_SIZE=2,
    )
    assert detect_launch_environment() == LaunchEnvironment(
        1, 2, 1, 2, "127.0.0.1", DEFAULT_MASTER_PORT, "openmpi"
    )


def test_openmpi_multi_node_with_master_addr(env):
    env(
        OMPI_COMM_WORLD_RANK=3,
        OMPI_COMM_WORLD_SIZE=4,
        OMPI_COMM_WORLD_LOCAL_RANK=1,
        OMPI_COMM_WORLD_LOCAL_SIZE=2,
        MASTER_ADDR="head",
    )
    assert detect_launch_environment() == LaunchEnvironment(
        3, 4, 1, 2, "head", DEFAULT_MASTER_PORT, "openmpi"
    )


def test_mpich(env):
    env(
        PMI_RANK=2, PMI_SIZE=4, MPI_LOCALRANKID=0, MPI_LOCALNRANKS=2, MASTER_ADDR="10.1.1.1", MASTER_PORT=5000
    )
    assert detect_launch_environment() == LaunchEnvironment(2, 4, 0, 2, "10.1.1.1", 5000, "mpich")


def test_mpich_single_node_local_rank(env):
    env(PMI_RANK=1, PMI_SIZE=2, MPI_LOCALRANKID=1)
    found = detect_launch_environment()
    assert (found.rank, found.local_rank, found.local_world_size) == (1, 1, 2)
    assert found.master_addr == "127.0.0.1"


@pytest.mark.parametrize(
    ("variables", "rank"),
    [
        ({"RANK": 2, "WORLD_SIZE": 2}, 2),
        ({"SLURM_PROCID": 5, "SLURM_STEP_NUM_TASKS": 2}, 5),
        ({"OMPI_COMM_WORLD_RANK": 2, "OMPI_COMM_WORLD_SIZE": 2}, 2),
        ({"PMI_RANK": 7, "PMI_SIZE": 2}, 7),
    ],
)
def test_rank_outside_world_size_names_both(env, variables, rank):
    env(**variables)
    with pytest.raises(LaunchEnvironmentError, match=rf"rank {rank} is outside world size 2"):
        detect_launch_environment()


def test_negative_rank_is_an_error(env):
    env(RANK=-1, WORLD_SIZE=2)
    with pytest.raises(LaunchEnvironmentError, match="rank -1"):
        detect_launch_environment()


def test_world_size_zero_is_an_error(env):
    env(RANK=0, WORLD_SIZE=0)
    with pytest.raises(LaunchEnvironmentError, match="world size 0"):
        detect_launch_environment()


def test_local_rank_outside_local_world_is_an_error(env):
    env(RANK=0, WORLD_SIZE=4, LOCAL_RANK=2, LOCAL_WORLD_SIZE=2, MASTER_ADDR="head")
    with pytest.raises(LaunchEnvironmentError, match="local rank 2 is outside local world size 2"):
        detect_launch_environment()


def test_multi_node_without_master_addr_is_an_error(env):
    env(RANK=0, WORLD_SIZE=4, LOCAL_RANK=0, LOCAL_WORLD_SIZE=2)
    with pytest.raises(LaunchEnvironmentError, match="MASTER_ADDR") as raised:
        detect_launch_environment()
    assert "torchrun" in str(raised.value)


def test_error_names_the_launcher_it_read(env):
    env(OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_LOCAL_SIZE=2)
    with pytest.raises(LaunchEnvironmentError, match="openmpi"):
        detect_launch_environment()
