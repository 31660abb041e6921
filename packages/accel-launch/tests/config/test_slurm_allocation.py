"""`accel launch` inside a SLURM allocation takes its size from it, below every file and flag."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from accel_launch.commands.cli import accel
from accel_launch.config.effective import resolve_config
from accel_launch.config.slurm_allocation import allocation_settings, allocation_warning
from accel_state.environment.slurm import job_port

# What salloc's shell and an sbatch script see (no step: srun sets the SLURM_STEP_* variables).
SALLOC = {"SLURM_JOB_ID": "41", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "4"}
# What `srun --ntasks-per-node=1 accel launch ...` on 2 nodes sees on the second node.
STEP_ON_NODE_1 = {
    "SLURM_JOB_ID": "41",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_STEP_ID": "3",
    "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NODELIST": "node[07-08]",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
}


def _values(environ):
    return {name: setting.value for name, setting in allocation_settings(environ).items()}


def test_outside_a_job_nothing_is_implied():
    assert allocation_settings({"SLURM_TASKS_PER_NODE": "4"}) == {}
    assert allocation_warning({}) is None


def test_an_allocation_on_one_node_gives_its_task_count():
    assert _values(SALLOC) == {"num_processes": 4}
    assert allocation_warning(SALLOC) is None


def test_a_batch_script_on_several_nodes_spans_its_own_node_and_warns():
    environ = {**SALLOC, "SLURM_JOB_NUM_NODES": "3", "SLURM_TASKS_PER_NODE": "2(x3)", "SLURM_NODEID": "0"}
    assert _values(environ) == {"num_processes": 2}
    assert "srun --ntasks-per-node=1 accel launch" in allocation_warning(environ)


def test_srun_of_one_launcher_per_node_gives_the_machines():
    assert _values(STEP_ON_NODE_1) == {
        "num_machines": 2,
        "machine_rank": 1,
        "main_process_ip": "node07",
        "main_process_port": job_port(41, 3),
    }
    assert allocation_warning(STEP_ON_NODE_1) is None


def test_srun_of_several_launchers_on_a_node_implies_nothing_and_warns():
    environ = {**STEP_ON_NODE_1, "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NUM_TASKS": "2"}
    assert allocation_settings(environ) == {}
    assert "2 copies of accel launch on 1 node(s)" in allocation_warning(environ)


def test_a_single_node_step_leaves_the_defaults():
    environ = {**STEP_ON_NODE_1, "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NUM_TASKS": "1"}
    assert allocation_settings(environ) == {}


def test_the_allocation_ranks_above_the_defaults_and_says_so():
    config = resolve_config(None, {}, environ=SALLOC)
    assert (config["num_processes"], config.sources["num_processes"]) == (4, "slurm")
    assert config.where("num_processes") == "the SLURM allocation's SLURM_TASKS_PER_NODE"


@pytest.mark.parametrize(
    ("file_values", "flags", "environ", "expected"),
    [
        ({"num_processes": 2}, {}, SALLOC, 2),
        (None, {"num_processes": 1}, SALLOC, 1),
        ({"distributed_type": "NO"}, {}, SALLOC, 1),
    ],
    ids=["file", "flag", "file-type-NO"],
)
def test_a_file_or_flag_beats_the_allocation(file_values, flags, environ, expected):
    assert resolve_config(file_values, flags, environ=environ)["num_processes"] == expected


def test_accel_launch_in_an_allocation_starts_its_tasks(monkeypatch, launched, script):
    for name, value in SALLOC.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(accel, ["launch", "--cpu", script])
    assert result.exit_code == 0, result.output
    argv = launched[0][0]
    assert argv[argv.index("--nproc_per_node") + 1] == "4"


def test_accel_launch_under_srun_on_two_nodes_joins_the_first(monkeypatch, launched, script):
    for name, value in STEP_ON_NODE_1.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(accel, ["launch", "--cpu", "--num_processes", "2", script])
    assert result.exit_code == 0, result.output
    argv = launched[0][0]
    values = {flag: argv[argv.index(flag) + 1] for flag in ("--nnodes", "--node_rank", "--master_addr")}
    assert values == {"--nnodes": "2", "--node_rank": "1", "--master_addr": "node07"}
    assert argv[argv.index("--master_port") + 1] == str(job_port(41, 3))
