"""Tests of accel_launch.testing.ranks, which launch real jobs of 1-2 gloo ranks."""

from __future__ import annotations

import dataclasses
import datetime
import os
import time

import pytest

from accel_launch.testing.ranks import LaunchTimeoutError, launch_script, run_on_ranks

# A forked rank that hangs fails its test within this, not after torch's 30 minutes.
FORKED_RANK_TIMEOUT = datetime.timedelta(seconds=120)


@dataclasses.dataclass
class RankInfo:
    rank: int
    world_size: int


def rank_from_env() -> int:
    return int(os.environ["RANK"])


def rank_info() -> RankInfo:
    return RankInfo(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))


def all_reduce_sum(base: int, scale: dict) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=FORKED_RANK_TIMEOUT)
    tensor = torch.tensor([base + scale["by"] * dist.get_rank()])
    dist.all_reduce(tensor)
    # The process group is left alive on purpose: the worker destroys it.
    return int(tensor.item())


def raise_on_rank_1() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=FORKED_RANK_TIMEOUT)
    if dist.get_rank() == 1:
        raise ValueError("boom-rank-1")
    dist.barrier()


class Holder:
    @staticmethod
    def nested_rank() -> int:
        return int(os.environ["RANK"]) + 100


@pytest.mark.slow
def test_run_on_ranks_returns_each_ranks_value_in_rank_order():
    assert run_on_ranks(rank_from_env, 2) == [0, 1]


@pytest.mark.slow
def test_run_on_ranks_returns_instances_of_classes_of_the_test_module():
    assert run_on_ranks(rank_info, 2) == [RankInfo(0, 2), RankInfo(1, 2)]


@pytest.mark.slow
def test_run_on_ranks_passes_args_and_runs_collectives():
    assert run_on_ranks(all_reduce_sum, 2, 10, {"by": 5}) == [25, 25]


@pytest.mark.slow
def test_run_on_ranks_finds_functions_by_qualname():
    assert run_on_ranks(Holder.nested_rank, 1) == [100]


@pytest.mark.slow
def test_run_on_ranks_raises_with_the_failing_ranks_traceback():
    with pytest.raises(AssertionError) as info:
        run_on_ranks(raise_on_rank_1, 2, timeout=60)
    message = str(info.value)
    assert "--- rank 1 ---" in message
    assert "Traceback (most recent call last)" in message
    assert 'raise ValueError("boom-rank-1")' in message
    assert "ValueError: boom-rank-1" in message
    assert "stderr of the job" in message


def test_run_on_ranks_rejects_functions_it_cannot_reload():
    def local() -> None:
        pass

    with pytest.raises(ValueError, match="module-level function"):
        run_on_ranks(local, 1)
    with pytest.raises(ValueError, match="module-level function"):
        run_on_ranks(lambda: 0, 1)


@pytest.mark.slow
def test_launch_script_returns_output_and_exit_code(tmp_path):
    script = tmp_path / "hello.py"
    script.write_text("import sys\nprint('hello', sys.argv[1:])\nsys.exit(4)\n")
    result = launch_script(script, 1, ["a", 1])
    assert result.returncode == 4
    assert "hello ['a', '1']" in result.stdout
    assert "accel launch: rank 0 failed with exit code 4" in result.stderr


@pytest.mark.slow
def test_launch_script_timeout_kills_the_job_and_its_workers(tmp_path, running_pids):
    script = tmp_path / "hang.py"
    script.write_text(
        "import os, sys, time\nfrom pathlib import Path\n"
        "Path(sys.argv[1], f\"pid_{os.environ['RANK']}\").write_text(str(os.getpid()))\n"
        "sys.stdout.write('started\\n'); sys.stdout.flush()\ntime.sleep(600)\n"
    )
    start = time.monotonic()
    with pytest.raises(LaunchTimeoutError) as info:
        launch_script(script, 2, [tmp_path], timeout=6)
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert "hang.py" in message
    assert "started" in message
    assert running_pids(tmp_path) == []
