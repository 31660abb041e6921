"""accel jobs started by SLURM on the session's one-node cluster: srun, sbatch of the example job
script, `accel launch` inside an allocation, and a task killed mid-training.

The weights are compared exactly: every way of starting the job forms the same 2-rank gloo world on
one machine with the same seed, so each rank sees the same batches and all-reduces the same gradients
in the same order; any difference would mean a different world (rank order, size or sharding).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from accel_launch.testing.ranks import launch_script

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "slurm"
TRAIN = EXAMPLE / "train.py"
JOB_SCRIPT = EXAMPLE / "train.sbatch"
ACCEL_LAUNCH = [sys.executable, "-m", "accel_launch.commands.cli", "launch"]
# A 2-rank job of the example takes about 10 s on 2 busy cores; the rest is headroom.
JOB_TIMEOUT = 240


def _weights(path: Path) -> dict[str, torch.Tensor]:
    assert path.is_file(), f"the job saved no weights at {path}"
    return torch.load(path, weights_only=True)


def _assert_same_weights(path: Path, expected: dict[str, torch.Tensor]) -> None:
    found = _weights(path)
    assert found.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(found[name], tensor), f"{name} differs by {(found[name] - tensor).abs().max()}"


def _ranks_in(output: str) -> list[str]:
    # Anywhere in a line: the tasks of one job share its output file, and a rank's print may land
    # between another's text and its newline.
    return sorted(re.findall(r"rank \d+ of \d+", output))


@pytest.fixture(scope="module")
def launched_weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The weights of `accel launch --cpu --num_processes 2 train.py`: what every SLURM run must match."""
    path = tmp_path_factory.mktemp("accel-launch") / "weights.pt"
    result = launch_script(TRAIN, 2, ["--save_weights", path], timeout=JOB_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    return _weights(path)


def test_srun_two_tasks_train_to_the_weights_of_accel_launch(slurm_cluster, launched_weights, tmp_path):
    path = tmp_path / "weights.pt"
    result = slurm_cluster.run(
        ["srun", "-n", "2", sys.executable, str(TRAIN), "--save_weights", str(path)], timeout=JOB_TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert _ranks_in(result.stdout) == ["rank 0 of 2", "rank 1 of 2"], result.stdout
    _assert_same_weights(path, launched_weights)


def test_sbatch_of_the_example_job_script_trains_to_the_weights_of_accel_launch(
    slurm_cluster, launched_weights, tmp_path
):
    path = tmp_path / "weights.pt"
    job = slurm_cluster.sbatch(
        [str(JOB_SCRIPT), "--save_weights", str(path)],
        output=tmp_path / "job.out",
        cwd=REPO_ROOT,  # the job script names the train script from the repository root
        timeout=JOB_TIMEOUT,
    )
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.output[-3000:]
    assert _ranks_in(job.output) == ["rank 0 of 2", "rank 1 of 2"], job.output
    _assert_same_weights(path, launched_weights)


@pytest.mark.parametrize("allocation", ["salloc", "sbatch"])
def test_accel_launch_inside_an_allocation_spans_it(slurm_cluster, launched_weights, tmp_path, allocation):
    path = tmp_path / "weights.pt"
    # No --num_processes: the allocation's 2 tasks set it.
    launch = [*ACCEL_LAUNCH, str(TRAIN), "--save_weights", str(path)]
    if allocation == "salloc":
        result = slurm_cluster.run(["salloc", "-n", "2", *launch], timeout=JOB_TIMEOUT, cwd=tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        output = result.stdout
    else:
        wrapped = f"--wrap={subprocess.list2cmdline(launch)}"
        job = slurm_cluster.sbatch(
            ["-n", "2", wrapped], output=tmp_path / "job.out", cwd=tmp_path, timeout=JOB_TIMEOUT
        )
        assert (job.state, job.exit_code) == ("COMPLETED", 0), job.output[-3000:]
        output = job.output
    assert _ranks_in(output) == ["rank 0 of 2", "rank 1 of 2"], output
    _assert_same_weights(path, launched_weights)


def test_srun_task_that_dies_ends_the_job_naming_its_rank(slurm_cluster):
    # Rank 1 kills itself with SIGKILL mid-training: rank 0's next all-reduce loses its peer and fails,
    # so the job ends on its own (srun is not told to kill the others), and srun names task 1.
    result = slurm_cluster.run(
        ["srun", "-n", "2", sys.executable, str(TRAIN), "--die_on_rank", "1"], timeout=JOB_TIMEOUT
    )
    assert result.returncode != 0
    assert "task 1: Killed" in result.stderr, result.stderr[-3000:]
    assert "epoch 2" not in result.stdout, "rank 0 trained on without its peer"


def test_sbatch_example_task_killed_from_outside_fails_the_job_naming_its_rank(slurm_cluster, tmp_path):
    # The job would train for hours: rank 1 is killed with SIGKILL once rank 0 has printed an epoch.
    log = tmp_path / "job.out"
    job_id = slurm_cluster.submit([str(JOB_SCRIPT), "--epochs", "100000"], output=log, cwd=REPO_ROOT)
    try:
        os.kill(_task_pid_once_training(slurm_cluster, job_id, log, task=1), signal.SIGKILL)
        job = slurm_cluster.wait(job_id, log, timeout=JOB_TIMEOUT)
    finally:
        slurm_cluster.cancel_all()
    assert job.state == "FAILED" and job.exit_code != 0, job.output[-3000:]
    assert "task 1: Killed" in job.output, job.output[-3000:]


def _task_pid_once_training(cluster, job_id: str, log: Path, *, task: int) -> int:
    """Return the pid of global task `task` of the job's first step, once rank 0 has printed an epoch."""
    deadline = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < deadline and job_id in cluster.job_ids():
        if log.exists() and "epoch 0:" in log.read_text():
            # PID JOBID STEPID LOCALID GLOBALID, one line a process of the step.
            for line in cluster.check(["scontrol", "listpids", f"{job_id}.0"]).splitlines()[1:]:
                fields = line.split()
                if len(fields) == 5 and fields[4] == str(task):
                    return int(fields[0])
        time.sleep(0.5)
    text = log.read_text() if log.exists() else ""
    raise AssertionError(f"task {task} of job {job_id} never started training\n{text[-3000:]}")
