"""The `accel` CLI end to end: two launchers as two machines on loopback, and `accel test` on 2 CPU ranks."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from accel_launch.rendezvous.ports import find_free_port
from accel_launch.testing.ranks import stop_job

pytestmark = pytest.mark.slow

GATHER_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    everyone = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    dist.all_gather(everyone, torch.tensor([rank * 10]))
    values = [int(t.item()) for t in everyone]
    sys.stdout.write(f"GATHER rank={rank} world={world} local={os.environ['LOCAL_RANK']} values={values}\\n")
    sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    """
)


def _accel_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "accel_launch.commands.cli", *args]


def test_cli_two_machines_on_loopback_gather_across_all_four_ranks(tmp_path):
    script = tmp_path / "gather.py"
    script.write_text(GATHER_SCRIPT)
    port = str(find_free_port())
    launchers = [
        subprocess.Popen(
            _accel_command(
                "launch",
                "--cpu",
                "--num_machines",
                "2",
                "--machine_rank",
                str(rank),
                "--num_processes",
                "2",
                "--main_process_ip",
                "127.0.0.1",
                "--main_process_port",
                port,
                str(script),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    deadline = time.monotonic() + 120
    outputs = []
    try:
        for launcher in launchers:
            stdout, stderr = launcher.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outputs.append((launcher.returncode, stdout, stderr))
    except subprocess.TimeoutExpired:
        for launcher in launchers:
            stop_job(launcher)
        pytest.fail("the two-machine job did not finish within 120 s; every process was killed")
    for code, _, stderr in outputs:
        assert code == 0, stderr
    lines = sorted(
        line for _, stdout, _ in outputs for line in stdout.splitlines() if line.startswith("GATHER")
    )
    assert len(lines) == 4, outputs
    for rank, line in enumerate(lines):
        assert line.startswith(f"GATHER rank={rank} world=4 local={rank % 2} ")
        assert line.endswith("values=[0, 10, 20, 30]")
    # Machine 0 printed ranks 0 and 1, machine 1 ranks 2 and 3.
    assert {line.split()[1] for line in outputs[1][1].splitlines() if line.startswith("GATHER")} == {
        "rank=2",
        "rank=3",
    }


def test_cli_accel_test_launches_the_checklist_on_two_cpu_ranks(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nuse_cpu: true\nnum_processes: 2\n"
    )
    result = subprocess.run(
        _accel_command("test", "--config_file", str(config)), capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("accel test: 2 process(es) on cpu")
    checks = [line for line in lines if line.startswith(("PASS", "FAIL"))]
    assert len(checks) == 8 and all(line.startswith("PASS") for line in checks), result.stdout
    assert "world size 2, backend gloo" in result.stdout
    assert lines[-1] == "accel test: all 8 checks passed"
