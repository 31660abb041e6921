"""The README's main command after `accel config default`, for real: the config written by the
CLI, then `accel launch --cpu --num_processes 2` running 2 ranks (a flag beats the file); a taken
--main_process_port refused before any rank starts; an unknown ACCEL_* variable warned of once
for the whole job, not once per rank."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import os, sys
    from accel import Accelerator

    accelerator = Accelerator()
    sys.stdout.write(
        f"RANK {os.environ['RANK']} WORLD_SIZE {os.environ['WORLD_SIZE']} "
        f"TYPE {accelerator.distributed_type} PROCESSES {accelerator.num_processes}\\n"
    )
    """
)


def _accel(*args: str, env: dict[str, str], timeout: int = 180) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "accel_launch.commands.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """The session's environment, its own config home, and none of the session's ACCEL_* options."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_")}
    clean.update(ACCEL_HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")
    return clean


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "world.py"
    path.write_text(SCRIPT)
    return str(path)


def _ranks(stdout: str) -> list[str]:
    return sorted(line for line in stdout.splitlines() if line.startswith("RANK "))


def test_num_processes_2_runs_two_ranks_after_accel_config_default(env, script, tmp_path):
    written = _accel("config", "default", env=env)
    assert written.returncode == 0, written.stderr
    config = tmp_path / "home" / "default_config.yaml"
    assert "distributed_type: 'NO'" in config.read_text() and "num_processes: 1" in config.read_text()
    done = _accel("launch", "--cpu", "--num_processes", "2", script, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _ranks(done.stdout) == [
        "RANK 0 WORLD_SIZE 2 TYPE MULTI_CPU PROCESSES 2",
        "RANK 1 WORLD_SIZE 2 TYPE MULTI_CPU PROCESSES 2",
    ]


def test_the_same_with_the_config_named_by_config_file(env, script, tmp_path):
    config = tmp_path / "elsewhere" / "c.yaml"
    written = _accel("config", "default", "--config_file", str(config), env=env)
    assert written.returncode == 0, written.stderr
    done = _accel("launch", "--config_file", str(config), "--cpu", "--num_processes", "2", script, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line.split()[3] for line in _ranks(done.stdout)] == ["2", "2"]


def test_the_files_own_contradiction_is_still_refused(env, script, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("distributed_type: 'NO'\nnum_processes: 2\n")
    done = _accel("launch", "--config_file", str(config), script, env=env)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"accel: {config}: key 'distributed_type' is NO (one process)")


def test_a_taken_main_process_port_is_refused_naming_the_port_and_the_flag(env, script):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = _accel(
            "launch", "--cpu", "--num_processes", "2", "--main_process_port", str(port), script, env=env
        )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"--main_process_port is {port}" in errors[0], done.stderr
    assert "Address already in use" in errors[0]
    assert _ranks(done.stdout) == []  # no rank started


def test_an_unknown_accel_variable_is_warned_of_once_for_the_job(env, script):
    env["ACCEL_MIXED_PRECISON"] = "bf16"
    done = _accel("launch", "--cpu", "--num_processes", "2", script, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(_ranks(done.stdout)) == 2
    mentions = [line for line in done.stderr.splitlines() if "ACCEL_MIXED_PRECISON" in line]
    assert mentions == [
        "accel: warning: environment variable ACCEL_MIXED_PRECISON is not one accel reads; it is "
        "ignored (did you mean ACCEL_MIXED_PRECISION?)"
    ], done.stderr[-3000:]
