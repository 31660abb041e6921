"""The parallelism config reaches the workers as ACCEL_PARALLELISM_CONFIG_* variables: what
worker_env hands torchrun, the options' own checks, and one real two-process launch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from accel_launch.config.schema import ConfigError
from accel_launch.launch.env_check import check_accel_env
from accel_launch.launch.options import LaunchOptions, LaunchOptionsError
from accel_launch.launch.torchrun_args import build_torchrun_call, worker_env

_VARS = (
    "ACCEL_USE_PARALLELISM_CONFIG",
    "ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE",
    "ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE",
    "ACCEL_PARALLELISM_CONFIG_TP_SIZE",
    "ACCEL_PARALLELISM_CONFIG_CP_SIZE",
)


def test_worker_env_carries_every_size_and_the_switch():
    options = LaunchOptions(num_processes=8, parallelism={"dp_replicate": 2, "dp_shard": 2, "tp": 2, "cp": 1})
    env = worker_env(options, environ={})
    assert [env[name] for name in _VARS] == ["1", "2", "2", "2", "1"]


def test_worker_env_fills_the_sizes_not_given_with_one():
    env = build_torchrun_call(
        LaunchOptions(num_processes=4, parallelism={"tp": 4}), "t.py", free_port=lambda: 29999, environ={}
    ).env
    assert [env[name] for name in _VARS] == ["1", "1", "1", "4", "1"]


def test_no_parallelism_means_no_variable():
    env = worker_env(LaunchOptions(num_processes=2), environ={})
    assert not [name for name in env if "PARALLELISM" in name]


def test_an_env_pair_beats_the_launchers_size():
    options = LaunchOptions(
        num_processes=2, parallelism={"dp_shard": 2}, env={"ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE": "2"}
    )
    assert worker_env(options, environ={})["ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "2"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"num_processes": 4, "parallelism": {"dp_shard": 2}},
            "parallelism_config sizes dp_replicate 1 (--parallelism_config_dp_replicate_size) * dp_shard 2 "
            "(--parallelism_config_dp_shard_size) * tp 1 (--parallelism_config_tp_size) * cp 1 "
            "(--parallelism_config_cp_size) = 2, but the world size is 4 (--num_processes 4): "
            "the sizes must multiply to the world size",
        ),
        (
            {"num_processes": 2, "parallelism": {"tp": 0, "dp_shard": 2}},
            "--parallelism_config_tp_size must be at least 1, got 0",
        ),
        (
            {"num_processes": 2, "cpu": True, "parallelism": {"cp": 2}},
            "--parallelism_config_cp_size is 2 but --cpu runs the job on the CPU: torch's context parallel "
            "needs CUDA attention kernels",
        ),
        (
            {"num_processes": 2, "parallelism": {"pp": 2}},
            "parallelism dimension 'pp' is unknown (known: dp_replicate, dp_shard, tp, cp)",
        ),
    ],
    ids=["product", "below-one", "cp-on-cpu", "unknown"],
)
def test_options_refuse_a_mesh_that_cannot_run(kwargs, message):
    with pytest.raises(LaunchOptionsError) as caught:
        LaunchOptions(**kwargs)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_the_world_size_of_options_counts_machines():
    machines = {"num_processes": 2, "num_machines": 2, "main_process_ip": "10.0.0.5"}
    options = LaunchOptions(**machines, parallelism={"dp_shard": 4})
    assert worker_env(options, environ={})["ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE"] == "4"
    world = r"world size is 4 \(--num_processes 2 \* --num_machines 2\)"
    with pytest.raises(LaunchOptionsError, match=world):
        LaunchOptions(**machines, parallelism={"dp_shard": 2})


@pytest.mark.parametrize(
    ("name", "raw"),
    [("ACCEL_USE_PARALLELISM_CONFIG", "maybe"), ("ACCEL_PARALLELISM_CONFIG_TP_SIZE", "0")],
)
def test_an_env_pair_the_ranks_could_not_read_is_refused(name, raw):
    with pytest.raises(ConfigError, match=f"^--env {name}="):
        check_accel_env({name: raw}, where="--env")


# One real launch ---------------------------------------------------------------------------------

REPORT_SCRIPT = textwrap.dedent(
    """
    import os, sys
    names = [name for name in sorted(os.environ) if "PARALLELISM" in name]
    fields = " ".join(f"{name}={os.environ[name]}" for name in names)
    sys.stdout.write(f"REPORT RANK={os.environ['RANK']} WORLD_SIZE={os.environ['WORLD_SIZE']} {fields}\\n")
    sys.stdout.flush()
    """
)


@pytest.mark.slow
def test_two_cpu_processes_each_see_the_parallelism_variables(tmp_path):
    script = tmp_path / "report.py"
    script.write_text(REPORT_SCRIPT)
    command = [sys.executable, "-m", "accel_launch.commands.cli", "launch", "--cpu",
               "--num_processes", "2", "--use_parallelism_config",
               "--parallelism_config_dp_shard_size", "2", str(script)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    reports = sorted(line for line in result.stdout.splitlines() if line.startswith("REPORT "))
    assert len(reports) == 2, result.stdout
    for rank, report in enumerate(reports):
        fields = dict(field.split("=", 1) for field in report.split()[1:])
        assert fields == {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "ACCEL_USE_PARALLELISM_CONFIG": "1",
            "ACCEL_PARALLELISM_CONFIG_DP_REPLICATE_SIZE": "1",
            "ACCEL_PARALLELISM_CONFIG_DP_SHARD_SIZE": "2",
            "ACCEL_PARALLELISM_CONFIG_TP_SIZE": "1",
            "ACCEL_PARALLELISM_CONFIG_CP_SIZE": "1",
        }
