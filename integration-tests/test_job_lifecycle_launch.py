"""A crashing rank ends the whole job fast; a job that finished its work exits 0 every time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from accel_launch.testing.ranks import launch_script

pytestmark = pytest.mark.slow

CRASHING = textwrap.dedent(
    """
    import os, sys, time
    from accel import Accelerator

    accelerator = Accelerator()
    with open(os.path.join(sys.argv[1], f"pid_{accelerator.process_index}"), "w") as handle:
        handle.write(str(os.getpid()))
    if accelerator.process_index == 1:
        raise ValueError("boom-on-rank-1")
    accelerator.wait_for_everyone()  # rank 0 would wait here forever
    time.sleep(120)
    """
)

# A short DDP training run with no final barrier: the shape of job that used to end in SIGABRT.
FINISHING = textwrap.dedent(
    """
    import torch
    from accel import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(5):
        optimizer.zero_grad()
        accelerator.backward(model(torch.randn(8, 4, device=accelerator.device)).pow(2).mean())
        optimizer.step()
    total = accelerator.reduce(torch.ones(3))
    assert total.tolist() == [accelerator.num_processes] * 3
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent has not read its status yet.
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_crashing_rank_ends_job_launch(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text(CRASHING)
    started = time.monotonic()
    result = launch_script(script, 2, [tmp_path], timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert "boom-on-rank-1" in result.stderr and "Traceback" in result.stderr
    assert elapsed < 30, f"the job took {elapsed:.1f} s to end after a rank crashed"
    pids = [int((tmp_path / f"pid_{rank}").read_text()) for rank in range(2)]
    time.sleep(0.5)
    assert not [pid for pid in pids if _alive(pid)], "a worker outlived the job"


def test_finished_three_process_jobs_exit_zero_every_time_launch(tmp_path):
    script = tmp_path / "finish.py"
    script.write_text(FINISHING)
    # The abort's cause (a gloo thread alive as the interpreter ends) is asserted directly, job by
    # job and teardown by teardown, in test_exit_teardown_launch.py; these runs check the symptom
    # end to end, each a 3-process job on 2 cores (about 10 s).
    runs = 5
    codes, aborts = [], 0
    for _ in range(runs):
        result = launch_script(script, 3, timeout=120)
        codes.append(result.returncode)
        aborts += "terminate called" in result.stderr
    assert codes == [0] * runs, codes
    assert aborts == 0


def test_plain_torchrun_gives_one_world_of_two_processes(tmp_path):
    script = tmp_path / "world.py"
    script.write_text(
        "from accel import Accelerator\n"
        "a = Accelerator()\n"
        "print(f'rank {a.process_index} of {a.num_processes} {a.distributed_type}', flush=True)\n"
    )
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_addr", "127.0.0.1", "--master_port", "0", "--rdzv_backend", "c10d",
        "--rdzv_endpoint", "127.0.0.1:0", str(script),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "rank 0 of 2 MULTI_CPU" in result.stdout and "rank 1 of 2 MULTI_CPU" in result.stdout
