"""What a stalled job tells its user when it is started by plain torchrun (`python -m
torch.distributed.run`), without `accel launch`: real 2-rank gloo jobs.

torchrun's agent is torch's own, so nothing asks the ranks where they are. The collective timeout
still ends the job, and the rank whose collective failed prints one line naming it and its call
site. With ACCEL_DIAGNOSIS_DIR set to a folder, the ranks answer SIGUSR1 as under `accel launch`,
and `python -m accel_launch.launch.diagnosis FOLDER` prints the same diagnosis.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accel_launch.testing.ranks import stop_job

pytestmark = pytest.mark.slow

COLLECTIVE_TIMEOUT = 10  # seconds; ACCEL_TIMEOUT
ENV = {"ACCEL_TIMEOUT": str(COLLECTIVE_TIMEOUT), "ACCEL_DEBUG_MODE": "0", "OMP_NUM_THREADS": "1"}

SCRIPT = """\
import time, torch
import accel_state as st
from accel_state import PartialState

state = PartialState(cpu=True)
st.gather(torch.ones(2))
if state.process_index == 1:
    time.sleep(300)
state.wait_for_everyone()
print("NO STALL", flush=True)
"""
LINE = {"gather": 6, "sleep": 8, "wait_for_everyone": 9}


def _start(tmp_path, env):
    script = tmp_path / "stall.py"
    script.write_text(SCRIPT)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
    ]
    return subprocess.Popen(
        command,
        env={**os.environ, **ENV, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _finish(job, started):
    try:
        stdout, stderr = job.communicate(timeout=COLLECTIVE_TIMEOUT + 30 + 15 - (time.monotonic() - started))
    except subprocess.TimeoutExpired:
        stdout, stderr = stop_job(job)
        pytest.fail(f"the torchrun job did not end in time\n{stderr[-3000:]}")
    assert job.returncode != 0, stderr[-3000:]
    assert "NO STALL" not in stdout
    assert time.monotonic() - started < COLLECTIVE_TIMEOUT + 30
    return stderr


def test_torchrun_stalled_job_ends_and_the_waiting_rank_names_its_collective_and_call_site(tmp_path):
    started = time.monotonic()
    stderr = _finish(_start(tmp_path, {"ACCEL_DIAGNOSIS_DIR": ""}), started)
    expected = (
        f"accel: rank 0 failed in wait_for_everyone #2 at stall.py:{LINE['wait_for_everyone']}; "
        f"last collectives: gather #1 at stall.py:{LINE['gather']}"
    )
    assert expected in stderr, stderr[-4000:]
    assert "CollectiveTimeoutError: wait_for_everyone timed out: rank 0 of 2 waited 10 s" in stderr


def test_torchrun_with_a_diagnosis_folder_and_sigusr1_gives_the_full_diagnosis(tmp_path):
    folder = tmp_path / "diagnosis"
    folder.mkdir()
    started = time.monotonic()
    job = _start(tmp_path, {"ACCEL_DIAGNOSIS_DIR": str(folder)})
    pids = [folder / f"rank{rank}.pid" for rank in (0, 1)]
    while not all(path.exists() for path in pids) and time.monotonic() - started < 30:
        time.sleep(0.2)
    time.sleep(2)  # rank 0 is in wait_for_everyone, rank 1 asleep
    for path in pids:
        os.kill(int(path.read_text()), signal.SIGUSR1)
    reports = [folder / f"rank{rank}.json" for rank in (0, 1)]
    while not all(path.exists() for path in reports) and time.monotonic() - started < 30:
        time.sleep(0.1)
    _finish(job, started)
    result = subprocess.run(
        [sys.executable, "-m", "accel_launch.launch.diagnosis", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    headline = result.stdout.splitlines()[0]
    assert (
        f"rank 1 never reached wait_for_everyone #2: it is in stall.py:{LINE['sleep']} in <module>: "
        "time.sleep(300)" in headline
    ), headline
    assert f"rank 0 waited in wait_for_everyone #2 at stall.py:{LINE['wait_for_everyone']}" in headline, (
        headline
    )
    assert "CollectiveTimeoutError: wait_for_everyone timed out" in result.stdout
    assert Path(folder / "rank1.json").exists()
